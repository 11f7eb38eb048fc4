"""The app over HTTP (gradio_client): /decode, streaming /run, and every bad input the API can reach."""

from __future__ import annotations

import json

import pytest
from conftest_app import advanced_values, downloaded_trace, example, fn_index
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError, ValidationError
from PIL import Image

import recap
from app.state.steps import telling_step
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, launched, app_url

D = recap.RecapConfig()
ADVANCED = advanced_values()


@pytest.fixture()
def client(app_url: str) -> Client:
    return Client(app_url, verbose=False)


def decode(client: Client, image, prompt: str, method: str = "recap", n: int = 24) -> DecodeTrace:
    text = client.predict(handle_file(image) if image else None, prompt, method, n, api_name="/decode")
    return DecodeTrace.from_json(text)


def run(client: Client, image, prompt: str, method: str = "recap", n: int = 24, advanced=None) -> tuple:
    return client.predict(handle_file(image) if image else None, prompt, method, n, *(advanced or ADVANCED),
                          api_name="/run")


@pytest.mark.parametrize("method", ["recap", "tr", "pld", "ar"])
def test_decode_matches_generate(client, target, method):
    image, prompt = example()
    trace = decode(client, image, prompt, method, 24)
    ref = recap.generate(target, image, prompt, method="ar", max_new_tokens=24)
    assert trace.token_ids == ref.token_ids
    assert trace.method == method and trace.steps
    assert sum(len(s.emitted) for s in trace.steps) == len(trace.token_ids)


def test_memory_persists_across_runs_and_visitors(app_url):
    image, prompt = example()
    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    first = decode(a, image, prompt, "recap", 16)
    second = decode(a, image, prompt, "recap", 16)
    other = decode(b, image, prompt, "recap", 16)
    assert second.request == first.request + 1  # the session's memory kept the first request
    assert other.request == first.request  # another visitor has its own memory (the same warm start)
    # the memory panel reports it, and reset empties it
    info = a.predict("recap", D.top_k, api_name="/reset_memory")
    assert "**0** of" in info
    assert decode(a, image, prompt, "recap", 8).request == 0


def test_streaming_yields_several_updates(client):
    image, prompt = example()
    job = client.submit(handle_file(image), prompt, "recap", 48, *ADVANCED, api_name="/run")
    updates = list(job)
    assert len(updates) >= 3
    status, error, tree, _slider, text, lengths, times, trace_path = job.result()
    assert "finished" in status and not error
    assert tree["type"] == "plotly" and "accepted path" in tree["plot"]
    trace = downloaded_trace(trace_path)
    assert len(trace.token_ids) == 48 or trace.stop_reason == "eos"


def test_the_tree_title_says_how_many_nodes_the_step_drafted_under_the_cap(client):
    image, prompt = example()
    _status, _error, tree, *_, trace_path = run(client, image, prompt, "recap", 8)
    trace = downloaded_trace(trace_path)
    shown = trace.steps[telling_step(trace) - 1]  # a finished run opens on its most telling step
    # the default's cost-aware trees: the cap is this (local) deployment's ceiling, the library's 256
    assert shown.tree_size is not None and trace.budget == D.MAX_BUDGET
    title = json.loads(tree["plot"])["layout"]["title"]["text"]
    assert title.startswith(f"Step {shown.step}: {shown.tree_size} drafted (cap {trace.budget})")


def test_cost_aware_trees_make_the_budget_a_cap_and_the_title_says_each_steps_size(client):
    image, prompt = example()
    advanced = advanced_values(cost_aware=True)  # "budget is a cap (cost-aware trees)"
    _status, error, tree, *_, trace_path = run(client, image, prompt, "recap", 24, advanced=advanced)
    assert not error
    trace = downloaded_trace(trace_path)
    assert trace.config["cost_aware"] is True and trace.budget == D.MAX_BUDGET  # this deployment's cap
    sizes = [s.tree_size for s in trace.steps]
    assert all(0 <= n <= trace.budget for n in sizes)
    # the trace holds exactly the tree it drew
    assert all(s.tree_size == len(s.nodes) - 1 for s in trace.steps)
    title = json.loads(tree["plot"])["layout"]["title"]["text"]
    shown = telling_step(trace)
    assert title.startswith(f"Step {shown}: {sizes[shown - 1]} drafted (cap {trace.budget})")


def test_no_image_runs_text_only(client):
    trace = decode(client, None, "Describe the image.", "recap", 8)
    assert trace.image_key is None and trace.token_ids


def test_not_an_image(client, tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("this is not a picture")
    with pytest.raises(AppError, match="not a readable image"):
        decode(client, str(bad), "Describe the image.")
    status, error, *_ = run(client, str(bad), "Describe the image.")
    assert "not a readable image" in error


def test_decompression_bomb_refused(client, tmp_path):
    bomb = tmp_path / "bomb.png"
    Image.new("1", (14000, 14000)).save(bomb, optimize=False)
    with pytest.raises(AppError, match="too large"):
        decode(client, str(bomb), "Describe the image.")


def test_huge_image_resized_or_clear_message(client, tmp_path):
    big = tmp_path / "big.png"
    Image.new("L", (6400, 6400), 200).save(big)  # 41 M pixels: over the limit, shrunk to 4096
    try:
        trace = decode(client, str(big), "Describe the image.", "ar", 4)
    except AppError as exc:  # a model with a short context says so clearly
        assert "tokens long" in str(exc)
    else:
        assert trace.token_ids


@pytest.mark.parametrize(
    ("prompt", "n", "message"),
    [
        ("", 8, "prompt is empty"),
        ("   ", 8, "prompt is empty"),
        ("x" * (recap.core.limits.MAX_PROMPT_CHARS + 1), 8, "limit is"),
        ("Describe.", 0, "between 1 and"),
        ("Describe.", 100000, "between 1 and"),
        ("Describe.", 2.5, "whole number"),
    ],
)
def test_bad_prompt_or_length(client, prompt, n, message):
    image, _ = example()
    with pytest.raises(AppError, match=message):
        decode(client, image, prompt, "recap", n)


def test_unknown_method(client):
    image, prompt = example()
    with pytest.raises(AppError, match="unknown method"):
        decode(client, image, prompt, "magic", 8)


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [("budget", 0, "budget"), ("max_depth", 99, "max_depth"), ("top_k", 0, "top_k"), ("eps", 2.0, "eps"),
     ("depth_discount", 0.0, "depth_discount"), ("specificity_1", -1.0, "specificity"),
     ("suffix_min_len", 0, "suffix_min_len")],
)
def test_advanced_settings_out_of_range(client, name, value, field):
    image, prompt = example()
    # a number budget is read only with "budget: auto" unticked (the default sizes trees by cost)
    advanced = advanced_values(**{name: value, "auto_budget": False})
    status, error, *_ = run(client, image, prompt, advanced=advanced)
    assert field in error and "advanced settings" in error
    # the session stays usable
    assert decode(client, image, prompt, "ar", 4).token_ids


# The /run parameters after the request's four, as published before they had names: positional
# callers keep working as long as these lead (a new setting goes after them).
PUBLISHED_ORDER = (
    "budget",
    "auto_budget",
    "max_depth",
    "top_k",
    "max_children",
    "specificity_1",
    "specificity_2",
    "specificity_3",
    "fusion",
    "eps",
    "use_m2",
    "use_m3",
    "suffix",
    "suffix_min_len",
    "suffix_max_tokens",
    "depth_discount",
    "cost_aware",
)


def test_run_names_its_parameters_after_the_settings_in_the_published_order(client):
    from app.widgets.config_form import PARAM_NAMES
    from app.widgets.sampling_form import KNOB_NAMES
    from app.widgets.sampling_form import default_values as sampling_defaults

    info = client.view_api(return_format="dict", print_info=False)
    params = info["named_endpoints"]["/run"]["parameters"]
    # the Sampling group's knobs come last: a positional caller of an older build keeps its positions
    assert [p["parameter_name"] for p in params] == [
        "image",
        "prompt",
        "method",
        "max_new_tokens",
        *PARAM_NAMES,
        *KNOB_NAMES,
    ]
    assert PARAM_NAMES[: len(PUBLISHED_ORDER)] == PUBLISHED_ORDER
    defaults = {p["parameter_name"]: p["parameter_default"] for p in params[4:]}
    assert all(p["parameter_has_default"] for p in params[4:])
    assert list(defaults.values()) == [*ADVANCED, *sampling_defaults().values()]


def test_run_takes_the_settings_by_name(client):
    image, prompt = example()
    _status, error, *_, trace_path = client.predict(
        handle_file(image), prompt, "recap", 8, budget=6, auto_budget=False, max_depth=3, api_name="/run"
    )
    assert not error
    trace = downloaded_trace(trace_path)
    assert trace.budget == 6 and trace.config["max_depth"] == 3 and trace.config["top_k"] == D.top_k


def test_model_that_fails_to_load_keeps_previous(client, model_dir):
    from app.state.settings import short_name

    status, error = client.predict("/nonexistent/model", api_name="/load_model")
    assert "model unchanged" in error and "does not exist" in error
    # the short name, never the server path
    assert short_name(model_dir) in status and model_dir not in status
    image, prompt = example()
    assert decode(client, image, prompt, "ar", 4).model == short_name(model_dir)


def test_allowed_models_restriction(tmp_path):
    from app.state.settings import Settings

    (tmp_path / "b").mkdir()
    s = Settings(default_model="hub/a", allowed_models=("hub/a", str(tmp_path / "b")))
    assert s.model_choices() == ["a", "b"]  # visitors see short names
    assert s.check_model("b").source == str(tmp_path / "b")
    assert s.check_model(str(tmp_path / "x" / ".." / "b")).name == "b"  # another spelling: the same model
    with pytest.raises(ValueError, match="not available"):
        s.check_model("c")
    local = Settings(default_model="hub/a")
    assert local.check_model("org/anything").source == "org/anything"  # locally any model may be typed in


def test_trace_upload_view_and_bad_traces(client, tmp_path):
    image, prompt = example()
    text = client.predict(handle_file(image), prompt, "recap", 12, api_name="/decode")
    good = tmp_path / "good.json"
    good.write_text(text)
    status, error, tree, *_ = client.predict(handle_file(str(good)), api_name="/load_trace")
    assert "loaded from a trace file" in status and not error
    for name, content, message in [
        ("broken.json", "{not json", "not a JSON document"),
        ("foreign.json", json.dumps({"schema": "something-else"}), "not a RECAP trace"),
        ("bad_path.json", text.replace('"accepted": [0', '"accepted": [5', 1), "accepted path"),
    ]:
        path = tmp_path / name
        path.write_text(content)
        out = client.predict(handle_file(str(path)), api_name="/load_trace")
        assert message in out[1], out[1]


def test_memory_file_roundtrip_and_foreign_vocabulary(client, target, tmp_path):
    image, prompt = example()
    decode(client, image, prompt, "recap", 12)
    saved = client.predict("recap", D.top_k, api_name="/save_memory")
    mem = recap.TokenMemory.load(saved, vocab_size=target.vocab_size)
    assert mem.filled > 0
    foreign = tmp_path / "foreign.safetensors"
    recap.TokenMemory(target.vocab_size + 7, D.top_k).save(foreign)
    info = client.predict(handle_file(str(foreign)), "recap", D.top_k, api_name="/load_memory")
    assert "memory unchanged" in info and "vocabulary" in info
    assert f"**{mem.filled}** of" in info  # the memory kept its rows
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    assert "memory unchanged" in client.predict(
        handle_file(str(junk)), "recap", D.top_k, api_name="/load_memory"
    )
    info = client.predict(handle_file(saved), "tr", D.top_k, api_name="/load_memory")
    assert f"**{mem.filled}** of" in info


def test_run_twice_in_one_session(client):
    image, prompt = example()
    jobs = [client.submit(handle_file(image), prompt, "recap", 64, api_name="/decode") for _ in range(2)]
    ok = refused = 0
    for job in jobs:
        try:
            DecodeTrace.from_json(job.result())
            ok += 1
        # refused before it is queued: one job at a time per visitor
        except (AppError, ValidationError) as exc:
            assert "already queued or running" in str(exc) or "already running" in str(exc)
            refused += 1
    assert ok >= 1 and ok + refused == 2


def test_stop_mid_run_ends_it_after_its_step_and_keeps_the_partial_run(launched, target):
    """/stop's handler while Run streams (called in process, so the order is fixed: the first step is drawn,
    then Stop): the run ends "stopped" after that step, its tokens the model's own, the session usable."""
    from app.state.session import Session
    from app.widgets.config_form import default_values
    from app.widgets.sampling_form import default_values as sampling_defaults

    image, prompt = example()
    n = 48
    full = recap.generate(target, image, prompt, method="ar", max_new_tokens=n).token_ids
    assert len(full) > 1, "the example's answer is one token: nothing to stop"
    demo, session = launched.demo, Session()
    stream = demo.fns[fn_index(demo, "run")].fn(session, image, prompt, "ar", n, **default_values(),
                                                **sampling_defaults())
    next(stream)  # the first step is on screen: the run is under way
    assert session.jobs.running
    demo.fns[fn_index(demo, "stop")].fn(session)
    *_, (status, error, *_rest, trace_path) = stream
    assert not error and not session.jobs.running
    trace = downloaded_trace(trace_path)
    assert trace.stop_reason == "stopped" and "stopped" in status
    assert trace.token_ids == full[: len(trace.token_ids)] and len(trace.steps) == 1  # ended after its step
    *_, (status, error, *_rest, trace_path) = demo.fns[fn_index(demo, "run")].fn(
        session, image, prompt, "ar", 4, **default_values(), **sampling_defaults())
    # the stop did not outlive its run
    assert not error and downloaded_trace(trace_path).stop_reason != "stopped"


def test_stop_with_nothing_running_stops_nothing(client):
    """/stop over HTTP when the visitor has no run: no error, and their next decode runs to its end."""
    image, prompt = example()
    client.predict(api_name="/stop")
    trace = decode(client, image, prompt, "ar", 6)
    assert trace.stop_reason in ("eos", "max_new_tokens") and trace.token_ids


def test_auto_budget(client):
    image, prompt = example()
    status, error, *_rest, trace_path = run(
        client, image, prompt, "recap", 16, advanced=advanced_values(auto_budget=True)
    )
    assert not error and downloaded_trace(trace_path).budget > 0
    assert "tree budget" in status
