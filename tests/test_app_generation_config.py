"""What the app says of a model's own generation config: a sampling one is sampled, and shown; one
that still cannot be reproduced is refused, naming the field.

A generation config that really samples (do_sample with top_k other than 1) is now decoded as
``generate(do_sample=True)`` decodes it, from a private generator seeded with the Sampling
group's seed (off: the group's settings do not apply, its seed does): the status line and the
Compare badge name the settings the run sampled with. A config the engine cannot reproduce
(several return sequences) is refused with the field's name. A trace of an older build that
carries a ``notice`` (a field no config of this build needs, now gone) still loads.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest_app import advanced_values, downloaded_trace, example
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import recap
from app.state.decoding import DEFAULT_SEED
from app.tabs.compare import badge
from recap.trace.format import TraceSampling

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url

ADVANCED = advanced_values()


def with_generation_config(model_dir: str, out, **fields) -> str:
    """A copy of the app's test model whose generation config has ``fields`` on top."""
    shutil.copytree(model_dir, out, ignore=shutil.ignore_patterns("stages", "training_*", "evaluation*"))
    path = out / "generation_config.json"
    gc = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**gc, **fields}))
    return str(out)


@pytest.fixture(scope="module")
def sampling_model(model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The app's test model, its generation config made to sample (do_sample=True, top_k=50)."""
    return with_generation_config(model_dir, tmp_path_factory.mktemp("sampling") / "sampling-model",
                                  do_sample=True, top_k=50)


def test_a_models_own_sampling_config_is_sampled_and_its_settings_shown(app_url, sampling_model):
    client = Client(app_url, verbose=False)
    client.predict(sampling_model, api_name="/load_model")
    image, prompt = example()
    status, error, *_, trace_path = client.predict(
        handle_file(image), prompt, "recap", 8, *ADVANCED, api_name="/run"
    )
    trace = downloaded_trace(trace_path)
    assert not error
    # the group off: its seed
    assert trace.sampling == TraceSampling(temperature=1.0, top_k=50, seed=DEFAULT_SEED)
    assert f"sampled: temperature 1 · top-k 50 · top-p off · seed {DEFAULT_SEED}" in status
    want = recap.generate(recap.load_target(sampling_model), image, prompt, method="ar", max_new_tokens=8,
                          seed=DEFAULT_SEED)
    assert trace.token_ids == want.token_ids  # generate(do_sample=True) under the model's own config
    numbers = json.loads(client.predict(handle_file(image), prompt, 8, api_name="/compare"))
    assert numbers["identical"] and numbers["sampling"]["top_k"] == 50
    assert numbers["methods"]["recap"]["token_ids"] == trace.token_ids
    assert "under sampling" in badge(numbers) and "top-k 50" in badge(numbers)


def test_a_config_still_refused_is_named(app_url, model_dir, tmp_path):
    refused = with_generation_config(model_dir, tmp_path / "two-sequences", do_sample=True, top_k=50,
                                     num_return_sequences=2)
    client = Client(app_url, verbose=False)
    client.predict(refused, api_name="/load_model")
    image, prompt = example()
    _, error, *_ = client.predict(handle_file(image), prompt, "recap", 8, *ADVANCED, api_name="/run")
    assert "num_return_sequences" in error and "cannot reproduce" in error
    with pytest.raises(AppError, match="num_return_sequences"):
        client.predict(handle_file(image), prompt, 8, api_name="/compare")


def test_an_older_builds_trace_with_a_notice_loads(app_url, tmp_path):
    client = Client(app_url, verbose=False)
    image, prompt = example()
    data = json.loads(client.predict(handle_file(image), prompt, "recap", 8, api_name="/decode"))
    data["notice"] = "sampled <b>loudly</b> [here](http://evil.example)"
    path = tmp_path / "noticed.json"
    path.write_text(json.dumps(data))
    status, error, *_ = client.predict(handle_file(str(path)), api_name="/load_trace")
    assert not error and "loaded from a trace file" in status
    assert "loudly" not in status and "Notice" not in status  # the key is ignored, never shown
