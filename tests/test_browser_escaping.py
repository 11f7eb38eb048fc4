"""Text from files is shown as text in a real Chromium (issue 16): no HTML, no Markdown links or images.

An uploaded trace whose method (refused, quoted as text), model, prompt and token texts are
HTML and Markdown (and an older build's notice, ignored), and
a memory file whose request prompts are, are opened the way a visitor would: the page shows
the characters, and no element, link or image of the attacker's appears.
"""

from __future__ import annotations

import json

import pytest
from browser_support import app_page, skip_without_chromium, wait_for_text
from conftest_app import example

import recap

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target


pytestmark = pytest.mark.browser

skip_without_chromium()

EVIL = "evil.example"
HOSTILE = (f'<img id="pwn{{n}}" src="http://{EVIL}/i.png" onerror="window.pwned={{n}}"> '
           f"[click](http://{EVIL}/a) ![pic](http://{EVIL}/p.png) **bold** www.{EVIL}")
ATTACKER_ELEMENTS = ("[id^=pwn], a[href*='evil.example'], img[src*='evil.example'], "
                     "#recap-status strong strong, #recap-memory-stats img")


def hostile(n: int) -> str:
    return HOSTILE.format(n=n)


@pytest.fixture(scope="module")
def page(public_app_url):
    # nothing may load from there
    with app_page(public_app_url, width=1400, height=1100, block=[f"**/*{EVIL}*"]) as pg:
        yield pg


def attacker_traces(page) -> list[str]:
    found = page.eval_on_selector_all(ATTACKER_ELEMENTS, "els => els.map(e => e.outerHTML)")
    if page.evaluate("window.pwned !== undefined"):
        found.append("window.pwned was set")
    return found


def test_an_uploaded_trace_with_html_and_markdown_shows_as_text(page, target, tmp_path):
    image, prompt = example()
    trace = recap.generate(target, image, prompt, method="recap", max_new_tokens=12, trace=True).trace
    data = json.loads(trace.to_json())
    # method and stop_reason are closed sets (a trace naming another is refused on load); the
    # free texts a file carries are the model, the prompt and the token texts (an older build's notice
    # loads, and is shown nowhere)
    data["notice"], data["prompt"], data["model"] = hostile(1), hostile(2), hostile(3)
    data["token_texts"][0] = hostile(4)
    path = tmp_path / "hostile_trace.json"
    path.write_text(json.dumps(data))
    page.locator(".label-wrap", has_text="Trace files").first.click()
    upload = page.get_by_test_id("Upload a trace (.json, .json.gz)-upload-button")  # not the conversation's
    # A closed field holding HTML is refused; the message quotes it as text.
    (tmp_path / "refused_trace.json").write_text(json.dumps(dict(data, method=hostile(6))))
    upload.set_input_files(str(tmp_path / "refused_trace.json"))
    wait_for_text(page, "#recap-error", "method")
    assert '<img id="pwn6"' in page.locator("#recap-error").inner_text()  # the characters, as typed
    assert attacker_traces(page) == []
    upload.set_input_files(str(path))
    wait_for_text(page, "#recap-status", "loaded from a trace file")
    status = page.locator("#recap-status").inner_text()
    # the model's short name (its last path part), as typed: no Markdown; the old notice is not shown
    assert "p.png) **bold** www.evil.example" in status and "pwn1" not in status
    page.wait_for_selector("#recap-output span.token")
    assert attacker_traces(page) == []


def test_a_memory_file_with_html_prompts_shows_as_text(page, target, tmp_path):
    image, _ = example()
    memory = recap.TokenMemory(target.vocab_size, recap.RecapConfig().top_k)
    recap.generate(target, image, hostile(5), method="recap", max_new_tokens=8, memory=memory)
    path = tmp_path / "hostile_memory.safetensors"
    memory.save(path)
    page.get_by_role("tab", name="Decode").click()
    page.locator(".label-wrap", has_text="Memory").first.click()
    page.locator("input[type=file][accept*='.safetensors']").set_input_files(str(path))
    # the panel said "rows filled" from the page load on (the warm memory): wait for the file's
    wait_for_text(page, "#recap-memory-info", "loaded from a file")
    page.get_by_role("tab", name="Memory").click()
    page.wait_for_function("(s => s.includes('Latest requests') && s.includes('loaded from a file'))"
                           "(document.querySelector('#recap-memory-stats')?.innerText ?? '')")
    stats = page.locator("#recap-memory-stats").inner_text()
    assert "<img id=" in stats  # the prompt's characters, cut to 40, as typed
    assert attacker_traces(page) == []
