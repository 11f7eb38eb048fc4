"""The figures of issue 37 in the app, drawn from traces alone: the numbers on screen are the library's.

The first page's acceptance, tree-size and time views are the shipped run's ``recap.trace.stats`` /
``recap.trace.step_costs`` numbers; an uploaded trace gets them without a model; Compare draws one series
per method and checks a bf16 difference as a tie or an error; the Benchmark tab draws what its results.json
holds (a note where the shipped file predates the figures); the Aliasing tab's run summary exports with
its trace. Each view answers in under a second for the shipped run.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time

import httpx
import pytest
from conftest_app import REPO, call_event, fn_index, launch_app

from app.presenters.bench_acceptance import NOT_RECORDED, bench_acceptance
from app.presenters.compare_figures import method_figures
from app.state.example import open_session, shipped_example
from app.state.runs import Run
from app.state.settings import load_settings
from app.state.targets import MODELS
from app.tabs.aliasing_cost import AliasingCostPanel
from app.tabs.bench import SHIPPED, load_results
from app.tabs.compare import badge, summarize
from app.widgets.run_figures import Context, figures, figures_view
from recap.trace.aliasing_stats import aliasing_cost
from recap.trace.format import DecodeTrace, TraceNode, TraceStep
from recap.trace.stats import run_stats
from recap.trace.step_costs import step_size, time_split

pytest_plugins = ["conftest_app"]  # fixtures: model_dir

PARTS = ("draft", "verify", "update")  # the time chart's stacked areas


@pytest.fixture(scope="module")
def shipped():
    example = shipped_example(load_settings())
    if example is None:
        pytest.skip("no shipped example run in this checkout")
    return example


def plot(value) -> dict:
    return json.loads(value["plot"]) if isinstance(value, dict) else json.loads(value.to_json())


def drawn_rates(fig: dict) -> dict[int, float]:
    """Depth -> the rate a depth chart draws (bars only: unreached depths are markers, not rates)."""
    return {x: y for t in fig["data"] if t["type"] == "bar" for x, y in zip(t["x"], t["y"])}


def check_figures_are_the_librarys(view, trace: DecodeTrace, step_no: int) -> None:
    stats = run_stats(trace, depths=trace.config["max_depth"])
    depth = plot(view.depth)
    assert drawn_rates(depth) == {d.depth: d.rate for d in stats.per_depth if d.rate is not None}
    unreached = [x for t in depth["data"] if t["type"] == "scatter" for x in t["x"]]
    assert unreached == [d.depth for d in stats.per_depth if d.rate is None]
    hist = plot(view.histogram)["data"][0]
    assert dict(zip(hist["x"], hist["customdata"])) == stats.accepted_hist
    size = step_size(next(s for s in trace.steps if s.step == step_no))
    gains = plot(view.gains)["data"][0]
    assert gains["y"] == [g.gain for g in size.gains] and gains["x"] == list(range(1, len(size.gains) + 1))
    split = time_split(trace)
    drawn = {t["name"]: t["y"][-1] for t in plot(view.times)["data"] if t["name"] in PARTS}
    assert drawn == pytest.approx({"draft": 1e3 * split.draft_s[-1], "verify": 1e3 * split.verify_s[-1],
                                   "update": 1e3 * split.update_s[-1]})
    assert f"**{stats.tokens_per_pass:.2f}** tokens per pass" in view.acceptance


def test_the_first_page_draws_the_shipped_runs_figures(model_dir, tmp_path_factory, shipped):
    if not load_settings(model_dir).example_run:
        pytest.skip("the shipped run is of the embedded model")
    demo, url = launch_app(model_dir, public=True, data_dir=tmp_path_factory.mktemp("data"))
    try:
        config = httpx.get(url + "config").json()
        ui = {c["props"]["elem_id"]: c["props"] for c in config["components"]
              if c.get("props", {}).get("elem_id")}
        view = figures(shipped.trace, shipped.step)
        for key, elem in (("depth", "recap-acceptance-depth"), ("histogram", "recap-acceptance-hist"),
                          ("gains", "recap-size-gains"), ("times", "recap-time-split")):
            assert plot(ui[elem]["value"])["data"] == plot(getattr(view, key))["data"], key
        assert ui["recap-acceptance-text"]["value"] == view.acceptance
        check_figures_are_the_librarys(view, shipped.trace, shipped.step)
        # the Benchmark tab: the shipped results.json holds the figures: each row's acceptance, as written
        shipped_results = json.loads((REPO / "docs" / "bench" / "results.json").read_text())
        note = bench_acceptance(shipped_results).note
        assert ui["recap-bench-acceptance-note"]["value"] == note != NOT_RECORDED
        # the aliasing summary of the session's run (the shipped one), computed on the tab's run chooser
        answer = call_event(url, fn_index(demo, "show"), [None, None], session_hash="figures0001")
        assert answer["success"], answer
        cost = aliasing_cost(shipped.trace)
        assert f"refused **{cost.refused}** of the **{cost.drafted}**" in answer["data"][0]
        table = answer["data"][2].get("value", answer["data"][2])  # a component update carries its value
        assert [row[1] for row in table["data"]] == [c.refusals for c in cost.contexts]
    finally:
        demo.close()


def test_each_view_answers_in_under_a_second(shipped):
    trace = shipped.trace
    for name, work in (("acceptance, size, time", lambda: figures(trace, shipped.step)),
                       ("aliasing", lambda: aliasing_cost(trace)),
                       ("compare", lambda: method_figures({"recap": trace, "ar": trace}, "ar", {})),
                       ("bench", lambda: bench_acceptance(load_results(SHIPPED)[0]))):
        t0 = time.perf_counter()
        work()
        assert time.perf_counter() - t0 < 1.0, name


def test_an_uploaded_trace_gets_the_figures_without_a_model(shipped, tmp_path, monkeypatch):
    def no_model(*_a, **_k):
        raise AssertionError("a model was asked for")

    monkeypatch.setattr(MODELS, "get", no_model)
    settings = load_settings()
    session = open_session(settings.limits, None, None)
    trace = DecodeTrace.from_json(shipped.trace.to_json())  # as an upload reads it
    session.add_run(Run(session.next_run_id(), trace, None, None, "upload", "uploaded trace"))
    session.view_step = 3
    check_figures_are_the_librarys(figures_view(session), trace, 3)


def test_a_conversation_draws_one_series_per_turn(shipped):
    second = dataclasses.replace(shipped.trace, turn=2, steps=shipped.trace.steps[:5])
    second.token_ids = [t for s in second.steps for t in s.emitted]
    view = figures(second, 2, Context(turns=(shipped.trace, second)))
    names = [t["name"] for t in plot(view.depth)["data"] if t["type"] == "bar"]
    assert names == ["turn 1", "turn 2"]
    by_turn = {t["name"]: drawn_rates({"data": [t]}) for t in plot(view.depth)["data"] if t["type"] == "bar"}
    assert by_turn["turn 2"] == {d.depth: d.rate for d in run_stats(second, depths=8).per_depth
                                 if d.rate is not None}


def _ar(trace: DecodeTrace, seconds: float) -> DecodeTrace:
    """An autoregressive run of the same tokens: one root per step, ``seconds`` each."""
    steps = [TraceStep(step=i + 1, nodes=[TraceNode(index=0, token=t, text="", parent=-1, depth=0, score=1.0,
                                                    fused=1.0, origin="root", target_token=t, target_text="",
                                                    accepted=True)],
                       accepted=[0], bonus_token=t, bonus_text="", emitted=[t], draft_s=0.0, verify_s=seconds,
                       update_s=0.0) for i, t in enumerate(trace.token_ids)]
    return dataclasses.replace(trace, method="ar", steps=steps, config={})


def test_compare_per_method_and_the_break_even(shipped):
    trace = shipped.trace
    ar = _ar(trace, 0.002)
    figs = method_figures({"ar": ar, "recap": trace}, "ar", {"recap": "RECAP", "ar": "autoregressive"})
    # ar drafts nothing: it has no acceptance series
    assert [t["name"] for t in plot(figs.depth)["data"] if t["type"] == "bar"] == ["RECAP"]
    split = time_split(trace, ar)
    assert split.one_token_s == pytest.approx(0.002) and split.one_token_source == "ar run"
    assert f"break-even of **{split.break_even:.2f}**" in figs.costs
    lines = {t["name"]: t for t in plot(figs.times)["data"]}
    assert lines["autoregressive"]["y"][-1] == pytest.approx(2.0 * len(trace.token_ids))
    view = figures(trace, shipped.step, Context(ar=ar))  # the Decode view of a compared run
    assert [sh["y0"] for sh in plot(view.times)["layout"]["shapes"]] == [pytest.approx(split.break_even)]
    assert f"Break-even: {split.break_even:.2f} tokens per pass" in view.time


def test_compare_badge_a_tie_is_lossless_an_error_is_not(shipped):
    trace = shipped.trace
    other = dataclasses.replace(trace, method="tr", token_ids=[*trace.token_ids[:-1], 0])
    runs = {"ar": Run(1, trace), "recap": Run(2, trace), "tr": Run(3, other)}
    tie = summarize(runs, {"tr": (True, "bf16 tie at token 110: top-2 gap 0.0039, tolerance 0.0052")})
    assert not tie["identical"] and tie["lossless"] and tie["methods"]["tr"]["lossless"]
    assert "lossless" in badge(tie) and "bf16 tie at token 110" in badge(tie) and "WARNING" not in badge(tie)
    bad = summarize(runs, {"tr": (False, "bf16 error at token 110: gap 0.3, tolerance 0.0052")})
    assert not bad["lossless"] and "WARNING" in badge(bad) and "bf16 error at token 110" in badge(bad)
    same = summarize({"ar": Run(1, trace), "recap": Run(2, trace)})
    assert same["lossless"] and same["methods"]["recap"]["acceptance"] == run_stats(trace, depths=8).to_dict()


def test_the_benchmark_draws_the_recorded_figures_and_says_when_they_are_missing(shipped):
    data, _ = load_results(SHIPPED)
    assert bench_acceptance(data).note != NOT_RECORDED  # the shipped run holds the figures
    for row in data["summary"].values():  # as a run written before the figures existed
        row.get("overall", {}).pop("acceptance", None)
    old = bench_acceptance(data)
    assert old.note == NOT_RECORDED and not plot(old.depth)["data"]
    recorded = {t["name"]: dict(zip(t["x"], t["customdata"])) for t in plot(old.histogram)["data"]}
    hist = data["summary"]["recap"]["overall"]["accepted_hist"]
    assert recorded["recap"] == {int(k): v for k, v in hist.items()}
    stats = run_stats(shipped.trace, depths=8)
    new = bench_acceptance({"summary": {"hf": {"overall": {"tokens": 3}},
                                        "recap": {"overall": {"acceptance": stats.to_dict()}}}})
    assert drawn_rates(plot(new.depth)) == {d.depth: d.rate for d in stats.per_depth if d.rate is not None}
    assert new.note == f"**recap** {stats.summary()}"


def test_the_aliasing_summary_exports_with_its_trace(shipped):
    settings = load_settings()
    session = open_session(settings.limits, None, shipped)
    try:
        path = AliasingCostPanel().export(session, None)
        doc = json.loads(gzip.decompress(open(path, "rb").read()))
        assert doc["schema"] == "recap-aliasing-cost"
        trace = DecodeTrace.from_dict(doc["trace"])
        assert trace.token_ids == shipped.trace.token_ids
        assert doc["aliasing_cost"] == json.loads(json.dumps(aliasing_cost(trace).to_dict()))
    finally:
        session.files.remove()


def test_the_charts_of_a_hand_built_trace_mark_a_depth_never_reached() -> None:
    # tests/test_stats.py's trace: depth 1 accepted 2 of 3, depth 2 1 of 1, depth 3 0 of 1, depth 4 never
    from test_stats import _trace

    from app.presenters.acceptance import depth_figure, histogram_figure

    stats = run_stats(_trace(), depths=4)
    fig = plot(depth_figure({"recap": stats}))
    bars = next(t for t in fig["data"] if t["type"] == "bar")
    assert bars["x"] == [1, 2, 3] and bars["y"] == [2 / 3, 1.0, 0.0]  # a refused depth is a real 0
    assert bars["customdata"] == [[2, 3], [1, 1], [0, 1]]
    unreached = next(t for t in fig["data"] if t["type"] == "scatter")
    assert unreached["x"] == [4] and unreached["y"] == [0] and unreached["name"] == "not reached"
    hist = plot(histogram_figure({"recap": stats}))["data"][0]
    assert hist["x"] == [0, 1, 2] and hist["customdata"] == [1, 1, 1] and hist["y"] == [1 / 3] * 3


def test_the_gain_chart_of_a_hand_built_step_draws_the_needed_gain_and_the_stop() -> None:
    from test_step_costs import _step

    from app.presenters.costs import gain_figure, size_markdown
    from recap.trace.sizing import TreeSizing

    sizing = TreeSizing(stop="cost", expected_tokens=2.1, last_gain=0.3, needed_gain=0.25, pass_s=0.01,
                        node_s=0.001)
    size = step_size(_step(1, [-1, 0, 0, 1], [1.0, 0.3, 0.5, 0.3], [0, 2], [12, 7], (0.001, 0.003, 0.001),
                           order=[0, 2, 1, 3], sizing=sizing))
    fig = plot(gain_figure(size))
    assert fig["data"][0]["y"] == [0.5, 0.3, 0.3]
    shapes = sorted((s["type"], s["x0"], s["y0"]) for s in fig["layout"]["shapes"])
    needed = next(s for s in fig["layout"]["shapes"] if s["y0"] == s["y1"])
    stop = next(s for s in fig["layout"]["shapes"] if s["x0"] == s["x1"])
    assert needed["y0"] == 0.25 and stop["x0"] == 3.5, shapes  # the line at the needed gain, the stop after 3
    assert fig["layout"]["title"]["text"] == "Step 1: predicted 210 tokens/s, realised 400 tokens/s"
    assert "exceeded **0.250**" in size_markdown(size) and "it took **3**" in size_markdown(size)


def test_texts_from_a_file_are_escaped_in_the_charts(shipped) -> None:
    from app.presenters.acceptance import depth_figure
    from app.presenters.costs import gain_figure

    step = dataclasses.replace(shipped.trace.steps[0])
    step.nodes = [dataclasses.replace(n) for n in step.nodes]
    step.nodes[1].text = '<img src=x onerror="alert(1)">'
    custom = plot(gain_figure(step_size(step)))["data"][0]["customdata"]
    texts = [row[1] for row in custom]
    assert not any("<img" in t for t in texts) and any("&lt;img" in t for t in texts)
    fig = plot(depth_figure({"<b>row</b>": run_stats(shipped.trace)}))
    assert fig["data"][0]["name"] == "&lt;b&gt;row&lt;/b&gt;"
