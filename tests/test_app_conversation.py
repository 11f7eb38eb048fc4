"""The Decode view's conversation over the API (gradio_client): /run, /follow_up, /choose_turn,
/new_conversation, /load_conversation.

Each answer is what ``recap.generate(target, messages=...)`` gives on the rendered conversation
(the image, the earlier questions, the model's answers); choosing a turn points the shown
decode (the trace download, the output text) at that turn's trace; public-mode bounds refuse a
follow-up naming the bound and leave the conversation as it was; a conversation downloads as
one file and uploads again, a bad file refused with a clear message.
"""

from __future__ import annotations

import gzip
import html
import json
from pathlib import Path

import pytest
from conftest_app import advanced_values, call_event, downloaded_trace, example, fn_index, launch_app
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import recap
from recap.models.inputs import load_image
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]

N = 12  # new tokens per turn
QUESTIONS = ["Describe the image.", "How many objects are there?", "What color is the large circle?"]
# the outputs of /run, /follow_up and /choose_turn: the main view, its trace download, then the conversation
# (the chat's messages, the turn picker, the conversation file, the chat's box)
STATUS, ERROR, TEXT, TRACE_FILE, CHAT, TURN, CONVERSATION_FILE, BOX = 0, 1, 4, 7, 8, 9, 10, 11


def start(client: Client, question: str = QUESTIONS[0]) -> tuple:
    image, _ = example()
    return client.predict(handle_file(image), question, "recap", N, *advanced_values(), api_name="/run")


def follow_up(client: Client, question: str) -> tuple:
    return client.predict(question, "recap", N, api_name="/follow_up")


def conversation_file(path: str) -> list[DecodeTrace]:
    raw = Path(path).read_bytes()
    assert raw[:2] == b"\x1f\x8b" and path.endswith(".json.gz"), path
    doc = json.loads(gzip.decompress(raw))
    assert doc["schema"] == "recap-conversation" and doc["version"] == 1
    return [DecodeTrace.from_dict(turn) for turn in doc["turns"]]


def shown_turn(out: tuple) -> int:
    """The turn picker's value (the turn shown): an update of its choices and value."""
    update = out[TURN]
    assert [n for _label, n in update["choices"]] == list(range(1, len(update["choices"]) + 1))
    return update["value"]


def chat(out: tuple) -> list[tuple[str, str]]:
    """The chat's messages as (role, its text parts joined), as the page receives them (an update of the
    chat's value and label)."""
    return [(m["role"], "".join(c["text"] for c in m["content"] if c.get("type") == "text"))
            for m in out[CHAT]["value"]]


def chat_of(traces: list[DecodeTrace]) -> list[tuple[str, str]]:
    """The chat a conversation shows: per turn its question and its answer, escaped (shown as text)."""
    return [pair for t in traces for pair in
            (("user", html.escape(t.prompt, quote=False)), ("assistant", html.escape(t.text, quote=False)))]


def shown_text(out: tuple) -> str:
    """The output text the main view shows (its highlighted segments joined; an update of their value)."""
    return "".join(seg["token"] for seg in out[TEXT]["value"])


def reference_answers(target: recap.Target, questions: list[str]) -> list[recap.Generation]:
    """Each turn decoded by the library on the conversation so far (the model's own decoding)."""
    image = load_image(example()[0])
    messages: list[dict] = []
    answers = []
    for i, question in enumerate(questions):
        shown = [{"type": "image", "image": image}] if i == 0 else []
        messages.append({"role": "user", "content": [*shown, {"type": "text", "text": question}]})
        out = recap.generate(target, messages=messages, method="ar", max_new_tokens=N)
        answers.append(out)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": out.text}]})
    return answers


@pytest.fixture()
def client(app_url: str) -> Client:
    return Client(app_url, verbose=False)


def test_each_turn_is_generate_on_the_conversation_and_choosing_one_shows_its_decode(client, target):
    out = start(client)
    assert not out[ERROR]
    for question in QUESTIONS[1:]:
        out = follow_up(client, question)
        assert not out[ERROR], out[ERROR]
    traces = conversation_file(out[CONVERSATION_FILE])
    assert [t.turn for t in traces] == [1, 2, 3] and [t.prompt for t in traces] == QUESTIONS
    for trace, ref in zip(traces, reference_answers(target, QUESTIONS), strict=True):
        assert trace.token_ids == ref.token_ids and trace.text == ref.text
    # the latest answer is shown; the chat holds every question and answer as text, the image in the first
    assert shown_turn(out) == 3 and downloaded_trace(out[TRACE_FILE]).to_json() == traces[2].to_json()
    assert chat(out) == chat_of(traces)
    files = [[c for c in m["content"] if c.get("type") == "file"] for m in out[CHAT]["value"]]
    assert [len(f) for f in files] == [1, 0, 0, 0, 0, 0]
    assert Path(files[0][0]["file"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the client's download

    out = client.predict(1, api_name="/choose_turn")
    assert not out[ERROR] and shown_turn(out) == 1
    assert downloaded_trace(out[TRACE_FILE]).to_json() == traces[0].to_json()
    assert shown_text(out) == traces[0].text
    out = client.predict(2, api_name="/choose_turn")
    assert downloaded_trace(out[TRACE_FILE]).to_json() == traces[1].to_json()
    with pytest.raises(AppError, match="there is no turn 4: this conversation has turns 1 to 3"):
        client.predict(4, api_name="/choose_turn")


def test_a_sampled_conversation_is_recap_converse_with_the_same_seed(client, target):
    """Turn t of a sampled conversation draws with seed + t, as ``recap.converse(seed=...)``: a
    conversation sampled in the app replays in the library token for token."""
    hot = {"sampling": True, "temperature": 3.0, "top_p": 0.95, "sampling_top_k": 0, "seed": 7}
    image, _ = example()
    settings = [*advanced_values(), *hot.values()]
    out = client.predict(handle_file(image), QUESTIONS[0], "recap", N, *settings, api_name="/run")
    assert not out[ERROR], out[ERROR]
    out = client.predict(QUESTIONS[1], "recap", N, *settings, api_name="/follow_up")
    assert not out[ERROR], out[ERROR]
    traces = conversation_file(out[CONVERSATION_FILE])
    assert [t.sampling.seed for t in traces] == [7, 8]
    config = {"do_sample": True, "temperature": 3.0, "top_p": 0.95, "top_k": 0}
    want = recap.converse(target, QUESTIONS[:2], image=load_image(image), method="ar", max_new_tokens=N,
                          generation_config=config, seed=7)
    assert [t.token_ids for t in traces] == [g.token_ids for g in want.generations]
    greedy = recap.converse(target, QUESTIONS[:2], image=load_image(image), method="ar", max_new_tokens=N)
    assert [t.token_ids for t in traces] != [g.token_ids for g in greedy.generations]  # it sampled


def test_a_turns_seed_wraps_past_the_largest_seed():
    from recap.verification.seed import MAX_SEED, turn_seed

    assert [turn_seed(7, t) for t in range(3)] == [7, 8, 9] and turn_seed(None, 2) is None
    assert turn_seed(MAX_SEED, 0) == MAX_SEED and turn_seed(MAX_SEED, 1) == 0
    with pytest.raises(ValueError, match="seed must be an integer"):
        turn_seed(-1, 0)


def test_a_follow_up_needs_a_conversation_and_new_conversation_clears_it(client):
    out = follow_up(client, "And then?")  # the session's first request: nothing to continue
    assert "no conversation to continue: Run a request first" in out[ERROR]
    start(client)
    assert shown_turn(follow_up(client, QUESTIONS[1])) == 2
    client.predict(api_name="/new_conversation")
    out = follow_up(client, "And then?")
    assert "no conversation to continue" in out[ERROR]
    start(client, QUESTIONS[2])  # a new Run is a new conversation: its turn 1
    assert [t.prompt for t in conversation_file(follow_up(client, QUESTIONS[1])[CONVERSATION_FILE])] == [
        QUESTIONS[2], QUESTIONS[1]]


def test_a_conversation_file_uploads_again_and_bad_files_are_refused(client, tmp_path):
    start(client)
    out = follow_up(client, QUESTIONS[1])
    path = out[CONVERSATION_FILE]
    traces = conversation_file(path)
    other = Client(client.src, verbose=False)  # another visitor views it, without a model run
    shown = other.predict(handle_file(path), api_name="/load_conversation")
    assert not shown[ERROR] and shown_turn(shown) == 2 and "loaded from a trace file" in shown[STATUS]
    assert chat(shown) == chat_of(traces) and "read from a file" in shown[CHAT]["label"]
    assert shown_text(other.predict(1, api_name="/choose_turn")) == traces[0].text
    out = other.predict("And then?", "recap", N, api_name="/follow_up")
    assert "for viewing" in out[ERROR]

    doc = json.loads(gzip.decompress(Path(path).read_bytes()))
    swapped = {**doc, "turns": doc["turns"][::-1]}
    broken = {**doc, "turns": [doc["turns"][0], {**doc["turns"][1], "prompt_tokens": "many"}]}
    for name, content, message in [
        ("not_json.json", "{not json", "not a JSON document"),
        ("foreign.json", json.dumps({"schema": "something-else"}), "not a RECAP conversation"),
        ("empty.json", json.dumps({**doc, "turns": []}), "turns: expected a non-empty list of traces"),
        ("swapped.json", json.dumps(swapped), "turn 1 of the file records turn 2"),
        ("broken.json", json.dumps(broken), "turn 2: prompt_tokens: expected an integer"),
    ]:
        bad = tmp_path / name
        bad.write_text(content)
        out = other.predict(handle_file(str(bad)), api_name="/load_conversation")
        assert message in out[ERROR], out[ERROR]
    # the trace upload names what a conversation file is
    out = other.predict(handle_file(path), api_name="/load_trace")
    assert "this is a conversation file" in out[ERROR]


@pytest.fixture(scope="module")
def bounded_app(model_dir: str, target):
    """Public mode, 3 turns at most, and a prompt-token bound that three short turns fit under."""
    first = recap.prepare_inputs(target, load_image(example()[0]), QUESTIONS[0])["input_ids"].shape[-1]
    demo, url = launch_app(model_dir, public=True,
                           limits={"max_turns": 3, "max_conversation_tokens": first + 2 * N + 120})
    yield demo, url
    demo.close()


def test_public_bounds_refuse_a_follow_up_naming_the_bound_and_keep_the_conversation(bounded_app):
    client = Client(bounded_app[1], verbose=False)
    start(client)
    follow_up(client, QUESTIONS[1])
    long_question = "Is it " + " or ".join(["a red circle", "a blue square", "a green star"] * 20) + "?"
    out = follow_up(client, long_question)
    assert "prompt tokens" in out[ERROR] and "max conversation tokens" in out[ERROR], out[ERROR]
    out = follow_up(client, QUESTIONS[2])  # the conversation is as it was: this is its turn 3
    assert not out[ERROR] and [t.turn for t in conversation_file(out[CONVERSATION_FILE])] == [1, 2, 3]
    out = follow_up(client, "And then?")
    assert "max turns per conversation: 3" in out[ERROR], out[ERROR]
    out = client.predict(3, api_name="/choose_turn")  # still three turns, the third one's decode
    assert downloaded_trace(out[TRACE_FILE]).prompt == QUESTIONS[2]
    with pytest.raises(AppError, match="there is no turn 4"):
        client.predict(4, api_name="/choose_turn")


@pytest.mark.parametrize(
    ("handler", "message", "event_data", "says"),
    [
        ("select_message", None, {"index": 10**6}, "that message is no turn of this conversation"),
        ("select_message", None, {"index": "x"}, "that message is no turn of this conversation"),
        ("select_message", None, None, "that message is no turn of this conversation"),
        ("ask", {"text": "And then?", "files": []}, None, "there is no conversation to continue"),
        # a file the client did not upload: Gradio refuses it before the app (nothing read from there)
        ("ask", {"text": "q", "files": [{"path": "/etc/hostname", "meta": {"_type": "gradio.FileData"}}]},
         None, "because it was not uploaded by a user"),
    ],
)
def test_the_chats_hidden_events_refuse_forged_data_in_one_sentence(bounded_app, handler, message, event_data,
                                                                       says):
    """The chat's click and box, called by fn_index as a hostile client would: one clear sentence (the
    error box, or the error), never Gradio's generic one. (A box value of the wrong shape is refused by
    Gradio's own data model first, naming the field; ``chat_input`` checks it again.)"""
    from app.widgets.sampling_form import default_values

    demo, url = bounded_app
    index = fn_index(demo, handler)
    data = [None]
    if handler == "ask":  # the session, the box, the form, then the settings by name (as /run)
        data += [message, "recap", N, *advanced_values(), *default_values().values()]
    assert len(data) == len(demo.fns[index].inputs)
    answer = call_event(url, index, data, event_data)
    said = answer["error"] if not answer["success"] else answer["data"][ERROR]
    assert says in said, answer


# --------------------------------------------------------------------------- no server: the pieces


def test_the_chat_shows_questions_and_answers_as_text_and_a_message_names_its_turn():
    from test_trace_schema import valid_trace

    from app.presenters.conversation import chat_messages, turn_choices, turn_of_message

    hostile = valid_trace()
    hostile.prompt, hostile.text = "<img src=x onerror=alert(1)> **bold**", "<script>alert(2)</script> & `x`"
    messages = chat_messages([valid_trace(), hostile], "/tmp/image.png", pending=("  indented\n<b>q</b>", ""))
    texts = [[c["text"] for c in m["content"] if c.get("type") == "text"] for m in messages]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert texts[2:] == [["&lt;img src=x onerror=alert(1)&gt; **bold**"],
                         ["&lt;script&gt;alert(2)&lt;/script&gt; &amp; `x`"],
                         ["  indented\n&lt;b&gt;q&lt;/b&gt;"], ["…"]]  # escaped, indents kept; one begun
    assert messages[0]["content"][0] == {"path": "/tmp/image.png", "alt_text": "the conversation's image"}
    assert all(c.get("type") == "text" for m in messages[1:] for c in m["content"])  # the image once
    assert [turn_of_message(i, 2) for i in (-1, 0, 1, 2, 3, 4, 10**9)] == [None, 1, 1, 2, 2, None, None]
    assert [n for _label, n in turn_choices([valid_trace(), hostile])] == [1, 2]


def test_a_conversation_file_over_the_deployments_bounds_is_refused(tmp_path):
    from test_trace_schema import valid_dict

    from app.state.settings import Limits
    from app.state.trace_files import read_conversation
    from recap.trace.format import TraceError

    turns = [{**valid_dict(), "turn": i} for i in range(1, 5)]
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps({"schema": "recap-conversation", "version": 1, "turns": turns}))
    assert [t.turn for t in read_conversation(str(path), Limits(max_turns=4))] == [1, 2, 3, 4]
    with pytest.raises(TraceError, match="the conversation has 4 turns; this deployment shows up to 3"):
        read_conversation(str(path), Limits(max_turns=3))
    with pytest.raises(TraceError, match="has 20 tree nodes; this deployment shows traces up to 19"):
        read_conversation(str(path), Limits(max_trace_nodes=19))  # 5 nodes a turn, counted together
