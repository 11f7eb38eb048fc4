"""The app in a real headless Chromium (Playwright): pick an example, run, inspect the tree, move the step
slider.

Skipped (with the reason) only when /usr/bin/chromium is missing and CI is unset; in CI it fails.
Screenshots go to test-artifacts/; with RECAP_UPDATE_SCREENSHOTS=1 the other tabs' are also
saved as docs/screenshot_<tab>.png (the first page, docs/screenshot.png, is
tests/test_browser_first_page.py's).
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium, wait_for_text
from conftest_app import REPO

from app.presenters.tree_geometry import token_label
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, browser_app_url

ARTIFACTS = REPO / "test-artifacts"

pytestmark = pytest.mark.browser

skip_without_chromium()


@pytest.fixture(scope="module")
def page(browser_app_url):
    """This module's own page (a visitor of its own): its tests go in order on it, no other module touches
    it."""
    with app_page(browser_app_url) as pg:
        yield pg


def downloaded_run(page):
    """The trace of the page's run, as the app hands it out (the Trace files download), read in full."""
    if not page.locator("#recap-trace-file a").count():
        page.get_by_text("Trace files").click()  # the download sits in a closed accordion
    link = page.locator("#recap-trace-file a").first
    link.wait_for(state="attached")
    raw = page.request.get(link.get_attribute("href")).body()
    return DecodeTrace.from_json(gzip.decompress(raw))


def svg_texts(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def tree_title(page) -> str:
    return " ".join(svg_texts(page, "#recap-tree .gtitle"))


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    from PIL import Image, ImageStat

    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    # events still running (e.g. the inspector refreshing after the tree drew) show Gradio's
    # "processing | 0.3s" veil: wait them out, so the picture is of the settled page
    page.wait_for_function("!document.body.innerText.includes('processing |')", timeout=20_000)
    page.evaluate("document.querySelectorAll('.toast-wrap, .toast-body').forEach(e => e.remove())")
    page.screenshot(path=str(path), full_page=full_page)
    img = Image.open(path).convert("L")
    assert max(ImageStat.Stat(img).var) > 100, f"{name} looks blank"
    return path


def test_run_example_and_inspect_tree(page):
    choose_first_example(page, 40)
    page.click("#recap-run")
    # the page opened on the shipped example run (finished too): wait for the visitor's own
    page.wait_for_function("(s => s.includes('finished') && !s.includes('shipped'))"
                           "(document.querySelector('#recap-status')?.innerText ?? '')")
    page.wait_for_selector('#recap-tree [data-testid="plotly"] g.textpoint text')
    labels = [t for t in svg_texts(page, "#recap-tree g.textpoint text") if t]
    assert len(labels) >= 2  # node labels (token texts) are drawn
    legend = " ".join(svg_texts(page, "#recap-tree .legendtext"))
    assert "accepted path" in legend and "bonus token" in legend
    status = page.locator("#recap-status").inner_text()
    assert "40" in status and "tokens" in status
    # the step panel follows the run's end
    page.wait_for_selector("#recap-fusion [data-testid='plotly'] .bars")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-step-panel [data-testid=status-tracker]'))"
        ".every(e => e.classList.contains('hide'))")
    screenshot(page, "main.png")

    # the run landed on its most telling step (tests/test_app_first_page.py checks which); move the slider
    step_box = page.locator("#recap-step input[data-testid='number-input']")
    landed = step_box.input_value()
    assert tree_title(page).startswith(f"Step {landed}:")
    # the drawn tree is the step of the trace the app hands out: one label per node, then the bonus token's
    step = downloaded_run(page).steps[int(landed) - 1]
    drawn = [t for t in svg_texts(page, "#recap-tree g.textpoint text") if t]
    assert len(drawn) == len(step.nodes) + 1
    assert sorted(drawn) == sorted([token_label(n.text) for n in step.nodes] + [token_label(step.bonus_text)])
    other = "1" if landed != "1" else "2"
    step_box.fill(other)
    step_box.press("Enter")
    page.wait_for_function(
        "(n) => Array.from(document.querySelectorAll('#recap-tree .gtitle')).some(e => "
        "e.textContent.startsWith(`Step ${n}:`))",
        arg=other,
    )

    # clicking an output token jumps to the step that produced it (the last token: the last step)
    last = page.eval_on_selector("#recap-step input[type='range']", "e => e.max")
    page.locator("#recap-output span.token").last.click()
    page.wait_for_function(
        "(n) => Array.from(document.querySelectorAll('#recap-tree .gtitle')).some(e => "
        "e.textContent.startsWith(`Step ${n}:`))",
        arg=last,
    )


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def test_compare_tab(page):
    open_tab(page, "Compare")
    page.click("#recap-compare-run")
    wait_for_text(page, "#recap-compare-badge", "token-identical")
    page.wait_for_selector('#recap-compare-tree-a [data-testid="plotly"] g.textpoint text')
    page.wait_for_selector('#recap-compare-tree-b [data-testid="plotly"] g.textpoint text')
    table = page.locator("#recap-compare-table").inner_text()
    for name in ("RECAP", "Token Recycling", "Prompt lookup", "Autoregressive"):
        assert name in table
    save(page, "compare.png")


def test_aliasing_tab_guided_demo(page):
    open_tab(page, "Aliasing")
    page.click("#recap-guided-run")
    wait_for_text(page, "#recap-guided-summary", "Guided demo done")
    summary = page.locator("#recap-alias-summary").inner_text()
    assert "states where M1 was wrong" in summary
    cells = page.locator("#recap-alias-table [data-testid='cell-0-3']")
    if cells.count():  # a model may alias nowhere on the pair; the tiny and shapes models do
        cells.first.click()
        page.wait_for_selector('#recap-alias-tree [data-testid="plotly"] g.textpoint text')
        legend = " ".join(svg_texts(page, "#recap-alias-tree .legendtext"))
        assert "selected node" in legend
    save(page, "aliasing.png")


def test_how_it_works_tab(page):
    open_tab(page, "How it works")
    # the example's step, ready to play
    page.wait_for_selector('#recap-walk-tree .recap-anim g.textpoint text')
    page.wait_for_selector('#recap-walk-mask [data-testid="plotly"] .heatmaplayer')
    page.wait_for_selector('#recap-walk-fusion [data-testid="plotly"] .bars')
    assert "lossless" in page.get_by_role("tabpanel").inner_text().lower()
    save(page, "how_it_works.png")


def test_memory_tab(page):
    open_tab(page, "Memory")
    wait_for_text(page, "#recap-memory-stats", "rows filled")
    save(page, "memory.png")


def test_benchmark_tab(page):
    open_tab(page, "Benchmark")
    page.get_by_role("button", name="Show results").click()
    wait_for_text(page, "#recap-bench-table", "Lossless check")
    page.wait_for_selector('#recap-bench-plot [data-testid="plotly"] .bars')
    assert "recap" in page.locator("#recap-bench-table").inner_text()
    save(page, "benchmark.png")


def save(page, name: str) -> None:
    shot = screenshot(page, name)
    if os.environ.get("RECAP_UPDATE_SCREENSHOTS"):
        shutil.copy(shot, REPO / "docs" / f"screenshot_{Path(name).stem}.png")
