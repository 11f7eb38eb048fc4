"""Inside the step: the Decode tab's teaching panel under the tree.

Three views of the step on screen, all pure functions of its trace (``app.presenters.fusion``,
``app.presenters.play``, ``app.presenters.mask``), so uploaded traces get them too:

* **Inspect a node**: pick a node (the dropdown, a click on an output token, or a row of
  the aliasing table): each memory source's top-k as bars with its fusion weight,
  entropy and concentration, the fused distribution stacked by source, drafted children
  and the target's token marked; below, where each source's row came from, with the
  writing image's thumbnail when another image wrote it;
* **Play the step**: draft -> verify -> accept as an animation (speed adjustable), or
  the whole run;
* **Attention mask**: which nodes see which, the picked node highlighted.

The panel follows the main view: it redraws when the tree does (not while a run streams:
the run's end redraws it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from recap.trace.format import TraceStep

from ..boundary.guard import guarded
from ..boundary.validation import as_int
from ..presenters import sampling as sampling_view
from ..presenters.fusion import fusion_figure, inspect_node, node_choices, telling_node
from ..presenters.mask import EXPLANATION, mask_figure, prefix_length
from ..presenters.play import DEFAULT_FRAME_MS, play_figure, run_play_figure
from ..presenters.provenance import image_data_uri, provenance_html
from ..presenters.tree import empty_figure
from ..state.runs import Run
from ..state.session import Session
from ..state.steps import find_step, step_of_token
from .anim import AnimatedPlot, figure_json
from .components import loose
from .main_view import MainView, main_view, shown_step
from .records import KEEP, Record

NO_STEP = "Run a request (or upload a trace) to look inside its steps."
INSPECT_HELP = (
    "Pick a node: the bars show what each memory predicted **after** it (its fusion weight, entropy "
    "and concentration on top), the fused mix they make, the children the drafter drafted from it "
    "and the token the target wanted (outlined). For a leaf, the picture is how it was drafted."
)


@dataclass
class StepPanelView(Record):
    """The panel's outputs: node picker, inspector (heading, chart, provenance), play, mask."""

    node: gr.Dropdown = KEEP
    heading: gr.Markdown | str = KEEP
    fusion: gr.Plot | go.Figure = KEEP
    provenance: gr.HTML | str = KEEP
    # an AnimatedPlot; its value: the play's figure as JSON (``app.widgets.anim.figure_json``)
    play: gr.HTML | str = KEEP
    mask: gr.Plot | go.Figure = KEEP


def _thumbnail(run: Run) -> Any:
    requests = run.slot.requests if run.slot is not None else {}

    def src(request: int) -> str | None:
        rec = requests.get(request)
        return image_data_uri(rec.image_path) if rec is not None else None

    return src


def _current(session: Session) -> tuple[Run | None, TraceStep | None]:
    run = session.current
    if run is None or not run.trace.steps:
        return run, None
    return run, find_step(run.trace, shown_step(session))


def _picked(session: Session, step: TraceStep) -> int:
    """The node the visitor picked in this step (default: the accepted node fused from the most sources)."""
    if (
        session.highlight
        and session.highlight[0] == step.step
        and 0 <= session.highlight[1] < len(step.nodes)
    ):
        return session.highlight[1]
    return telling_node(step)


@dataclass(frozen=True)
class PanelPicture:
    """The panel's views of one step and node as plain values: a handler's update (``panel_view``) and
    the Decode tab's first page (``StepPanel.build``) are both made from it."""

    choices: list[tuple[str, int]]
    node: int
    heading: str
    fusion: go.Figure
    provenance: str
    play: str  # the play's figure as JSON (``app.widgets.anim.figure_json``)
    mask: go.Figure


def picture(run: Run, step: TraceStep, node: int, speed_ms: int = DEFAULT_FRAME_MS) -> PanelPicture:
    """Every view of the panel for one step of a run, inspecting ``node``."""
    choice = inspect_node(step, node)
    choices = node_choices(step)
    label = dict((v, k) for k, v in choices)[node]
    drawn = sampling_view.inspector_markdown(step, choice.node)  # "": a greedy step
    heading = f"**Node {label}** · {INSPECT_HELP}" + (f"\n\n{drawn}" if drawn else "")
    return PanelPicture(
        choices=choices,
        node=node,
        heading=heading,
        fusion=fusion_figure(choice),
        provenance=provenance_html(choice, _thumbnail(run)),
        play=figure_json(play_figure(step, frame_ms=speed_ms)),
        mask=mask_figure(step, prefix=prefix_length(run.trace, step), selected=node),
    )


def first_picture(run: Run, step_no: int | None) -> PanelPicture | None:
    """The panel of a run on screen at ``step_no`` with no node picked yet (what a new page shows)."""
    step = find_step(run.trace, step_no)
    return None if step is None else picture(run, step, telling_node(step))


def panel_view(session: Session, speed_ms: int = DEFAULT_FRAME_MS) -> StepPanelView:
    """Every view of the panel for the session's current step and picked node."""
    run, step = _current(session)
    if run is None or step is None:
        return StepPanelView(node=gr.Dropdown(choices=[], value=None), heading=NO_STEP,
                             fusion=empty_figure(NO_STEP, height=200), provenance="", play="",
                             mask=empty_figure(NO_STEP, height=200))
    p = picture(run, step, _picked(session, step), speed_ms)
    return StepPanelView(
        node=gr.Dropdown(choices=p.choices, value=p.node),
        heading=p.heading,
        fusion=p.fusion,
        provenance=p.provenance,
        play=p.play,
        mask=p.mask,
    )


class StepPanel:
    """Layout, handlers and wiring of the Decode tab's "inside the step" panel."""

    # ------------------------------------------------------------------ handlers
    def refresh(self, session: Session, speed: Any):
        """The main view changed: follow it (while a run streams, wait for its end)."""
        if session.jobs.running:
            return StepPanelView().to(self.ui)
        return panel_view(session, _speed(speed)).to(self.ui)

    def pick_node(self, session: Session, node: Any):
        """A node from the dropdown: circle it in the tree (the tree's change redraws the panel)."""
        run, step = _current(session)
        if step is None or node is None:
            return gr.skip()
        session.highlight = (step.step, min(max(as_int("node", node), 0), len(step.nodes) - 1))
        return main_view(session, charts=False).tree

    def select_token(self, session: Session, evt: gr.SelectData):
        """A click on an output token: inspect the choice that produced it (its node, or for a
        bonus token the last accepted node, where the target chose it). The Decode tab's own
        handler moves the main view to the step; its tree's change redraws the panel."""
        run = session.current
        index = (
            evt.index[0]
            if evt is not None and isinstance(evt.index, (list, tuple))
            else getattr(evt, "index", None)
        )
        if run is None or index is None:
            return gr.skip()
        step_no = step_of_token(run.trace, int(index))
        step = find_step(run.trace, step_no) if step_no is not None else None
        if step is None:
            return gr.skip()
        before = sum(len(s.emitted) for s in run.trace.steps if s.step < step.step)
        j = int(index) - before  # position of the token within its step's output
        node = step.accepted[j + 1] if j + 1 < len(step.accepted) else step.accepted[-1]
        session.view_step = step.step
        session.highlight = (step.step, node)
        return main_view(session, charts=False).tree

    def set_speed(self, session: Session, speed: Any):
        run, step = _current(session)
        if step is None:
            return gr.skip()
        return figure_json(play_figure(step, frame_ms=_speed(speed)))

    def play_run(self, session: Session, speed: Any):
        run = session.current
        if run is None or not run.trace.steps:
            gr.Warning("Run a request first: there is no run to play.")
            return gr.skip()
        return figure_json(run_play_figure(run.trace, frame_ms=max(60, _speed(speed) // 2)))

    # ------------------------------------------------------------------ layout and wiring
    def build(self, first: PanelPicture | None = None) -> StepPanelView:
        """The panel's components (call inside the Decode tab's right column), showing ``first`` if given."""
        empty = empty_figure(NO_STEP, height=200)
        with gr.Tabs(elem_id="recap-step-panel"):
            with gr.Tab("Inspect a node", id="inspect"):
                node = loose(gr.Dropdown(first.choices if first else [], value=first.node if first else None,
                                         label="Node of the step on screen (or click an output token)",
                                         elem_id="recap-node"))
                heading = gr.Markdown(first.heading if first else NO_STEP, elem_id="recap-inspect-heading")
                fusion = gr.Plot(first.fusion if first else empty, show_label=False, elem_id="recap-fusion")
                provenance = gr.HTML(first.provenance if first else "", elem_id="recap-provenance")
            with gr.Tab("Play the step", id="play"):
                gr.Markdown(
                    "**Play** grows the tree in the order best-first search added its nodes (suffix-chain "
                    "nodes ringed purple), verifies it level by level (rejections where the target differed "
                    "ringed red) and accepts the path plus the bonus token. It runs in your browser."
                )
                with gr.Row():
                    self.speed = loose(gr.Slider(100, 1500, value=DEFAULT_FRAME_MS, step=50,
                                                 label="ms per frame (speed)", elem_id="recap-play-speed"))
                    self.run_btn = gr.Button("Play the whole run", size="sm", elem_id="recap-play-run")
                play = AnimatedPlot(value=first.play if first else "", elem_id="recap-play")
            with gr.Tab("Attention mask", id="mask"):
                mask = gr.Plot(first.mask if first else empty, show_label=False, elem_id="recap-mask")
                gr.Markdown(EXPLANATION)
        self.ui = StepPanelView(
            node=node, heading=heading, fusion=fusion, provenance=provenance, play=play, mask=mask
        )
        return self.ui

    def wire(self, session: gr.State, main: MainView, run_event: Any) -> None:
        ui = self.ui
        outs = ui.outputs()
        main.tree.change(guarded(self.refresh), [session, self.speed], outs, api_visibility="private",
                         trigger_mode="always_last")
        run_event.then(guarded(self.refresh), [session, self.speed], outs, api_visibility="private")
        ui.node.input(guarded(self.pick_node), [session, ui.node], main.tree, api_visibility="private")
        main.text.select(guarded(self.select_token), [session], main.tree, api_visibility="private")
        self.speed.release(guarded(self.set_speed), [session, self.speed], ui.play, api_visibility="private")
        self.run_btn.click(guarded(self.play_run), [session, self.speed], ui.play, api_visibility="private")


def _speed(value: Any) -> int:
    try:
        return min(max(int(float(value)), 50), 5000)
    except (TypeError, ValueError):
        return DEFAULT_FRAME_MS
