"""The first minute on the Space (issue 24), over HTTP in public mode: the page opens on the shipped
example run before any click and without the model, a run lands on its most telling step (Decode and
Compare), the memory panels say what the memory is from the first page load, the benchmark is drawn,
and a run's trace is kept gzipped, once, while uploads take .json.gz within the same bounds."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path

import httpx
import pytest
from conftest_app import advanced_values, call_event, downloaded_trace, example, fn_index, launch_app
from gradio_client import Client, handle_file

from app.state.example import shipped_example
from app.state.settings import example_run_dir, load_settings
from app.state.targets import MODELS
from app.tabs.decode.tab import first_page
from app.widgets.sampling_form import default_values as sampling_defaults
from recap.shapes.example_run import read_example
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir

ADVANCED = advanced_values()
TRACE_MB = 1  # the fixture's trace ceiling (its uploads: 2 MB)


def longest_path_step(lengths: list[int]) -> int:
    """The rule, spelled out: the step (1-based) with the longest accepted path, the earliest on ties."""
    return lengths.index(max(lengths)) + 1


@pytest.fixture(scope="module")
def first_app(model_dir, tmp_path_factory):
    if not load_settings(model_dir).example_run:
        pytest.skip(
            "the shipped example run is of the embedded model; this test model opens on an empty page"
        )
    demo, url = launch_app(model_dir, public=True, data_dir=tmp_path_factory.mktemp("data"),
                           limits={"max_trace_mb": TRACE_MB, "max_upload_mb": 2})
    yield demo, url
    demo.close()


@pytest.fixture(scope="module")
def shipped() -> DecodeTrace:
    return read_example()[0]


def session_of(demo, session_hash: str):
    """The visitor's Session, as the unload hook finds it (``app.boundary.visitors``)."""
    from app.boundary.visitors import VISITORS
    from app.state.session import Session

    session = VISITORS.get(session_hash)
    assert isinstance(session, Session), "the visitor's events did not record its session"
    return session


def layout_values(url: str) -> dict[str, dict]:
    """The page's components as /config sends them (what the browser draws first), by elem_id."""
    config = httpx.get(url + "config").json()
    return {
        c["props"]["elem_id"]: c["props"] for c in config["components"] if c.get("props", {}).get("elem_id")
    }


def plot_title(value: dict) -> str:
    return json.loads(value["plot"])["layout"]["title"]["text"]


def test_the_page_opens_on_the_shipped_run_with_its_request_and_the_benchmark(first_app, shipped):
    _, url = first_app
    ui = layout_values(url)
    best = longest_path_step([s.accepted_length for s in shipped.steps])
    assert best < len(shipped.steps)  # not the last step (a column of end-of-turn tokens)
    assert ui["recap-prompt"]["value"] == example()[1] == shipped.prompt
    assert Path(ui["recap-image"]["value"]["path"]).name == Path(example()[0]).name
    assert (
        "shipped example run" in ui["recap-status"]["value"]
        and "press **Run**" in ui["recap-status"]["value"]
    )
    assert plot_title(ui["recap-tree"]["value"]).startswith(f"Step {best}:")
    assert (ui["recap-step"]["value"], ui["recap-step"]["maximum"]) == (best, len(shipped.steps))
    assert "".join(span["token"] for span in ui["recap-output"]["value"]).strip() == shipped.text.strip()
    # inside the step: the play, the mask, the inspector
    assert json.loads(ui["recap-play"]["value"])["frames"]
    assert json.loads(ui["recap-mask"]["value"]["plot"])["data"] and ui["recap-node"]["value"] is not None
    assert json.loads(ui["recap-lengths"]["value"]["plot"])["data"]  # the run's charts
    bench = json.loads(ui["recap-bench-plot"]["value"]["plot"])
    assert {t["type"] for t in bench["data"]} == {"bar"} and "| recap |" in ui["recap-bench-table"]["value"]


def test_a_new_session_holds_the_shipped_run_and_its_panels_need_no_model(first_app, shipped, monkeypatch):
    demo, url = first_app

    def no_model(*_a, **_k):
        raise AssertionError("a model was asked for")

    monkeypatch.setattr(MODELS, "get", no_model)
    best = longest_path_step([s.accepted_length for s in shipped.steps])
    # the session's current run is the shipped one, on its most telling step: the slider moves on it
    answer = call_event(url, fn_index(demo, "show_step"), [None, best + 1], session_hash="firstpage01")
    assert answer["success"], answer
    status, _error, tree, step, *_ = answer["data"]
    assert "shipped example run" in status and plot_title(tree).startswith(f"Step {best + 1}:")
    session = session_of(demo, "firstpage01")
    # every session shows the one trace read at start-up (nothing per visitor but the Run around it)
    assert (
        session.current.source == "example"
        and session.current.trace is shipped_example(load_settings()).trace
    )
    # the memory panel on page load: warm, with its rows and requests, and nothing made yet
    answer = call_event(url, fn_index(demo, "memory_info"), [None, "recap", 8], session_hash="firstpage02")
    assert answer["success"], answer
    text = answer["data"][0]
    assert "warm memory" in text and "60 request(s)" in text and "rows filled" in text
    assert not session_of(demo, "firstpage02").slots  # said, not made: the first run makes it


def test_a_run_lands_on_its_longest_accepted_path_and_the_slider_goes_anywhere(first_app, tmp_path):
    _, url = first_app
    client = Client(url, verbose=False, download_files=str(tmp_path))
    image, prompt = example()
    status, error, tree, step, *_, trace_path = client.predict(
        handle_file(image), prompt, "recap", 128, *ADVANCED, api_name="/run"
    )
    trace = downloaded_trace(trace_path)
    best = longest_path_step([s.accepted_length for s in trace.steps])
    assert not error and "shipped" not in status  # the visitor's own run replaced the shipped one
    assert step["value"] == best and plot_title(tree).startswith(f"Step {best}:")
    last = len(trace.steps)
    _status, _error, tree, step, *_ = client.predict(last, api_name="/show_step")
    assert step["value"] == last and plot_title(tree).startswith(f"Step {last}:")


def test_a_comparison_lands_on_the_most_telling_step(first_app):
    demo, url = first_app
    image, prompt = example()
    uploaded = httpx.post(
        url + "gradio_api/upload", files={"files": (Path(image).name, Path(image).read_bytes())}
    )
    file = {"path": uploaded.json()[0], "orig_name": Path(image).name, "meta": {"_type": "gradio.FileData"}}
    knobs = list(sampling_defaults().values())  # the Compare tab's Sampling group, off
    answer = call_event(
        url,
        fn_index(demo, "compare_ui"),
        [None, file, prompt, 48, *ADVANCED, *knobs, "recap", "tr"],  # the two trees' methods by name, last
        session_hash="firstpage03",
    )
    assert answer["success"], answer
    badge, _table, _chart, step, tree_a, *_, numbers = answer["data"]
    assert "token-identical" in badge
    best = longest_path_step(numbers["methods"]["recap"]["accepted_lengths"])
    assert step["value"] == best and plot_title(tree_a).startswith(f"RECAP · step {best}:")
    session = session_of(demo, "firstpage03")
    # the Decode view too
    assert session.current is session.compare.runs["recap"] and session.view_step == best


def traces_under(cache: Path) -> set[Path]:
    """Every trace file under Gradio's cache. os.walk, not rglob: other sessions' folders there
    are deleted as their sessions close, and rglob fails on a folder gone between list and scan."""
    return {Path(d) / f for d, _, files in os.walk(cache) for f in files if f.startswith("trace_run")}


def test_a_runs_trace_is_on_disk_once_and_gzipped(first_app, tmp_path):
    demo, url = first_app
    client = Client(url, verbose=False, download_files=str(tmp_path / "client"))
    image, prompt = example()
    cache = Path(demo.GRADIO_CACHE)
    kept = []
    for _ in range(2):
        before = traces_under(cache)  # (a time window would also catch the previous test's trace)
        trace_path = client.predict(handle_file(image), prompt, "recap", 128, *ADVANCED, api_name="/run")[-1]
        session = session_of(demo, client.session_hash)
        on_server = sorted(traces_under(cache) - before)
        # one copy, where Gradio serves it from
        assert [p.parent for p in on_server] == [session.files.downloads]
        assert session.files.downloads.parent == cache and not list(session.files.tmpdir.rglob("trace_run*"))
        raw = on_server[0].read_bytes()
        assert raw == Path(trace_path).read_bytes() and on_server[0].name.endswith(".json.gz")
        assert len(raw) < len(gzip.decompress(raw)) / 4  # gzipped JSON, about a tenth of it
        kept = list(session.files.downloads.glob("trace_run*"))
        assert kept == on_server  # the earlier run's trace is gone: a session keeps its latest only
    assert downloaded_trace(kept[0]).token_ids


def test_a_gzipped_trace_uploads_and_a_gzip_bomb_is_refused(first_app, shipped, tmp_path):
    _, url = first_app
    client = Client(url, verbose=False)
    good = tmp_path / "shipped.json.gz"
    good.write_bytes(gzip.compress(shipped.to_json().encode()))
    status, error, tree, step, *_ = client.predict(handle_file(str(good)), api_name="/load_trace")
    best = longest_path_step([s.accepted_length for s in shipped.steps])
    assert not error and "loaded from a trace file" in status and step["value"] == best  # on its telling step
    cases = {
        "bomb.json.gz": (gzip.compress(b" " * (30 * 10**6)), f"unpacks to over {TRACE_MB} MB"),
        "cut.json.gz": (good.read_bytes()[: good.stat().st_size // 2], "cut short"),
        "junk.json.gz": (b"\x1f\x8b" + b"not gzip at all" * 10, "not a readable gzip file"),
        "text.json.gz": (gzip.compress(b"{not json"), "not a JSON document"),
        "foreign.json.gz": (gzip.compress(json.dumps({"schema": "other"}).encode()), "not a RECAP trace"),
        "two.json.gz": (good.read_bytes() * 2, "more than one trace"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert path.stat().st_size < 2 * 10**6
        status, error, *_ = client.predict(handle_file(str(path)), api_name="/load_trace")
        assert "cannot be shown" in error and message in error, (name, error)
        assert "loaded from a trace file" in client.predict(best, api_name="/show_step")[0]  # the view stayed


def test_the_memory_tab_shows_the_warm_memory_before_any_run(first_app):
    _, url = first_app
    stats, rows, *_ = Client(url, verbose=False).predict("recap", 8, "", api_name="/memory_view")
    assert "rows filled" in stats and "warm memory" in stats and "60 request(s)" in stats
    assert (rows["value"]["data"] if "value" in rows else rows["data"])


def test_another_default_model_opens_on_an_empty_page(tmp_path):
    assert example_run_dir(str(tmp_path)) == ""
    settings = dataclasses.replace(load_settings(str(tmp_path)), example_run="")
    assert shipped_example(settings) is None
    page, panel = first_page(None)
    assert page.status.startswith("No run yet") and panel is None
