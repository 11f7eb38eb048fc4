"""The first page in a real headless Chromium, in public mode as on the Space (issue 24).

Before any Run or "Show results": the Decode tab shows the shipped example run (a drawn tree, the
prompt and image filled in, the step panel and charts), the memory panel says the memory starts
warm, and the Benchmark tab's chart is drawn. Opening an accordion or a tab is the only click.
Skipped like tests/test_browser.py when /usr/bin/chromium is missing outside CI. With
RECAP_UPDATE_SCREENSHOTS=1 the first page is saved as docs/screenshot.png.
"""

from __future__ import annotations

import gzip
import os
import shutil

import pytest
from browser_support import app_page, skip_without_chromium, wait_for_text
from conftest_app import REPO, example
from test_browser import screenshot, svg_texts

from app.presenters.tree_geometry import token_label
from app.state.settings import load_settings
from recap.shapes.example_run import EXAMPLE_RUN_DIR
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir

pytestmark = pytest.mark.browser

skip_without_chromium()


@pytest.fixture(scope="module")
def page(model_dir, request):
    if not load_settings(model_dir).example_run:
        pytest.skip(
            "the shipped example run is of the embedded model; this test model opens on an empty page"
        )
    with app_page(request.getfixturevalue("public_app_url")) as pg:
        yield pg


def shipped_trace() -> DecodeTrace:
    """The shipped example run the first page opens on (``assets/example-run``), read in full."""
    return DecodeTrace.from_json(gzip.decompress((EXAMPLE_RUN_DIR / "trace.json.gz").read_bytes()))


def test_the_first_page_shows_a_finished_example_before_any_click(page):
    page.wait_for_selector('#recap-tree [data-testid="plotly"] g.textpoint text')
    labels = [t for t in svg_texts(page, "#recap-tree g.textpoint text") if t]
    title = " ".join(svg_texts(page, "#recap-tree .gtitle"))
    assert title.startswith("Step ")
    # the tree drawn is the shipped trace's step of that number: one label per node, then the bonus token's
    step = shipped_trace().steps[int(title.split()[1].rstrip(":")) - 1]
    assert len(labels) == len(step.nodes) + 1
    expected = [token_label(n.text) for n in step.nodes] + [token_label(step.bonus_text)]
    assert sorted(labels) == sorted(expected)
    assert page.eval_on_selector("#recap-prompt textarea", "e => e.value") == example()[1]
    assert page.locator("#recap-image img").count() == 1
    status = page.locator("#recap-status").inner_text()
    assert "shipped example run" in status and "finished" in status
    assert page.locator("#recap-output span.token").count() > 10
    page.wait_for_selector("#recap-fusion [data-testid='plotly'] .bars")  # inside the step, drawn too
    page.wait_for_selector("#recap-lengths [data-testid='plotly'] .bars")
    shot = screenshot(page, "first_page.png")
    if os.environ.get("RECAP_UPDATE_SCREENSHOTS"):
        shutil.copy(shot, REPO / "docs" / "screenshot.png")


def test_the_memory_panel_says_warm_on_page_load(page):
    page.locator(".label-wrap", has_text="Memory").first.click()  # the accordion: its text came with the page
    wait_for_text(page, "#recap-memory-info", "rows filled")
    text = page.locator("#recap-memory-info").inner_text()
    assert "warm memory" in text and "60 request(s)" in text


def test_the_benchmark_tab_opens_on_the_shipped_run(page):
    page.get_by_role("tab", name="Benchmark").click()
    page.wait_for_selector('#recap-bench-plot [data-testid="plotly"] .bars')  # no "Show results" pressed
    assert "Lossless check" in page.locator("#recap-bench-table").inner_text()


def test_run_at_once_decodes_the_filled_in_request_and_replaces_the_shipped_run(page):
    page.get_by_role("tab", name="Decode").click()
    page.click("#recap-run")  # the visitor's first act: no error, their own run
    page.wait_for_function("(s => s.includes('finished') && !s.includes('shipped'))"
                           "(document.querySelector('#recap-status')?.innerText ?? '')")
    assert page.locator("#recap-error").inner_text().strip() == ""
    assert "request 60" in page.locator("#recap-status").inner_text()  # the first request after the warm ones
    wait_for_text(page, "#recap-memory-info", "61 request(s)")
    assert "started from the shipped warm memory" in page.locator("#recap-memory-info").inner_text()
