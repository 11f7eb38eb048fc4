"""The teaching views in a real headless Chromium: play a step, inspect an accepted node, the mask.

Skipped like tests/test_browser.py when /usr/bin/chromium is missing outside CI. With
RECAP_UPDATE_SCREENSHOTS=1 the screenshots are copied to docs/ (screenshot-inspector.png,
screenshot-play.png, screenshot-mask.png).
"""

from __future__ import annotations

import os
import shutil

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium, wait_for_text
from conftest_app import REPO
from test_browser import screenshot, svg_texts

pytest_plugins = ["conftest_app"]  # fixtures: model_dir

pytestmark = pytest.mark.browser

skip_without_chromium()


@pytest.fixture(scope="module")
def page(browser_app_url):
    with app_page(browser_app_url, timeout_ms=90_000) as pg:
        choose_first_example(pg, 48)
        pg.click("#recap-run")
        # the page opened on the shipped example run (finished too): wait for the visitor's own
        pg.wait_for_function("(s => s.includes('finished') && !s.includes('shipped'))"
                             "(document.querySelector('#recap-status')?.innerText ?? '')")
        pg.wait_for_selector("#recap-fusion [data-testid='plotly'] .bars")
        yield pg


def idle(page) -> None:
    """Wait until no event of the panel or the tree is still processing."""
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-step-panel [data-testid=status-tracker], "
        "#recap-tree [data-testid=status-tracker]')).every(e => e.classList.contains('hide'))")
    page.wait_for_timeout(300)


def keep(page, name: str, selector: str) -> None:
    """Screenshot one element; copied into docs/ when refreshing screenshots."""
    idle(page)
    page.locator(selector).scroll_into_view_if_needed()
    shot = screenshot(page, name, full_page=False)
    page.locator(selector).screenshot(path=str(shot))
    if os.environ.get("RECAP_UPDATE_SCREENSHOTS"):
        shutil.copy(shot, REPO / "docs" / name)


def anim_title(page) -> str:
    return " ".join(svg_texts(page, "#recap-play .recap-anim .gtitle"))


def test_play_a_step(page):
    page.get_by_role("tab", name="Play the step").click()
    page.wait_for_selector("#recap-play .recap-anim g.textpoint text")
    assert anim_title(page).startswith("Step ")  # before Play: the finished tree
    frames = int(page.eval_on_selector("#recap-play .recap-anim", "d => Number(d.dataset.frames)"))
    assert frames > 3
    page.locator("#recap-play .updatemenu-button").first.click()  # ▶ play
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-play .gtitle')).some(e => "
        "e.textContent.includes('draft'))"
    )
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-play .gtitle')).some(e => "
        "e.textContent.includes('depth'))"
    )
    keep(page, "screenshot-play.png", "#recap-step-panel")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-play .gtitle')).some(e => "
        "e.textContent.includes('accept'))"
    )
    # the last frame is the finished tree: the bonus star is back
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-play .legendtext')).some(e => "
        "e.textContent.startsWith('bonus'))"
    )


def test_inspect_an_accepted_node(page):
    page.get_by_role("tab", name="Inspect a node").click()
    # a click on an output token inspects the node that produced it: find a drafted, accepted one
    tokens = page.locator("#recap-output span.token")
    for i in range(min(tokens.count(), 30)):
        tokens.nth(i).click()
        page.wait_for_timeout(300)
        idle(page)
        if "accepted)" in page.locator("#recap-inspect-heading").inner_text():
            break
    else:
        raise AssertionError("no output token among the first 30 was drafted and accepted")
    # and the dropdown picks another accepted node of that step
    page.locator("#recap-node input").click()
    option = page.get_by_role("option").filter(has_text="accepted").last
    label = option.get_attribute("aria-label")
    option.click()
    wait_for_text(page, "#recap-inspect-heading", label.split(" (")[0])
    page.wait_for_selector("#recap-fusion [data-testid='plotly'] .bars")
    titles = " ".join(svg_texts(page, "#recap-fusion .annotation-text"))
    assert "weight" in titles and "entropy" in titles and "fused" in titles
    bars = page.eval_on_selector_all("#recap-fusion .bars .point", "els => els.length")
    assert bars >= 2
    assert "written at" in page.locator("#recap-provenance").inner_text()
    # the tree circles the picked node
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#recap-tree .legendtext')).some(e => e.textContent === "
        "'selected node')"
    )
    # another step opens on its most telling node (the accepted node fused from the most memories)
    last = int(page.eval_on_selector("#recap-step input[type='range']", "e => e.max"))
    target = str(max(1, last - 2))  # late in the run: M2 / M3 know this request's contexts
    step_box = page.locator("#recap-step input[data-testid='number-input']")
    step_box.fill(target)
    step_box.press("Enter")
    page.wait_for_function(
        "(n) => Array.from(document.querySelectorAll('#recap-fusion .gtitle')).some(e => "
        "e.textContent.startsWith(`Step ${n},`))",
        arg=target,
    )
    keep(page, "screenshot-inspector.png", "#recap-step-panel")


def test_the_mask_follows_the_selection(page):
    page.get_by_role("tab", name="Attention mask").click()
    page.wait_for_selector("#recap-mask [data-testid='plotly'] .heatmaplayer")
    title = " ".join(svg_texts(page, "#recap-mask .gtitle"))
    assert "highlighted" in title
    assert "one forward pass" in page.locator("#recap-step-panel").inner_text()
    keep(page, "screenshot-mask.png", "#recap-step-panel")


def test_play_the_run(page):
    page.get_by_role("tab", name="Play the step").click()
    page.click("#recap-play-run")
    page.wait_for_function(
        "() => Number(document.querySelector('#recap-play .recap-anim').dataset.frames) > 40"
    )
