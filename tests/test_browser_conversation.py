"""A three-turn conversation in a real headless Chromium (Playwright): Run, then two follow-up questions;
choosing each answer draws that turn's tree.

The drawn tree is compared with the turn's own trace, read from the conversation file the page hands
out (one label per node, then the bonus token's, on the turn's most telling step), as
tests/test_browser.py does for one run; the questions and answers are shown as text (a question
with markup in it stays text). Skipped (with the reason) only when /usr/bin/chromium is missing and
CI is unset; in CI it fails.
"""

from __future__ import annotations

import gzip
import json

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium
from conftest_app import REPO

from app.presenters.tree_geometry import token_label
from app.state.steps import find_step, telling_step
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, browser_app_url

pytestmark = pytest.mark.browser

skip_without_chromium()

FOLLOW_UPS = ["How many objects are there?", "What color is the <b>large</b> circle?"]


@pytest.fixture(scope="module")
def page(browser_app_url):
    with app_page(browser_app_url) as pg:
        yield pg


def svg_texts(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def conversation(page) -> list[DecodeTrace]:
    """Every turn's trace, from the conversation file the page offers."""
    link = page.locator("#recap-conversation-file a").first
    link.wait_for(state="attached")
    doc = json.loads(gzip.decompress(page.request.get(link.get_attribute("href")).body()))
    return [DecodeTrace.from_dict(turn) for turn in doc["turns"]]


def shown_turn(page, turn: int) -> None:
    """Wait until the turns view marks ``turn`` as the one shown (the tree came in the same update)."""
    page.wait_for_function(
        "(n) => { const t = document.querySelector(`#recap-turns .recap-turn[data-turn=\"${n}\"]`);"
        " return t !== null && t.innerText.includes('· shown'); }",
        arg=turn,
    )


def drawn_labels(page, expected: list[str], polls: int = 100) -> list[str]:
    """The tree's node labels, sorted, once they are ``expected`` (Plotly redraws after the update lands),
    or as they are after ``polls`` tenths of a second."""
    drawn: list[str] = []
    for _ in range(polls):
        drawn = sorted(t for t in svg_texts(page, "#recap-tree g.textpoint text") if t)
        if drawn == expected:
            break
        page.wait_for_timeout(100)
    return drawn


def ask(page, question: str, turn: int) -> None:
    box = page.locator("#recap-follow-up textarea")
    box.fill(question)
    page.click("#recap-ask")
    shown_turn(page, turn)


def test_three_turns_and_each_answer_shows_its_own_tree(page):
    choose_first_example(page, 24)
    page.click("#recap-run")
    shown_turn(page, 1)  # the Run is turn 1 of a new conversation
    for turn, question in enumerate(FOLLOW_UPS, 2):
        ask(page, question, turn)
    traces = conversation(page)
    assert [t.turn for t in traces] == [1, 2, 3] and [t.prompt for t in traces[1:]] == FOLLOW_UPS

    # the turns are text: the questions and answers as typed and decoded, markup never rendered
    questions = svg_texts(page, "#recap-turns .recap-question")
    assert questions == [t.prompt for t in traces]
    answers = svg_texts(page, "#recap-turns .recap-answer")
    assert [a.strip() for a in answers] == [t.text.strip() for t in traces]
    assert page.locator("#recap-turns b:has-text('large')").count() == 0

    for turn in (1, 2, 3):
        page.locator("#recap-turn label").nth(turn - 1).click()
        shown_turn(page, turn)
        trace = traces[turn - 1]
        landed = telling_step(trace)
        page.wait_for_function(
            "(n) => Array.from(document.querySelectorAll('#recap-tree .gtitle')).some(e => "
            "e.textContent.startsWith(`Step ${n}:`))",
            arg=landed,
        )
        step = find_step(trace, landed)
        expected = sorted([token_label(n.text) for n in step.nodes] + [token_label(step.bonus_text)])
        drawn = drawn_labels(page, expected)
        assert len(drawn) == len(step.nodes) + 1, turn
        assert drawn == expected, turn
        output = page.locator("#recap-output").inner_text()  # one span per token: compared without spaces
        assert "".join(trace.text.split()) in "".join(output.split()), turn
    # the conversation on screen, for a look (test-artifacts/ is CI's upload)
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    page.locator("#recap-conversation").screenshot(path=str(REPO / "test-artifacts" / "conversation.png"))
