"""Public mode, tried as a hostile visitor would (issue 16): models, paths, ceilings, uploads, sessions.

Every case runs against a launched app in public mode (``SPACE_ID`` set on a Space), through
``gradio_client`` or raw HTTP.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import httpx
import pytest
from conftest_app import REPO, advanced_values, call_event, example, fn_index, launch_app
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from app.boundary.visitors import VISITORS
from app.state.settings import PUBLIC_LIMITS, short_name
from app.state.targets import MODELS
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target

os.environ.setdefault("GRADIO_HEARTBEAT_INTERVAL", "1")  # a closed client is noticed within a second

ADVANCED = advanced_values()
SERVER_PATHS = [str(REPO), os.path.expanduser("~")]


@pytest.fixture(scope="module")
def public_app(model_dir, tmp_path_factory):
    data = tmp_path_factory.mktemp("public-data")
    demo, url = launch_app(
        model_dir, public=True, data_dir=data, limits={"max_trace_mb": 1, "max_upload_mb": 2}
    )
    yield demo, url
    demo.close()


@pytest.fixture()
def client(public_app) -> Client:
    return Client(public_app[1], verbose=False)


def session_of(demo, client: Client):
    """The server-side Session of a client (the app runs in this process), as the unload hook finds it."""
    from app.state.session import Session

    session = VISITORS.get(client.session_hash)
    assert isinstance(session, Session), "the client's events did not record its session"
    return session


def no_server_path(text: str) -> bool:
    return not any(p in text for p in SERVER_PATHS)


def trace_text(client: Client, n: int = 12) -> str:
    image, prompt = example()
    return client.predict(handle_file(image), prompt, "recap", n, api_name="/decode")


def test_only_the_listed_models_load_and_the_refusal_says_nothing_about_server_paths(client, model_dir):
    before = len(MODELS)
    answers = set()
    for name in ["/root", "/nonexistent/model", "no-such-org/model", "../../etc", "~", "x" * 5000, "a\x00b",
                 "/etc/passwd"]:
        status, error = client.predict(name, api_name="/load_model")
        assert "not available in this deployment" in error and "shapes-vlm" in error, error
        assert not re.search(r"exist|config|permission|directory", error, re.I), error
        assert len(error) < 400 and no_server_path(error) and no_server_path(status)
        answers.add(error)
    assert len(answers) == 1  # one sentence, whatever was typed
    assert len(MODELS) == before  # nothing was loaded, nothing downloaded
    status, error = client.predict(short_name(model_dir), api_name="/load_model")
    assert not error and "shapes-vlm" in status
    loaded = len(MODELS)
    for spelling in (
        model_dir,
        model_dir + "/",
        model_dir + "/../" + os.path.basename(model_dir),
        "shapes-vlm",
    ):
        # the allowed model, spelled otherwise
        status, error = client.predict(spelling, api_name="/load_model")
        assert not error and "shapes-vlm" in status
    assert len(MODELS) == loaded  # one cache entry per model, however it is spelled


def test_no_server_paths_in_config_status_line_or_api_answers(public_app, client, model_dir):
    demo, url = public_app
    config = httpx.get(url + "config").text
    assert no_server_path(config), [p for p in SERVER_PATHS if p in config]
    trace = DecodeTrace.from_json(trace_text(client))
    assert trace.model == short_name(model_dir) == "shapes-vlm"
    image, prompt = example()
    status, *_ = client.predict(handle_file(image), prompt, "ar", 6, *ADVANCED, api_name="/run")
    assert "model shapes-vlm" in status and no_server_path(status)
    with pytest.raises(AppError) as err:  # an upload that is not an image: named by its file name only
        client.predict(handle_file(str(REPO / "README.md")), prompt, "ar", 4, api_name="/decode")
    assert "README.md" in str(err.value) and no_server_path(str(err.value)) and "/tmp" not in str(err.value)


def test_ceilings_of_every_expensive_knob(client):
    lim = PUBLIC_LIMITS
    image, prompt = example()
    for name, value, message in [("budget", lim.max_budget + 1, f"at most {lim.max_budget}"),
                                 ("max_depth", lim.max_depth + 1, f"at most {lim.max_depth}"),
                                 ("max_children", lim.max_children + 1, f"at most {lim.max_children}"),
                                 ("top_k", lim.max_top_k + 1, f"at most {lim.max_top_k}")]:
        # a number budget is read with "budget: auto" unticked (by default trees are sized by cost)
        advanced = advanced_values(**{"auto_budget": False, name: value})  # a number budget is read unticked
        _, error, *_ = client.predict(handle_file(image), prompt, "recap", 8, *advanced, api_name="/run")
        assert message in error, error
    # each allowed, not all
    advanced = advanced_values(budget=lim.max_budget, max_depth=lim.max_depth, max_children=lim.max_children)
    _, error, *_ = client.predict(handle_file(image), prompt, "recap", 8, *advanced, api_name="/run")
    assert "budget x max_depth x max_children" in error and str(lim.max_tree_work) in error
    with pytest.raises(AppError, match=f"between 1 and {lim.max_new_tokens}"):
        client.predict(handle_file(image), prompt, "ar", lim.max_new_tokens + 1, api_name="/decode")


@pytest.mark.parametrize("top_k", [0, -1, 10**6, 10**12, "lots", 2.5])
def test_save_memory_top_k_is_bounded_and_nothing_is_written(public_app, client, top_k):
    with pytest.raises(AppError, match="top_k") as err:
        client.predict("recap", top_k, api_name="/save_memory")
    assert len(str(err.value)) < 200
    session = session_of(public_app[0], client)
    assert not list(session.files.tmpdir.rglob("memory_*")) and not list(
        session.files.downloads.glob("memory_*")
    )
    assert not session.slots


def test_the_benchmark_shows_only_the_shipped_run(client, public_app):
    from app.tabs import bench

    md, _ = client.predict(bench.SHIPPED_RUN, api_name="/bench_results")
    assert "| recap |" in md
    with pytest.raises(AppError, match="turned off in this public deployment"):
        client.predict(api_name="/bench_quick")
    with pytest.raises(AppError, match="there is no benchmark run"):
        client.predict("../../tmp/x/deep/er", api_name="/bench_results")


def test_uploads_over_the_size_limit_are_refused_by_the_server(public_app, tmp_path):
    _, url = public_app
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (3 * 10**6))  # the fixture's upload limit is 2 MB
    answer = httpx.post(url + "gradio_api/upload", files={"files": ("big.json", big.read_bytes())})
    assert answer.status_code == 413 and "maximum" in answer.text.lower()


def test_trace_size_limits_in_bytes_and_nodes(client, tmp_path):
    text = trace_text(client)
    padded = tmp_path / "padded.json"
    data = json.loads(text)
    data["text"] = "x" * 1_200_000  # over the fixture's 1 MB trace limit, under the 2 MB upload limit
    padded.write_text(json.dumps(data))
    status, error, *_ = client.predict(handle_file(str(padded)), api_name="/load_trace")
    assert "cannot be shown" in error and "up to 1 MB" in error
    wide = json.loads(text)
    wide["steps"] = [{**wide["steps"][0], "nodes": [{}] * (PUBLIC_LIMITS.max_trace_nodes // 2 + 1)}] * 2
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(wide, separators=(",", ":")))
    assert path.stat().st_size < 2 * 10**6
    status, error, *_ = client.predict(handle_file(str(path)), api_name="/load_trace")
    assert "cannot be shown" in error and f"up to {PUBLIC_LIMITS.max_trace_nodes}" in error


def test_uploaded_traces_are_bounded_and_kept_packed(public_app, client, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(trace_text(client))
    for _ in range(PUBLIC_LIMITS.max_uploaded_traces + 3):
        status, error, *_ = client.predict(handle_file(str(path)), api_name="/load_trace")
        assert "loaded from a trace file" in status and not error
    session = session_of(public_app[0], client)
    uploads = [r for r in session.runs if r.source == "upload"]
    assert len(uploads) == PUBLIC_LIMITS.max_uploaded_traces
    assert all(r.packed for r in uploads if r is not session.current) and not session.current.packed
    assert uploads[0].trace.token_ids == session.current.trace.token_ids  # a packed trace unpacks intact


def test_a_closed_client_leaves_no_session_and_no_files(public_app):
    demo, url = public_app
    client = Client(url, verbose=False)
    trace_text(client, 6)
    path = client.predict(handle_file(str(REPO / "assets/examples/pair_A.png")), "Describe.", "tr", 4,
                          *ADVANCED, api_name="/run")[-1]
    assert path
    session = session_of(demo, client)
    tmpdir, downloads = session.files.tmpdir, session.files.downloads
    assert tmpdir.is_dir() and any(tmpdir.iterdir()) and any(downloads.iterdir())  # thumbnails; the trace
    assert downloads.parent == Path(demo.GRADIO_CACHE)  # served from there, without a copy
    client.close()
    deadline = time.time() + 30
    while (tmpdir.exists() or downloads.exists()) and time.time() < deadline:
        time.sleep(0.2)
    assert not tmpdir.exists() and not downloads.exists()
    assert session.closed and not session.runs and not session.slots
    assert VISITORS.get(client.session_hash) is None  # closed and forgotten
    assert demo.delete_cache == (min(PUBLIC_LIMITS.cache_age_s, 600), PUBLIC_LIMITS.cache_age_s)


@pytest.mark.parametrize(
    ("handler", "data", "event_data"),
    [
        ("pick_example", [], {"index": 10**6}),
        ("pick_example", [], {"index": "x"}),
        ("pick_example", [], None),
        ("select_state", [None], {"index": [10**9, 0]}),
        ("select_token", [None], {"index": -5}),
        ("select_token", [None], {"value": 3}),
        ("show_step", [None, "abc"], None),
        ("show_step", [None, 10**30], None),
        ("compare_trees", [None, "x", "y", "inf"], None),
        ("show", [None, "abc"], None),
        ("refresh", [None, "zz", 3, "a", None], None),
        ("memory_info", [None, 5, "x"], None),
        ("follow_method", [{"a": 1}], None),
        ("view", [None, 1, "NaN", "q" * 10**5], None),
    ],
)
def test_hidden_events_called_by_fn_index_with_out_of_range_data(public_app, handler, data, event_data):
    demo, url = public_app
    answer = call_event(url, fn_index(demo, handler), data, event_data)
    if not answer["success"]:  # refused: one clear sentence, never Gradio's generic error
        assert answer["error"] not in ("None", "") and "upstream" not in answer["error"], answer
        assert len(answer["error"]) < 300 and no_server_path(answer["error"])
