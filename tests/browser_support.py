"""What the browser tests share: Debian's Chromium driven by Playwright, and when to skip.

A browser test module calls ``skip_without_chromium()`` at import: outside CI a missing
``/usr/bin/chromium`` skips the module with the reason; in CI it fails instead (the browser
is part of what CI installs). ``app_page(url)`` opens the launched app in a fresh headless
Chromium, waits for the Run button and closes the browser afterwards; ``choose_first_example``
puts the first example in the Decode inputs, as a visitor's first click does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
#: The machines are offline: without the background-networking flags Chromium keeps
#: trying (and failing) to reach Google's hosts.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def skip_without_chromium() -> None:
    """Skip the calling test module when Chromium is missing, except in CI."""
    if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
        pytest.skip(f"{CHROMIUM} is missing (install Debian's chromium to run the browser tests)",
                    allow_module_level=True)


@contextmanager
def app_page(url: str, *, width: int = 1500, height: int = 1150, timeout_ms: int = 60_000,
             block: Sequence[str] = ()) -> Iterator[Any]:
    """The app at ``url`` in a headless Chromium page, ready once its Run button is there.

    block: URL globs whose requests are aborted (the escaping tests: nothing may load from there).
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(timeout_ms)
            for pattern in block:
                page.route(pattern, lambda route: route.abort())
            page.goto(url)
            page.wait_for_selector("#recap-run")
            yield page
        finally:
            browser.close()


def choose_first_example(page: Any, max_new_tokens: int) -> None:
    """Click the first example (its image and prompt fill the Decode inputs) and set max new tokens."""
    page.locator("#recap-examples .thumbnail-item").first.click()
    page.wait_for_function("(document.querySelector('#recap-prompt textarea')?.value ?? '').length > 0")
    number = page.locator("#recap-max-new input[data-testid='number-input']")
    number.fill(str(max_new_tokens))
    number.press("Enter")


def wait_for_text(page: Any, selector: str, text: str) -> None:
    """Wait until the element at ``selector`` exists and its text contains ``text``.

    Null-safe on purpose: an accordion's or a tab's children mount a moment after the click,
    and a predicate that throws on the missing element fails the wait instead of retrying it.
    """
    page.wait_for_function("([s, t]) => (document.querySelector(s)?.innerText ?? '').includes(t)",
                           arg=[selector, text])
