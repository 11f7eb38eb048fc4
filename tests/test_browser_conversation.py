"""A three-turn conversation in a real headless Chromium (Playwright): Run, then two follow-up questions in
the chat's box; clicking each answer in the chat draws that turn's tree; a new conversation started from the
box with an image attached.

The chat is checked as drawn: one message per question and answer, the questions and answers as text (a
question with HTML and Markdown in it stays text: no element, no script run), the conversation's image
inline in the first question (loaded). The drawn tree is compared with the turn's own trace, read from the
conversation file the page hands out (one label per node, then the bonus token's, on the turn's most telling
step), as tests/test_browser.py does for one run. With RECAP_UPDATE_SCREENSHOTS=1 the conversation is saved
as docs/screenshot_conversation.png. Skipped (with the reason) only when /usr/bin/chromium is missing and CI
is unset; in CI it fails.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest
from browser_support import app_page, choose_first_example, skip_without_chromium, wait_for_text
from conftest_app import REPO, example

from app.presenters.tree_geometry import token_label
from app.state.conversation import ONE_IMAGE
from app.state.steps import find_step, telling_step
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, browser_app_url

pytestmark = pytest.mark.browser

skip_without_chromium()

HOSTILE = "What color is the <b>large</b> circle? <img src=x onerror=alert(1)> **bold**"
FOLLOW_UPS = ["How many objects are there?", HOSTILE]
# a message's parts are rows of their own (the first question's: the image, then the text); a text is a span
USER = "#recap-chat .message-row.user-row"
BOT = "#recap-chat .message-row.bot-row"
QUESTIONS, ANSWERS = f"{USER} span.md", f"{BOT} span.md"


@pytest.fixture(scope="module")
def page(browser_app_url):
    with app_page(browser_app_url) as pg:
        dialogs: list[str] = []
        pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))  # an alert() ran: a script did
        pg.recap_dialogs = dialogs
        yield pg


def texts(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def conversation(page) -> list[DecodeTrace]:
    """Every turn's trace, from the conversation file the page offers."""
    link = page.locator("#recap-conversation-file a").first
    link.wait_for(state="attached")
    doc = json.loads(gzip.decompress(page.request.get(link.get_attribute("href")).body()))
    return [DecodeTrace.from_dict(turn) for turn in doc["turns"]]


def shown_turn(page, turn: int) -> None:
    """Wait until the chat holds ``turn`` finished turns and the turn picker marks ``turn`` as the one shown
    (the tree came in the same update)."""
    page.wait_for_function(
        "([n, u, b]) => document.querySelectorAll(u).length === n"
        " && document.querySelectorAll(b).length === n"
        " && document.querySelector('#recap-turn input:checked')?.value === String(n)"
        " && !Array.from(document.querySelectorAll(b)).some(e => e.textContent.trim() === '…')",
        arg=[turn, QUESTIONS, ANSWERS],
    )


def picked(page, turn: int) -> None:
    page.wait_for_function("(n) => document.querySelector('#recap-turn input:checked')?.value === String(n)",
                           arg=turn)


def drawn_labels(page, expected: list[str], polls: int = 100) -> list[str]:
    """The tree's node labels, sorted, once they are ``expected`` (Plotly redraws after the update lands),
    or as they are after ``polls`` tenths of a second."""
    drawn: list[str] = []
    for _ in range(polls):
        drawn = sorted(t for t in texts(page, "#recap-tree g.textpoint text") if t)
        if drawn == expected:
            break
        page.wait_for_timeout(100)
    return drawn


def ask(page, question: str, image: str | None = None) -> None:
    """Type ``question`` in the chat's box (``image`` attached) and send it."""
    if image is not None:
        page.locator("#recap-follow-up input[type=file]").set_input_files(image)
        page.wait_for_selector("#recap-follow-up img")  # the attachment's preview: the upload arrived
    box = page.locator("#recap-follow-up textarea")
    box.fill(question)
    box.press("Enter")


def tree_is_the_turns(page, trace: DecodeTrace, turn: int) -> None:
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


def test_three_turns_in_the_chat_and_each_answer_shows_its_own_tree(page):
    choose_first_example(page, 24)
    page.click("#recap-run")
    shown_turn(page, 1)  # the Run is turn 1 of a new conversation
    for turn, question in enumerate(FOLLOW_UPS, 2):
        ask(page, question)
        shown_turn(page, turn)
    traces = conversation(page)
    assert [t.turn for t in traces] == [1, 2, 3] and [t.prompt for t in traces[1:]] == FOLLOW_UPS

    # the chat: the questions and answers as typed and decoded, markup never rendered, no script run
    assert texts(page, QUESTIONS) == [t.prompt for t in traces]
    assert [a.strip() for a in texts(page, ANSWERS)] == [t.text.strip() for t in traces]
    assert page.locator("#recap-chat b, #recap-chat strong, #recap-chat img[src='x']").count() == 0
    assert page.recap_dialogs == []
    # the Run's image inline in the first question, loaded, and only there
    image = page.locator(f"{USER} img")
    assert image.count() == 1 and page.locator(f"{USER}").first.locator("img").count() == 1
    assert image.evaluate("img => img.complete && img.naturalWidth > 0")
    assert page.locator("#recap-follow-up textarea").input_value() == ""  # the box emptied into the chat

    for turn in (1, 3, 2):  # a click on an answer (or a question) shows that turn's decode
        page.locator(ANSWERS if turn != 2 else QUESTIONS).nth(turn - 1).click()
        picked(page, turn)
        tree_is_the_turns(page, traces[turn - 1], turn)
    page.locator("#recap-turn label").nth(2).click()  # the compact picker does the same
    picked(page, 3)
    tree_is_the_turns(page, traces[2], 3)

    # the conversation on screen, for a look (test-artifacts/ is CI's upload), and the docs' picture: from
    # its image on, no toast over it
    page.add_style_tag(content=".toast-wrap { display: none !important; }")
    page.locator(USER).first.evaluate("row => row.scrollIntoView({block: 'start', behavior: 'instant'})")
    page.wait_for_timeout(500)
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    shot = REPO / "test-artifacts" / "conversation.png"
    page.locator("#recap-conversation").screenshot(path=str(shot))
    if os.environ.get("RECAP_UPDATE_SCREENSHOTS"):
        shutil.copy(shot, REPO / "docs" / "screenshot_conversation.png")


def test_an_image_in_the_box_starts_a_conversation_and_is_refused_in_one(page):
    image, _ = example()
    ask(page, "And this one?", image)  # a conversation is going on: one image per conversation
    wait_for_text(page, "#recap-error", ONE_IMAGE[:60])
    assert page.locator(QUESTIONS).count() == 3  # the conversation as it was
    page.click("#recap-new-conversation")
    page.wait_for_function("(u) => document.querySelectorAll(u).length === 0", arg=QUESTIONS)
    page.locator("#recap-follow-up textarea").fill("")
    ask(page, "Describe this image.")  # the attachment stayed in the box after the refusal
    shown_turn(page, 1)
    traces = conversation(page)
    assert [t.prompt for t in traces] == ["Describe this image."] and traces[0].image_key
    assert page.locator(f"{USER} img").evaluate("img => img.complete && img.naturalWidth > 0")
    tree_is_the_turns(page, traces[0], 1)
    # the chat's clear icon is New conversation: the session forgets the turns with the page
    page.click("#recap-chat button[aria-label='Clear']")
    page.wait_for_function("(u) => document.querySelectorAll(u).length === 0", arg=QUESTIONS)
    ask(page, "And then?")
    wait_for_text(page, "#recap-error", "there is no conversation to continue")
