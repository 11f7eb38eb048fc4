"""Decode tab: image, prompt and method in; the step's tree, the output text and the run charts out.

Run streams the growing run step by step (``app.state.decoding.decode_run``); Stop ends it after
the current step; the step slider and a click on an output token show another step. The side
panels (model, memory, trace files) live in ``app.tabs.decode.panels``; the conversation (follow-up
questions, the turns, the answer shown) in ``app.tabs.decode.conversation``. Run and ``/decode`` are
long jobs (``app.boundary.guard.long_job``): bad input becomes a clear message (for Run a
warning plus the error box, what is shown otherwise untouched; ``/decode``, API only, raises
``gr.Error`` with the same messages).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from ...boundary.errors import UserError
from ...boundary.guard import decode_queue, fail, guarded, long_job
from ...boundary.validation import as_int, event_index
from ...presenters.text import listed
from ...state.conversation import Conversation
from ...state.decoding import decode_run, decode_to_end, get_model, session_spec
from ...state.example import ShippedExample, shipped_example
from ...state.requests import check_request, open_image
from ...state.session import Session
from ...state.settings import DEFAULT_METHOD, REFERENCE_METHOD, Settings, app_methods, method_choices
from ...state.steps import step_of_token, telling_step
from ...state.targets import MODELS
from ...state.trace_files import write_trace
from ...widgets.components import SafeImage, loose
from ...widgets.config_form import SESSION_CONFIG, build_widgets
from ...widgets.main_view import MainView, RunPicture, error_view, main_view, picture, run_view
from ...widgets.run_figures import FiguresView, RunFigures, first_figures
from ...widgets.sampling_form import build_widgets as build_sampling
from ...widgets.sampling_form import parse_settings
from ...widgets.step_panel import PanelPicture, StepPanel, first_picture
from .conversation import ConversationPanel
from .panels import DecodePanels


@dataclass
class DecodeInputs:
    """The Decode tab's request inputs, which the Compare tab reuses."""

    image: gr.Image
    prompt: gr.Textbox
    method: gr.Radio
    max_new: gr.Slider
    top_k: gr.Number
    # by parameter name, in API order (``app.widgets.config_form.PARAM_NAMES``)
    advanced: dict[str, gr.Component]
    # the Sampling group, by name in API order (``app.widgets.sampling_form.KNOB_NAMES``)
    sampling: dict[str, gr.Component]


class DecodeTab:
    """Layout, handlers and wiring of the Decode tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.panels = DecodePanels(settings)
        self.step_panel = StepPanel()  # inside the step: inspector, play, attention mask
        self.conversation = ConversationPanel(settings)  # follow-up questions, the turns
        self.figures = RunFigures()  # acceptance, why this size, where the time goes
        self.example = shipped_example(settings)  # the finished run a new page opens on (None: an empty page)

    # ------------------------------------------------------------------ handlers
    def failed_run(self, message: str) -> list[Any]:
        """What Run's outputs show when it is refused or its request is wrong: the error box, the rest
        kept."""
        return run_view(error_view(message)).to(self.run_ui)

    def run(self, session: Session, image: Any, prompt: Any, method: Any, max_new_tokens: Any,
            **advanced: Any) -> Iterator[list[Any]]:
        """Decode with the chosen method; streams the tree, text and counters step by step (a long job:
        ``long_job(self.failed_run)``).

        ``advanced``: the advanced settings (``app.widgets.config_form``), then the Sampling group
        (``app.widgets.sampling_form``), by name, so /run names them.
        """
        ui = self.run_ui
        settings = self.settings
        prompt, method, n = check_request(settings, prompt, method, max_new_tokens)
        config, sampling = parse_settings(advanced, settings)
        img = open_image(image, settings)
        spec = session_spec(session, settings)
        if not MODELS.loaded(spec):
            gr.Info(f"Loading the model {spec.name} (first run)…")
        model = get_model(spec, settings)
        note = ""
        if img is None:
            note = "No image: this is a text-only run."
            gr.Info(note)
        if sampling.note:
            note = f"{note} {sampling.note}".strip()
            gr.Info(sampling.note)
        last = last_charts = 0.0
        run_obj = None
        for run_obj in decode_run(session, settings, img, prompt, method, n, config=config, model=model,  # noqa: B007
                                  sampling=sampling):
            now = time.perf_counter()
            if now - last >= settings.stream_interval:
                last = now
                # charts redraw less often: the browser has 3 plots to render
                charts = now - last_charts >= 4 * settings.stream_interval
                if charts:
                    last_charts = now
                yield run_view(main_view(session, running=True, note=note, charts=charts)).to(ui)
        if run_obj is not None and run_obj.trace.stop_reason == "stopped":
            gr.Info("Stopped: the partial run stays on screen.")
        if run_obj is not None and session.view_step is None:  # unless the visitor picked a step meanwhile
            session.view_step = telling_step(run_obj.trace)
        if run_obj is not None:  # every Run begins a conversation: its request is turn 1
            session.conversation = Conversation.start(spec.source, img, run_obj)
        yield run_view(main_view(session, note=note), write_trace(session, run_obj)).to(ui)

    def stop(self, session: Session) -> None:
        """Ask the running decode of this session to stop after its current step."""
        if session.jobs.ask_stop():
            gr.Info("Stopping after the current step…")

    def show_step(self, session: Session, step: Any):
        """Show another step of the current run (slider)."""
        run_obj = session.current
        if run_obj is None or not run_obj.trace.steps:
            return error_view().to(self.main_ui)
        try:
            k = as_int("step", step)
        except UserError as exc:
            return error_view(str(exc)).to(self.main_ui)
        latest = len(run_obj.trace.steps)
        session.view_step = None if (k >= latest and session.jobs.running) else min(max(k, 1), latest)
        return main_view(session, running=session.jobs.running).to(self.main_ui)

    def select_token(self, session: Session, evt: gr.EventData):
        """Clicking an output token jumps to the step that produced it."""
        run_obj = session.current
        index = event_index(evt)
        if run_obj is None or index is None:
            return error_view().to(self.main_ui)
        step = step_of_token(run_obj.trace, index)
        if step is None:
            return error_view().to(self.main_ui)
        session.view_step = step
        return main_view(session, running=session.jobs.running).to(self.main_ui)

    def decode_api(self, session: Session, image: Any, prompt: Any, method: Any, max_new_tokens: Any) -> str:
        """API: decode one request with default settings; returns the trace as a JSON string (a long job)."""
        prompt, method, n = check_request(self.settings, prompt, method, max_new_tokens)
        img = open_image(image, self.settings)
        run_obj = decode_to_end(session, self.settings, img, prompt, method, n, config=SESSION_CONFIG)
        return run_obj.trace.to_json()

    def pick_example(self, evt: gr.EventData):
        index = event_index(evt)
        if index is None or not 0 <= index < len(self.settings.examples):
            raise fail(f"there is no such example; choose one of the {len(self.settings.examples)} shown")
        entry = self.settings.examples[index]
        return entry["path"], entry["prompt"]

    # ------------------------------------------------------------------ layout and wiring
    def build(self, demo: gr.Blocks, session: gr.State) -> DecodeInputs:
        """The tab's components and events (call inside ``gr.Tab``); returns its request inputs."""
        settings = self.settings
        example = self.example
        first, first_panel = first_page(example)
        first_figs = first_page_figures(example)
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=320):
                image = SafeImage(value=example.image if example else None, type="filepath",
                                  label="Image (upload, paste, or pick an example)",
                                  sources=["upload", "clipboard"], height=260, elem_id="recap-image")
                prompt = gr.Textbox(
                    value=example.prompt if example else "",
                    label="Prompt",
                    lines=2,
                    max_lines=6,
                    placeholder="Describe the image in detail.",
                    info=f"Up to {settings.max_prompt_chars} characters.",
                    elem_id="recap-prompt",
                )
                method = gr.Radio(
                    method_choices(), value=DEFAULT_METHOD.name, label="Method", elem_id="recap-method"
                )
                max_new = gr.Slider(
                    1,
                    settings.max_new_tokens,
                    value=min(128, settings.max_new_tokens),
                    step=1,
                    label="Max new tokens",
                    elem_id="recap-max-new",
                )
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", elem_id="recap-run")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="recap-stop")
                examples = gr.Gallery(
                    [(e["path"], _example_caption(e)) for e in settings.examples],
                    label="Examples (click one: it fills the image and the prompt)",
                    columns=4, height=210, allow_preview=False, object_fit="contain",
                    visible=bool(settings.examples), elem_id="recap-examples", interactive=False,
                )
                sampling = build_sampling("recap", SAMPLING_INTRO)
                with gr.Accordion("Advanced settings", open=False):
                    others = listed(
                        [m.label for m in app_methods() if m not in (DEFAULT_METHOD, REFERENCE_METHOD)]
                    )
                    gr.Markdown(
                        f"Drafter settings ({DEFAULT_METHOD.label} uses all; {others} use budget, depth and "
                        "k)."
                    )
                    advanced = build_widgets()
                panels = self.panels.build()
            with gr.Column(scale=3, min_width=480):
                self.main_ui = MainView(
                    status=gr.Markdown(first.status, elem_id="recap-status"),
                    error=gr.HTML("", elem_classes=["recap-error"], elem_id="recap-error"),
                    tree=gr.Plot(first.tree, label="Candidate tree of the step", elem_id="recap-tree"),
                    step=loose(gr.Slider(**first.slider, step=1, label="Step", elem_id="recap-step")),
                    text=gr.HighlightedText(
                        first.text,
                        color_map=first.colors,
                        label="Output (each token marked by its step: drafted & accepted, or bonus; "
                        "click a token to see its step)",
                        show_legend=False,
                        show_inline_category=False,
                        combine_adjacent=False,
                        elem_id="recap-output",
                    ),
                )
                self.conversation.build()
                self.step_panel.build(first_panel)
                with gr.Row():
                    self.main_ui.lengths = gr.Plot(
                        first.lengths, label="Accepted length", elem_id="recap-lengths"
                    )
                    self.main_ui.times = gr.Plot(first.times, label="Time per step", elem_id="recap-times")
                self.figures.build(first_figs)
        self.run_ui = run_view(self.main_ui, panels.trace_file)
        loose(method)
        loose(max_new)
        inputs = DecodeInputs(
            image=image,
            prompt=prompt,
            method=method,
            max_new=max_new,
            top_k=advanced["top_k"],
            advanced=advanced,
            sampling=sampling,
        )
        self._wire(demo, session, inputs, run_btn, stop_btn, examples)
        return inputs

    def _wire(
        self,
        demo: gr.Blocks,
        session: gr.State,
        inputs: DecodeInputs,
        run_btn: Any,
        stop_btn: Any,
        examples: Any,
    ) -> None:
        settings = self.settings
        main = self.main_ui
        examples.select(
            guarded(self.pick_example), None, [inputs.image, inputs.prompt], api_visibility="private"
        )
        run_inputs = [session, inputs.image, inputs.prompt, inputs.method, inputs.max_new]
        # the advanced settings, then the sampling knobs, go by name (inputs_kwargs): the /run API names its
        # parameters after them, in that order (the sampling ones last: older positional callers keep working)
        decode_kw: dict[str, Any] = {
            **decode_queue(settings.concurrency),
            "inputs_kwargs": {**inputs.advanced, **inputs.sampling},
        }
        run = long_job(self.failed_run)(self.run)
        run_event = run_btn.click(run, run_inputs, self.run_ui.outputs(), api_name="run", trigger_mode="once",
                                  **decode_kw)
        inputs.prompt.submit(
            run, run_inputs, self.run_ui.outputs(), api_visibility="private", trigger_mode="once", **decode_kw
        )
        stop_btn.click(guarded(self.stop), [session], None, api_name="stop", concurrency_limit=None)
        main.step.input(guarded(self.show_step), [session, main.step], main.outputs(), api_name="show_step",
                        trigger_mode="always_last")
        main.text.select(guarded(self.select_token), [session], main.outputs(), api_visibility="private")
        self.panels.wire(demo, session, inputs.method, inputs.top_k, main, run_event)
        self.step_panel.wire(session, main, run_event)
        self.figures.wire(session, main, run_event)
        self.conversation.wire(session, self.run_ui, [inputs.method, inputs.max_new],
                               {**inputs.advanced, **inputs.sampling}, run_event)

        # API: /decode (image, prompt, method, max new tokens) -> trace JSON string.
        # Its own hidden inputs, so the app (not the components) validates and names what is wrong.
        api_method = gr.Textbox(
            visible=False, label=f"method ({listed([m.name for m in app_methods()], 'or')})"
        )
        api_max_new = gr.Number(visible=False, label="max new tokens")
        api_out = gr.Textbox(visible=False, label="trace JSON")
        api_btn = gr.Button(visible=False)
        api_btn.click(
            long_job()(self.decode_api),
            [session, inputs.image, inputs.prompt, api_method, api_max_new],
            api_out,
            api_name="decode",
            api_description="Decode one request with default settings; returns the trace as a JSON string "
            "(recap.DecodeTrace.from_json reads it).",
            **decode_queue(settings.concurrency),
        )


SAMPLING_INTRO = (
    "On, each token is a draw from the model's distribution (temperature, top-p, top-k) and the "
    "tree is checked draw by draw: the output is distributed exactly as `generate(do_sample=True)`'s, "
    "one seed gives the same tokens with every method, and the tree shows each drafted child's "
    "chance of being accepted."
)


@functools.cache
def first_page(example: ShippedExample | None) -> tuple[RunPicture, PanelPicture | None]:
    """What a new page shows: the shipped run on its most telling step (each new session holds that run:
    ``app.state.example.open_session``), or the empty view. Drawn once per process, into the layout's own
    values: no model work and no event on page load."""
    if example is None:
        return picture(None), None
    run = example.run(0)
    return picture(run, example.step), first_picture(run, example.step)


@functools.cache
def first_page_figures(example: ShippedExample | None) -> FiguresView:
    """The run figures a new page shows (the shipped run on its most telling step), drawn once per process."""
    return first_figures(example.run(0) if example is not None else None, example.step if example else None)


def _example_caption(entry: dict) -> str:
    pair = f"[pair {entry['pair']}] " if entry.get("pair") else ""
    return f"{pair}{entry['prompt']}"
