"""The app on a real-tokenizer checkpoint, in headless Chromium: tree labels read as text.

llava-1.5-7b-hf's files (SentencePiece: ``▁`` marks a space) on tiny random weights
(tests/real_models.py): one decode, then the tree's node labels must read as words: never the
tokenizer's ``▁``, and a word's own leading space (" world") is its word boundary, not a
visible marker (``␣world``); the hover keeps it (tests/test_figures.py).

Skipped (with the reason) only when /usr/bin/chromium is missing and CI is unset; in CI it fails.
"""

from __future__ import annotations

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium, wait_for_text
from conftest_app import launch_app
from real_models import LLAVA

pytest_plugins = ["conftest_app"]

VISIBLE_SPACE = "\u2423"  # how app/figures.py marks a space a label must show (a token of spaces only)

pytestmark = pytest.mark.browser

skip_without_chromium()


@pytest.fixture(scope="module")
def llava_app(real_dirs):
    demo, url = launch_app(str(real_dirs[LLAVA]), stream_interval=0.2)
    yield url
    demo.close()


def test_tree_labels_of_a_sentencepiece_model_read_as_text(llava_app) -> None:
    with app_page(llava_app) as page:
        choose_first_example(page, 24)
        page.click("#recap-run")
        wait_for_text(page, "#recap-status", "finished")
        page.wait_for_selector('#recap-tree [data-testid="plotly"] g.textpoint text')
        labels = [t for t in page.eval_on_selector_all("#recap-tree g.textpoint text",
                                                       "els => els.map(e => e.textContent)") if t]
        output = page.locator("#recap-output").inner_text()
    assert labels, "the tree drew no node labels"
    assert not any("▁" in label for label in labels), labels
    assert "▁" not in output
    marked = [label for label in labels if label.startswith(VISIBLE_SPACE) and label[1:2].isalpha()]
    assert not marked, f"labels mark a word's own leading space: {marked}"
    assert any(label[:1].isalpha() for label in labels), f"no label reads as a word: {labels}"
