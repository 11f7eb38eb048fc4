"""The generation-config notice reaches the visitor: a sampling config decoded greedily says so.

When a model's generation config really samples (do_sample with top_k other than 1), the engine
decodes greedily and the trace carries a ``notice``; the Decode tab's status line and the Compare
tab's badge show it, escaped like any other text that may come from a file.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest_app import advanced_values, example
from gradio_client import Client, handle_file

from app.compare_tab import badge
from app.views import md_text
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url

ADVANCED = advanced_values()


@pytest.fixture(scope="module")
def sampling_model(model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The app's test model, its generation config made to sample (do_sample=True, top_k=50)."""
    out = tmp_path_factory.mktemp("sampling") / "sampling-model"
    shutil.copytree(model_dir, out, ignore=shutil.ignore_patterns("stages", "training_*", "evaluation*"))
    path = out / "generation_config.json"
    gc = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**gc, "do_sample": True, "top_k": 50}))
    return str(out)


def test_the_decode_tab_and_the_comparison_show_the_notice_of_a_sampling_config(app_url, sampling_model):
    client = Client(app_url, verbose=False)
    client.predict(sampling_model, api_name="/load_model")
    image, prompt = example()
    status, error, *_, trace_path = client.predict(handle_file(image), prompt, "recap", 8, *ADVANCED, api_name="/run")
    trace = DecodeTrace.load(trace_path)
    assert not error and "do_sample=True, top_k=50" in trace.notice
    assert "Notice:" in status and md_text(trace.notice, 400) in status  # the status line is Markdown
    numbers = json.loads(client.predict(handle_file(image), prompt, 8, api_name="/compare"))
    assert numbers["identical"] and numbers["notice"] == trace.notice
    assert md_text(trace.notice, 400) in badge(numbers)


def test_a_greedy_config_shows_no_notice(app_url):
    image, prompt = example()
    status, *_ = Client(app_url, verbose=False).predict(handle_file(image), prompt, "recap", 8, *ADVANCED,
                                                       api_name="/run")
    assert "Notice" not in status


def test_an_uploaded_traces_notice_is_shown_as_text(app_url, tmp_path):
    client = Client(app_url, verbose=False)
    image, prompt = example()
    data = json.loads(client.predict(handle_file(image), prompt, "recap", 8, api_name="/decode"))
    data["notice"] = "sampled <b>loudly</b> [here](http://evil.example)"
    path = tmp_path / "noticed.json"
    path.write_text(json.dumps(data))
    status, error, *_ = client.predict(handle_file(str(path)), api_name="/load_trace")
    assert not error and "Notice:" in status
    assert "&lt;b&gt;loudly&lt;/b&gt;" in status and "<b>" not in status  # no HTML of the file reaches the page
    assert "](http" not in status  # nor a link
