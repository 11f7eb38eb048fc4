"""The Decode tab's conversation as a chat: follow-up questions, the turns, and the answer the views show.

After a Run (turn 1), a question typed in the chat's box (a ``gr.MultimodalTextbox``) decodes the
next turn on the conversation so far (``app.state.conversation``: the image, the earlier
questions, the model's own answers) on the session's memory, streaming into the main view like
Run and into the chat. With no conversation going on, a question with an image attached starts
one on that image (its turn 1, decoded as Run decodes); a conversation has one image, so an
image attached to a follow-up is refused. The chat (a ``gr.Chatbot``, the image inline in the
first question) shows the questions and answers as text (``app.presenters.conversation``);
clicking a message, or the compact turn picker beside it, or ``/choose_turn``, points every view
at that turn's decode: the tree and step slider, the inspector, play and mask (the tree's change
redraws them), and the Aliasing and Memory tabs (they read the session's current run). New
conversation (the button, the chat's clear icon, and every Run) starts again. The conversation
downloads as one file (every turn's trace), and the upload here shows one again
(``app.state.trace_files``).

``/follow_up`` (a long job: ``app.boundary.guard.long_job``; the text of a follow-up, as before the
chat) and ``/choose_turn`` are the API; a follow-up over a public bound (turns, prompt tokens) is
refused naming the bound, the session as it was (and the box keeps the question).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gradio as gr

from recap.trace.format import TraceError
from recap.verification.seed import turn_seed

from ...boundary.errors import UserError
from ...boundary.guard import decode_queue, guarded, log, long_job, warn
from ...boundary.validation import as_int, event_index
from ...presenters.conversation import EMPTY, FILE_LABEL, LABEL, chat_messages, turn_choices, turn_of_message
from ...state.conversation import (
    Conversation,
    chat_image,
    check_follow_up,
    check_new_image,
    turn_config,
)
from ...state.decoding import decode_run, get_model, session_spec
from ...state.requests import check_request, open_image
from ...state.runs import Run
from ...state.session import Session
from ...state.settings import Settings, method_labels
from ...state.steps import telling_step
from ...state.trace_files import read_conversation, write_conversation, write_trace
from ...widgets.components import loose
from ...widgets.main_view import RunView, error_view, main_view, render_run, run_view
from ...widgets.records import KEEP, Record
from ...widgets.sampling_form import parse_settings

#: The chat box's value once its question went into the chat.
CLEARED: dict[str, Any] = {"text": "", "files": []}


@dataclass
class ConversationView(Record):
    """The conversation's outputs: the chat, the turn picker, the conversation's download, the chat's box."""

    chat: gr.Chatbot = KEEP  # an update: its messages and label
    turn: gr.Radio = KEEP
    file: gr.File | str | None = KEEP  # the file's path
    box: gr.MultimodalTextbox | dict[str, Any] = KEEP  # emptied once its question is being answered


def conversation_view(session: Session, *, write: bool = True) -> ConversationView:
    """The session's conversation as it is (``write``: its download written anew)."""
    conv = session.conversation
    if conv is None:
        return ConversationView(chat=gr.Chatbot(value=[], label=LABEL), turn=gr.Radio(choices=[], value=None),
                                file=None)
    traces = conv.traces
    return ConversationView(
        chat=gr.Chatbot(value=chat_messages(traces, chat_image(conv, session.files)),
                        label=FILE_LABEL if conv.from_a_file else LABEL),
        turn=gr.Radio(choices=turn_choices(traces), value=conv.chosen + 1),
        file=write_conversation(session, traces) if write else KEEP,
    )


def chat_input(value: Any) -> tuple[Any, str | None]:
    """The chat box's value -> (its text, unchecked; the path of the one image attached, or None).

    The box sends ``{"text": ..., "files": [path, ...]}``; anything else (a hostile client) is refused
    by name. More than one file is refused: a conversation has one image.
    """
    if not isinstance(value, dict):
        raise UserError("the question did not arrive; type it again")
    files = value.get("files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise UserError("the attached image did not arrive; attach it again")
    if len(files) > 1:
        raise UserError(f"attach one image, not {len(files)}: a conversation has one image")
    return value.get("text"), (files[0] if files else None)


class ConversationPanel:
    """Layout, handlers and wiring of the conversation (the Decode tab builds it, then wires it)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ------------------------------------------------------------------ handlers
    def both(self, run: RunView, conversation: ConversationView) -> list[Any]:
        return [*run.to(self.run_ui), *conversation.to(self.ui)]

    def failed(self, message: str) -> list[Any]:
        """A refused question: the error box, everything else (the box's question and the session) as it
        was."""
        return self.both(run_view(error_view(message)), ConversationView())

    def ask(self, session: Session, message: Any, method: Any, max_new_tokens: Any,
            **advanced: Any) -> Iterator[list[Any]]:
        """The chat box: a follow-up question, or with an image attached the first turn of a new
        conversation on it (a long job: ``long_job(self.failed)``)."""
        question, image = chat_input(message)
        if image is None:
            yield from self.follow_up(session, question, method, max_new_tokens, **advanced)
            return
        check_new_image(session.conversation)
        yield from self._decode(session, question, method, max_new_tokens, advanced, image=image)

    def follow_up(self, session: Session, question: Any, method: Any, max_new_tokens: Any,
                  **advanced: Any) -> Iterator[list[Any]]:
        """Decode the next turn with the history; streams like Run (a long job: ``long_job(self.failed)``).

        ``advanced``: the advanced settings, then the Sampling group, by name (as /run takes them).
        """
        yield from self._decode(session, question, method, max_new_tokens, advanced)

    def _decode(self, session: Session, question: Any, method: Any, max_new_tokens: Any,
                advanced: dict[str, Any], image: str | None = None) -> Iterator[list[Any]]:
        """One turn, streamed into the main view and the chat: the next of the conversation, or with
        ``image`` (no conversation going on) the first of a new one, decoded as Run decodes."""
        settings = self.settings
        question, method, n = check_request(settings, question, method, max_new_tokens)
        config, sampling = parse_settings(advanced, settings)
        spec = session_spec(session, settings)
        model = get_model(spec, settings)
        conv = session.conversation
        if image is not None:
            img = open_image(image, settings)
            turns = decode_run(session, settings, img, question, method, n, config=config, model=model,
                               sampling=sampling)
            earlier, shown = [], None
            if sampling.note:
                gr.Info(sampling.note)
        else:
            messages = check_follow_up(conv, spec.source, settings.limits, model.target, question)
            assert conv is not None  # check_follow_up refuses a missing one
            img = conv.image
            config, scope = turn_config(conv, config)
            # Turn t draws with seed + t, as recap.converse: the conversation replays in the library.
            sampling = replace(sampling, seed=turn_seed(sampling.seed, len(conv.runs)))
            label = f"turn {len(conv.runs) + 1} · {method_labels()[method]}"
            turns = decode_run(session, settings, img, question, method, n, config=config, model=model,
                               sampling=sampling, messages=messages, memory_scope=scope, label=label)
            earlier, shown = conv.traces, chat_image(conv, session.files)
        last = 0.0
        run = None
        for run in turns:  # noqa: B007
            now = time.perf_counter()
            if now - last >= settings.stream_interval:
                last = now
                # the question moves from the box into the chat, its answer growing under it
                answer = run.trace.text or "".join(run.trace.token_texts)
                chat = gr.Chatbot(value=chat_messages(earlier, shown, pending=(question, answer)))
                yield self.both(run_view(main_view(session, running=True, charts=False)),
                                ConversationView(chat=chat, box=CLEARED))
        if run is None:
            raise UserError("the decode produced no step")
        if run.trace.stop_reason == "stopped":
            gr.Info("Stopped: the partial answer is this turn's.")
        if image is not None:
            session.conversation = Conversation.start(spec.source, img, run)
        else:
            assert conv is not None
            conv.add(run)
        if session.view_step is None:  # unless the visitor picked a step meanwhile
            session.view_step = telling_step(run.trace)
        yield self.both(run_view(main_view(session), write_trace(session, run)),
                        replace(conversation_view(session), box=CLEARED))

    def choose_turn(self, session: Session, turn: Any) -> list[Any]:
        """Show turn ``turn``'s decode (1 = the first) in every view; its trace becomes the download."""
        conv = session.conversation
        if conv is None:
            raise UserError("there is no conversation: Run a request first (its answer is turn 1)")
        if session.jobs.running:
            raise UserError("a decode is running: wait for it to finish (or press Stop), then choose a turn")
        run = conv.choose(as_int("turn", turn))
        session.current = run
        session.view_step = telling_step(run.trace)
        session.highlight = None
        trace_file = write_trace(session, run) if run.source != "upload" else KEEP
        return self.both(run_view(main_view(session), trace_file), conversation_view(session, write=False))

    def select_message(self, session: Session, evt: gr.EventData) -> list[Any]:
        """A click on a chat message: its turn's decode in every view (as the turn picker)."""
        conv = session.conversation
        index = event_index(evt)
        turn = turn_of_message(index, len(conv.runs)) if conv is not None and index is not None else None
        if turn is None:
            raise UserError("that message is no turn of this conversation (it changed meanwhile): click "
                            "again")
        return self.choose_turn(session, turn)

    def new_conversation(self, session: Session) -> list[Any]:
        """Forget the turns (the runs and the memory stay); the next Run is turn 1."""
        session.conversation = None
        return conversation_view(session).to(self.ui)

    def refresh(self, session: Session) -> list[Any]:
        """After a Run: the conversation it began."""
        return conversation_view(session).to(self.ui)

    def load(self, session: Session, file: Any) -> list[Any]:
        """Show an uploaded conversation (or a single trace as one turn); a bad file leaves the session and
        the views as they are."""
        path = file.get("path") if isinstance(file, dict) else file
        if not path or not isinstance(path, str) or not os.path.isfile(path):
            return self.failed("the conversation file did not arrive; upload it again")
        name = Path(path).name
        try:
            traces = read_conversation(path, self.settings.limits)
            runs = [Run(session.next_run_id(), trace, None, None, "upload", f"{name}, turn {i}")
                    for i, trace in enumerate(traces, 1)]
            for run in runs:
                render_run(run, telling_step(run.trace))  # drawn before it is kept
        except (TraceError, OSError) as exc:
            msg = f"that conversation file cannot be shown: {exc}"
            warn(msg)
            return self.failed(msg)
        except Exception as exc:  # noqa: BLE001 - any other failure: refused, the session untouched
            log.exception("conversation upload failed")
            return self.failed("that conversation file cannot be shown: it is not a valid RECAP "
                               f"conversation ({type(exc).__name__})")
        for run in runs[:-1]:
            run.pack()  # parsed again when chosen
        session.conversation = Conversation.from_file(runs)
        session.add_run(runs[-1])
        session.view_step = telling_step(runs[-1].trace)
        gr.Info(f"Showing the uploaded conversation: {len(runs)} turns.")
        return self.both(run_view(main_view(session)), conversation_view(session, write=False))

    # ------------------------------------------------------------------ layout and wiring
    def build(self) -> ConversationView:
        """The conversation's components (call inside the Decode tab's right column)."""
        limits = self.settings.limits
        with gr.Accordion("Conversation (ask a follow-up question)", open=True, elem_id="recap-conversation"):
            # Markdown off and every text escaped (app.presenters.conversation): a question or an answer
            # is shown as typed, never rendered; sanitize_html stays on behind that.
            chat = gr.Chatbot(
                [], label=LABEL, height=None, min_height=160, max_height=560, render_markdown=False,
                sanitize_html=True, latex_delimiters=[],
                feedback_options=None, buttons=["copy"], group_consecutive_messages=False,
                placeholder="&nbsp;\n\n" + EMPTY,  # a blank line first: the chat's label floats over its top
                elem_id="recap-chat",
            )
            turn = gr.Radio([], value=None, label="Turn shown (every view shows its decode)",
                            elem_id="recap-turn")
            box = gr.MultimodalTextbox(
                label="Follow-up question", sources=["upload"], file_types=["image"], file_count="single",
                lines=1, max_lines=4, elem_id="recap-follow-up",
                placeholder="Ask about the same image: the model sees the earlier turns. (No conversation "
                "going on: attach an image to start one.)",
                info=f"Up to {limits.max_turns} turns and {limits.max_conversation_tokens} prompt tokens; "
                "one image per conversation, its first turn's.",
            )
            with gr.Row():
                self.new = gr.Button("New conversation", size="sm", scale=0, min_width=150,
                                     elem_id="recap-new-conversation")
                file = gr.File(label="the conversation (.json.gz: every turn's trace)", interactive=False,
                               height=60, elem_id="recap-conversation-file")
                self.upload = gr.UploadButton("Upload a conversation (.json.gz)", file_types=[".json", ".gz"],
                                              size="sm", type="filepath", elem_id="recap-conversation-upload")
        self.ui = ConversationView(chat=chat, turn=turn, file=file, box=box)
        return self.ui

    def wire(self, session: gr.State, run_ui: RunView, form: list[Any], named: dict[str, Any],
             run_event: Any) -> None:
        """``form``: the Decode tab's method and max new tokens; ``named``: its advanced settings and
        sampling knobs by name (a question decodes with them, as Run)."""
        self.run_ui = run_ui
        ui = self.ui
        outputs = [*run_ui.outputs(), *ui.outputs()]
        kw: dict[str, Any] = {**decode_queue(self.settings.concurrency), "inputs_kwargs": named}
        ui.box.submit(long_job(self.failed)(self.ask), [session, ui.box, *form], outputs,
                      api_visibility="private", trigger_mode="once", **kw)
        # API: /follow_up (the question's text, as before the chat). Its own hidden input: the box's value is
        # a dict with files, and a follow-up has no image.
        api_question = gr.Textbox(visible=False, label="follow-up question")
        api_ask = gr.Button(visible=False)
        api_ask.click(long_job(self.failed)(self.follow_up), [session, api_question, *form], outputs,
                      api_name="follow_up", trigger_mode="once", **kw)
        ui.turn.input(guarded(self.choose_turn), [session, ui.turn], outputs, api_name="pick_turn",
                      api_visibility="private", trigger_mode="always_last")
        ui.chat.select(guarded(self.select_message), [session], outputs, api_visibility="private",
                       trigger_mode="always_last")
        # API: /choose_turn (the turn number). Its own hidden input: the picker's choices are per session,
        # and the app (not the component) names a turn that is not there.
        api_turn = loose(gr.Number(visible=False, label="turn (1 = the first)"))
        api_btn = gr.Button(visible=False)
        api_btn.click(guarded(self.choose_turn), [session, api_turn], outputs, api_name="choose_turn",
                      api_description="Show turn N's decode in every view; returns the main view, that "
                      "turn's trace download, then the conversation (its chat messages, the turn picker, its "
                      "file, the chat's box).")
        self.new.click(guarded(self.new_conversation), [session], ui.outputs(), api_name="new_conversation")
        # the chat's own clear icon empties it in the page: the session forgets the turns with it
        ui.chat.clear(guarded(self.new_conversation), [session], ui.outputs(), api_visibility="private")
        self.upload.upload(guarded(self.load), [session, self.upload], outputs, api_name="load_conversation")
        run_event.then(guarded(self.refresh), [session], ui.outputs(), api_visibility="private")
