"""The Sampling group in a real headless Chromium: one seed, two methods, the same text; then Compare.

Skipped like tests/test_browser.py when /usr/bin/chromium is missing outside CI. With
RECAP_UPDATE_SCREENSHOTS=1 the Compare tab's sampled badge is saved as docs/screenshot_sampling.png.
"""

from __future__ import annotations

import os
import shutil

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium, wait_for_text
from conftest_app import REPO
from test_browser import screenshot

pytest_plugins = ["conftest_app"]  # fixtures: model_dir

pytestmark = pytest.mark.browser

skip_without_chromium()


@pytest.fixture(scope="module")
def page(browser_app_url):
    with app_page(browser_app_url, timeout_ms=90_000) as pg:
        yield pg


def fill(page, selector: str, value: str) -> None:
    box = page.locator(f"{selector} input").first
    box.fill(value)
    box.press("Enter")


def sample(page, prefix: str, *, seed: str | None = None) -> str:
    """Open a tab's Sampling group, turn it on hot (temperature 3, top-p 0.95); its seed as shown."""
    page.locator(f"#{prefix}-sampling-group .label-wrap").first.click()
    page.locator(f"#{prefix}-sampling input[type='checkbox']").check()
    fill(page, f"#{prefix}-temperature", "3")
    fill(page, f"#{prefix}-top-p", "0.95")
    if seed is not None:
        fill(page, f"#{prefix}-seed", seed)
    return page.locator(f"#{prefix}-seed input").first.input_value()


def run(page, label: str) -> tuple[str, str]:
    """Run the Decode tab with the method ``label``; (status, output text) once it finished."""
    page.locator("#recap-method label", has_text=label).click()
    page.click("#recap-run")
    page.wait_for_function(
        "(m) => (s => s.includes('finished') && s.includes(m) && !s.includes('shipped'))"
        "(document.querySelector('#recap-status')?.innerText ?? '')", arg=label)
    return page.locator("#recap-status").inner_text(), page.locator("#recap-output").inner_text()


def test_one_seed_two_methods_the_same_text(page):
    choose_first_example(page, 32)
    before = sample(page, "recap")
    page.click("#recap-new-seed")  # drawn in the browser: a new number in the box
    page.wait_for_function("(b) => document.querySelector('#recap-seed input').value !== b", arg=before)
    seed = page.locator("#recap-seed input").first.input_value()
    assert seed.isdigit()

    status_a, text_a = run(page, "RECAP")
    status_b, text_b = run(page, "Token Recycling")
    for status in (status_a, status_b):
        assert "sampled: temperature 3" in status and f"seed {seed}" in status
    assert text_a == text_b and len(text_a) > 20  # one seed: the same draws, whichever method drafted
    wait_for_text(page, "#recap-inspect-heading", "Sampled")

    fill(page, "#recap-seed", "7")  # the seed decides: another one, another text (at temperature 3)
    _, text_c = run(page, "RECAP")
    assert text_c != text_a


def test_compare_one_seed_every_method(page):
    page.get_by_role("tab", name="Compare").click()
    sample(page, "recap-compare", seed="7")
    page.click("#recap-compare-run")
    wait_for_text(page, "#recap-compare-badge", "under sampling")
    badge = page.locator("#recap-compare-badge").inner_text()
    assert "token-identical" in badge and "seed 7" in badge and "temperature 3" in badge
    page.locator("#recap-compare-sampling-group").scroll_into_view_if_needed()
    shot = screenshot(page, "sampling.png", full_page=False)
    if os.environ.get("RECAP_UPDATE_SCREENSHOTS"):
        shutil.copy(shot, REPO / "docs" / "screenshot_sampling.png")
