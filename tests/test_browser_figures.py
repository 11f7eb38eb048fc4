"""Issue 37's figures in a real headless Chromium: the numbers drawn are the trace's.

On the first page (public mode, the shipped run, no click but opening a tab): the Decode view's
acceptance by depth and histogram, why the step on screen has its size, where the run's time goes; the
Benchmark tab's note and recorded histogram; the Aliasing tab's run summary, whose context row opens its
state. Then an uploaded trace redraws them with no model, and Compare draws one series per method. Each
drawn value is read from the Plotly figure in the page and checked against ``recap.trace.stats`` /
``step_costs`` / ``aliasing_stats`` computed here from the same trace. With RECAP_UPDATE_SCREENSHOTS=1
the views are saved as docs/screenshot_acceptance.png, screenshot_size.png, screenshot_time.png,
screenshot_bench_acceptance.png, screenshot_aliasing_cost.png and screenshot_compare_figures.png.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium, wait_for_text
from conftest_app import REPO
from test_browser import screenshot
from test_browser_first_page import shipped_trace

from app.state.settings import load_settings
from app.state.steps import telling_step
from recap.trace.aliasing_stats import aliasing_cost
from recap.trace.stats import AcceptanceStats, run_stats
from recap.trace.step_costs import step_size, time_split

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, public_app_url

pytestmark = pytest.mark.browser

skip_without_chromium()

READ_PLOT = """sel => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  if (!el || !el.data) return null;
  return el.data.map(t => ({name: t.name, type: t.type, x: Array.from(t.x || []), y: Array.from(t.y || []),
                            customdata: t.customdata ? Array.from(t.customdata) : null}));
}"""


@pytest.fixture(scope="module")
def page(model_dir, request):
    if not load_settings(model_dir).example_run:
        pytest.skip("the shipped example run is of the embedded model")
    with app_page(request.getfixturevalue("public_app_url"), height=1400) as pg:
        yield pg


def drawn(page, selector: str) -> list[dict]:
    """The traces of the Plotly figure under ``selector``, once it is drawn."""
    page.wait_for_function(f"({READ_PLOT})({json.dumps(selector)}) !== null")
    return page.evaluate(READ_PLOT, selector)


def shot(page, selector: str, name: str, *, docs: bool = True) -> None:
    """The element's picture in test-artifacts/ (and docs/, with RECAP_UPDATE_SCREENSHOTS=1)."""
    full = screenshot(page, name)  # waits out Gradio's "processing" veil, checks the page is not blank
    # the element's own events too
    page.wait_for_function("s => !(document.querySelector(s)?.innerText ?? 'processing')"
                           ".includes('processing')", arg=selector, timeout=20_000)
    page.wait_for_timeout(300)  # Plotly's last redraw
    page.locator(selector).first.screenshot(path=str(full))
    if docs and os.environ.get("RECAP_UPDATE_SCREENSHOTS"):
        shutil.copy(full, REPO / "docs" / name)


def cell(page, table: str, row: int, col: int) -> str:
    """A Gradio Dataframe's cell text (its cells carry data-testid cell-ROW-COL)."""
    return page.locator(f"{table} [data-testid='cell-{row}-{col}']").first.inner_text().strip()


def rates(traces: list[dict]) -> dict[int, float]:
    return {x: y for t in traces if t["type"] == "bar" for x, y in zip(t["x"], t["y"])}


def test_acceptance_drawn_is_the_traces(page):
    trace = shipped_trace()
    stats = run_stats(trace, depths=trace.config["max_depth"])
    depth = drawn(page, "#recap-acceptance-depth")
    assert rates(depth) == pytest.approx({d.depth: d.rate for d in stats.per_depth if d.rate is not None})
    hist = drawn(page, "#recap-acceptance-hist")[0]
    assert dict(zip(hist["x"], hist["customdata"])) == stats.accepted_hist
    assert f"{stats.tokens_per_pass:.2f}" in page.locator("#recap-acceptance-text").inner_text()
    shot(page, "#recap-run-figures", "screenshot_acceptance.png")


def test_why_this_size_drawn_is_the_steps(page):
    trace = shipped_trace()
    page.get_by_role("tab", name="Why this size").click()
    size = step_size(trace.steps[telling_step(trace) - 1])
    bars = drawn(page, "#recap-size-gains")[0]
    assert bars["y"] == pytest.approx([g.gain for g in size.gains])
    text = page.locator("#recap-size-text").inner_text()
    assert f"emitted {size.emitted}" in text and "predicted unknown" in text  # a fixed tree: no cost measured
    shot(page, "#recap-run-figures", "screenshot_size.png")


def test_where_the_time_goes_drawn_is_the_runs(page):
    trace = shipped_trace()
    page.get_by_role("tab", name="Where the time goes").click()
    split = time_split(trace)
    lines = {t["name"]: t["y"][-1] for t in drawn(page, "#recap-time-split")
             if t["name"] in ("draft", "verify", "update")}
    assert lines == pytest.approx({"draft": 1e3 * split.draft_s[-1], "verify": 1e3 * split.verify_s[-1],
                                   "update": 1e3 * split.update_s[-1]})
    assert "not measured" in page.locator("#recap-time-text").inner_text()
    shot(page, "#recap-run-figures", "time_shipped.png", docs=False)  # docs show a compared run's


def test_the_benchmark_draws_what_its_results_hold(page):
    page.get_by_role("tab", name="Benchmark").click()
    # the shipped run holds each row's figures: drawn as written
    wait_for_text(page, "#recap-bench-acceptance-note", "recap-auto")
    results = json.loads((REPO / "docs" / "bench" / "results.json").read_text())
    recorded = {t["name"]: dict(zip(t["x"], t["customdata"])) for t in drawn(page, "#recap-bench-hist")}
    summary = results["summary"]
    rows = {name: AcceptanceStats.from_dict(s["overall"]["acceptance"]) for name, s in summary.items()
            if s.get("overall", {}).get("acceptance", {}).get("drafted")}
    assert recorded == {name: st.accepted_hist for name, st in rows.items()} and "recap" in recorded
    shot(page, "#recap-bench-acceptance", "screenshot_bench_acceptance.png")


def test_the_aliasing_summary_is_the_traces_and_a_row_opens_its_state(page):
    trace = shipped_trace()
    cost = aliasing_cost(trace)
    page.get_by_role("tab", name="Aliasing").click()
    wait_for_text(page, "#recap-alias-cost", f"refused {cost.refused} of the {cost.drafted}")
    bars = drawn(page, "#recap-alias-sources")[0]
    assert dict(zip(bars["x"], bars["y"])) == cost.by_source
    assert cell(page, "#recap-alias-contexts", 0, 1) == str(cost.contexts[0].refusals)
    page.locator("#recap-alias-contexts [data-testid='cell-0-0']").first.click()
    page.wait_for_selector('#recap-alias-tree [data-testid="plotly"] g.textpoint text')  # its state's tree
    shot(page, "#recap-alias-cost-panel", "screenshot_aliasing_cost.png")
    page.get_by_role("tab", name="Decode").click()  # the Decode view followed, to that step
    # the title is SVG text: textContent, not innerText
    page.wait_for_function("t => (document.querySelector('#recap-tree .gtitle')?.textContent ?? '')"
                           ".startsWith(t)", arg=f"Step {cost.contexts[0].step}:")


def test_an_uploaded_trace_redraws_them_with_no_model(page, tmp_path):
    trace = shipped_trace()
    short = dataclasses.replace(trace, steps=trace.steps[:9])
    short.token_ids = [t for s in short.steps for t in s.emitted]
    short.token_texts = short.token_texts[:len(short.token_ids)]
    path = tmp_path / "short_trace.json"
    short.to_json(path)
    page.get_by_role("tab", name="Decode").click()
    page.locator(".label-wrap", has_text="Trace files").first.click()
    page.get_by_test_id("Upload a trace (.json, .json.gz)-upload-button").set_input_files(str(path))
    wait_for_text(page, "#recap-status", "loaded from a trace file")
    stats = run_stats(short, depths=trace.config["max_depth"])
    page.get_by_role("tab", name="Acceptance").click()
    wait_for_text(page, "#recap-acceptance-text", f"over {stats.steps} passes")
    assert rates(drawn(page, "#recap-acceptance-depth")) == pytest.approx(
        {d.depth: d.rate for d in stats.per_depth if d.rate is not None})


def test_compare_draws_one_series_per_method(page):
    page.get_by_role("tab", name="Decode").click()
    choose_first_example(page, 40)
    page.get_by_role("tab", name="Compare").click()
    page.click("#recap-compare-run")
    wait_for_text(page, "#recap-compare-badge", "token-identical")
    hist = drawn(page, "#recap-compare-hist")
    steps = {cell(page, "#recap-compare-table", r, 0): int(cell(page, "#recap-compare-table", r, 2))
             for r in range(4)}
    # each method's passes in the histogram are the steps its row of the table says
    assert hist and all(sum(t["customdata"]) == steps[t["name"]] for t in hist)
    assert "Break-even" in page.locator("#recap-compare-costs").inner_text()
    shot(page, "#recap-compare-figures", "screenshot_compare_figures.png")
    # the Decode view now shows the comparison's RECAP run: its time against the autoregressive run's
    page.get_by_role("tab", name="Decode").click()
    page.get_by_role("tab", name="Where the time goes").click()
    wait_for_text(page, "#recap-time-text", "Break-even:")
    text = page.locator("#recap-time-text").inner_text()
    line = page.evaluate("() => document.querySelector('#recap-time-split .js-plotly-plot').layout.shapes"
                         ".map(s => s.y0)")
    assert len(line) == 1 and f"Break-even: {line[0]:.2f} tokens per pass" in text  # the line is the number
    shot(page, "#recap-run-figures", "screenshot_time.png")
