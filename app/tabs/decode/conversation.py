"""The Decode tab's conversation: follow-up questions, the turns, and the answer the views show.

After a Run (turn 1), a follow-up question decodes the next turn on the conversation so far
(``app.state.conversation``: the image, the earlier questions, the model's own answers) on the
session's memory, streaming into the main view like Run. The turns view lists the questions
and answers (as text); choosing an answer (the turn picker, or ``/choose_turn``) points every
view at that turn's decode: the tree and step slider, the inspector, play and mask (the tree's
change redraws them), and the Aliasing and Memory tabs (they read the session's current run).
New conversation (and every Run) starts again. The conversation downloads as one file (every
turn's trace), and the upload here shows one again (``app.state.trace_files``).

``/follow_up`` (a long job: ``app.boundary.guard.long_job``) and ``/choose_turn`` are the API; a
follow-up over a public bound (turns, prompt tokens) is refused naming the bound, the session as
it was.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gradio as gr

from app.boundary.errors import UserError
from app.boundary.guard import decode_queue, guarded, log, long_job, warn
from app.boundary.validation import as_int
from app.presenters.conversation import turn_choices, turns_html
from app.presenters.provenance import image_data_uri
from app.state.conversation import Conversation, check_follow_up, turn_config
from app.state.decoding import decode_run, get_model, session_spec
from app.state.requests import check_request
from app.state.runs import Run
from app.state.session import Session
from app.state.settings import Settings, method_labels
from app.state.steps import telling_step
from app.state.trace_files import read_conversation, write_conversation, write_trace
from app.widgets.components import loose
from app.widgets.main_view import RunView, error_view, main_view, render_run, run_view
from app.widgets.records import KEEP, Record
from app.widgets.sampling_form import parse_settings
from recap.trace.format import TraceError
from recap.verification.seed import turn_seed


@dataclass
class ConversationView(Record):
    """The conversation's outputs: the turns, the turn picker, the conversation's download."""

    turns: gr.HTML | str = KEEP
    turn: gr.Radio = KEEP
    file: gr.File | str | None = KEEP  # the file's path


def conversation_view(session: Session, *, write: bool = True) -> ConversationView:
    """The session's conversation as it is (``write``: its download written anew)."""
    conv = session.conversation
    if conv is None:
        return ConversationView(turns=turns_html([], 0), turn=gr.Radio(choices=[], value=None), file=None)
    traces = conv.traces
    note = "Read from a file: for viewing (Run to start a conversation)." if conv.from_a_file else ""
    return ConversationView(
        turns=turns_html(traces, conv.chosen, image_data_uri(conv.thumb), note),
        turn=gr.Radio(choices=turn_choices(traces), value=conv.chosen + 1),
        file=write_conversation(session, traces) if write else KEEP,
    )


class ConversationPanel:
    """Layout, handlers and wiring of the conversation (the Decode tab builds it, then wires it)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ------------------------------------------------------------------ handlers
    def both(self, run: RunView, conversation: ConversationView) -> list[Any]:
        return [*run.to(self.run_ui), *conversation.to(self.ui)]

    def failed(self, message: str) -> list[Any]:
        """A refused follow-up: the error box, everything else (and the session) as it was."""
        return self.both(run_view(error_view(message)), ConversationView())

    def follow_up(self, session: Session, question: Any, method: Any, max_new_tokens: Any,
                  **advanced: Any) -> Iterator[list[Any]]:
        """Decode the next turn with the history; streams like Run (a long job: ``long_job(self.failed)``).

        ``advanced``: the advanced settings, then the Sampling group, by name (as /run takes them).
        """
        settings = self.settings
        question, method, n = check_request(settings, question, method, max_new_tokens)
        config, sampling = parse_settings(advanced, settings)
        spec = session_spec(session, settings)
        model = get_model(spec, settings)
        conv = session.conversation
        messages = check_follow_up(conv, spec.source, settings.limits, model.target, question)
        assert conv is not None  # check_follow_up refuses a missing one
        config, scope = turn_config(conv, config)
        # Turn t draws with seed + t, as recap.converse: the conversation replays in the library.
        sampling = replace(sampling, seed=turn_seed(sampling.seed, len(conv.runs)))
        label = f"turn {len(conv.runs) + 1} · {method_labels()[method]}"
        last = 0.0
        run = None
        turns = decode_run(session, settings, conv.image, question, method, n, config, model=model,
                           sampling=sampling, messages=messages, memory_scope=scope, label=label)
        for run in turns:  # noqa: B007
            now = time.perf_counter()
            if now - last >= settings.stream_interval:
                last = now
                yield self.both(run_view(main_view(session, running=True, charts=False)), ConversationView())
        if run is None:
            raise UserError("the decode produced no step")
        if run.trace.stop_reason == "stopped":
            gr.Info("Stopped: the partial answer is this turn's.")
        conv.add(run)
        if session.view_step is None:  # unless the visitor picked a step meanwhile
            session.view_step = telling_step(run.trace)
        yield self.both(run_view(main_view(session), write_trace(session, run)), conversation_view(session))

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
            turns = gr.HTML(turns_html([], 0), elem_id="recap-turns")
            turn = gr.Radio([], value=None, label="Answer shown (choose one: every view shows its decode)",
                            elem_id="recap-turn")
            with gr.Row():
                self.question = gr.Textbox(
                    label="Follow-up question", lines=1, max_lines=4, scale=4, elem_id="recap-follow-up",
                    placeholder="Ask about the same image: the model sees the earlier turns.",
                    info=f"Up to {limits.max_turns} turns and {limits.max_conversation_tokens} prompt "
                    "tokens.",
                )
                self.ask = gr.Button("Ask", variant="primary", scale=0, min_width=80, elem_id="recap-ask")
                self.new = gr.Button("New conversation", scale=0, min_width=150,
                                     elem_id="recap-new-conversation")
            with gr.Row():
                file = gr.File(label="the conversation (.json.gz: every turn's trace)", interactive=False,
                               height=60, elem_id="recap-conversation-file")
                self.upload = gr.UploadButton("Upload a conversation (.json.gz)", file_types=[".json", ".gz"],
                                              size="sm", type="filepath", elem_id="recap-conversation-upload")
        self.ui = ConversationView(turns=turns, turn=turn, file=file)
        return self.ui

    def wire(self, session: gr.State, run_ui: RunView, form: list[Any], named: dict[str, Any],
             run_event: Any) -> None:
        """``form``: the Decode tab's method and max new tokens; ``named``: its advanced settings and
        sampling knobs by name (a follow-up decodes with them, as Run)."""
        self.run_ui = run_ui
        ui = self.ui
        outputs = [*run_ui.outputs(), *ui.outputs()]
        follow_up = long_job(self.failed)(self.follow_up)
        kw: dict[str, Any] = {**decode_queue(self.settings.concurrency), "inputs_kwargs": named}
        inputs = [session, self.question, *form]
        self.ask.click(follow_up, inputs, outputs, api_name="follow_up", trigger_mode="once", **kw)
        self.question.submit(follow_up, inputs, outputs, api_visibility="private", trigger_mode="once", **kw)
        ui.turn.input(guarded(self.choose_turn), [session, ui.turn], outputs, api_name="pick_turn",
                      api_visibility="private", trigger_mode="always_last")
        # API: /choose_turn (the turn number). Its own hidden input: the picker's choices are per session,
        # and the app (not the component) names a turn that is not there.
        api_turn = loose(gr.Number(visible=False, label="turn (1 = the first)"))
        api_btn = gr.Button(visible=False)
        api_btn.click(guarded(self.choose_turn), [session, api_turn], outputs, api_name="choose_turn",
                      api_description="Show turn N's decode in every view; returns the main view, that "
                      "turn's trace download, then the conversation (its turns, the turn picker, its file).")
        self.new.click(guarded(self.new_conversation), [session], ui.outputs(), api_name="new_conversation")
        self.upload.upload(guarded(self.load), [session, self.upload], outputs, api_name="load_conversation")
        run_event.then(guarded(self.refresh), [session], ui.outputs(), api_visibility="private")
