"""The Decode tab's run figures, beside the run charts: acceptance, why this size, where the time goes.

Three views, each a pure function of traces (``recap.trace.stats``, ``recap.trace.step_costs``, drawn by
``app.presenters.acceptance`` and ``app.presenters.costs``), so an uploaded trace gets them too:

* **Acceptance**: the run's per-depth conditional acceptance and its passes by accepted drafted tokens;
  for a conversation of several turns, one series per turn;
* **Why this size**: the step on screen, node by node in the order taken, each node's expected gain
  against the gain needed at the measured cost, the stop, predicted against realised tokens/s;
* **Where the time goes**: the run's cumulative draft / verify / update time against one-token
  decoding of the same tokens (its pass time from Compare's autoregressive run when the run on screen
  is one of a comparison's, else from the trace's sizing, else not measured), with the break-even.

The panel follows the main view as the step panel does: it redraws when the tree does, and at the end
of a run (not while it streams).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from recap.trace.format import DecodeTrace
from recap.trace.step_costs import step_size, time_split

from ..boundary.guard import guarded
from ..presenters.acceptance import acceptance_markdown, depth_figure, histogram_figure, trace_stats
from ..presenters.charts import method_colour
from ..presenters.costs import gain_figure, size_markdown, time_figure, time_markdown
from ..presenters.tree import empty_figure
from ..state.runs import Run
from ..state.session import Session
from ..state.settings import REFERENCE_METHOD
from ..state.steps import find_step
from .main_view import MainView, shown_step
from .records import KEEP, Record

NO_RUN = "Run a request (or upload a trace) to see its acceptance and costs."


@dataclass
class FiguresView(Record):
    """The three views' outputs."""

    acceptance: gr.Markdown | str = KEEP
    depth: gr.Plot | go.Figure = KEEP
    histogram: gr.Plot | go.Figure = KEEP
    size: gr.Markdown | str = KEEP
    gains: gr.Plot | go.Figure = KEEP
    time: gr.Markdown | str = KEEP
    times: gr.Plot | go.Figure = KEEP


@dataclass(frozen=True)
class Context:
    """What the figures of one run read besides its own trace."""

    ar: DecodeTrace | None = None  # an autoregressive run of the same request (Compare's)
    turns: tuple[DecodeTrace, ...] = ()  # the conversation's turns, when the run is one of several


def context_of(session: Session, run: Run) -> Context:
    """The comparison's autoregressive run when ``run`` is one of its runs; the conversation's turns when
    ``run`` is one of two or more."""
    ar = None
    comp = session.compare
    if comp is not None and any(r is run for r in comp.runs.values()):
        ref = comp.runs.get(REFERENCE_METHOD.name)
        ar = ref.trace if ref is not None and ref is not run else None
    conv = session.conversation
    turns: tuple[DecodeTrace, ...] = ()
    if conv is not None and len(conv.runs) > 1 and any(r is run for r in conv.runs):
        turns = tuple(r.trace for r in conv.runs)
    return Context(ar, turns)


def figures(trace: DecodeTrace, step_no: int | None, context: Context = Context()) -> FiguresView:
    """Every view for one run at one step, as values."""
    if not trace.steps:
        return empty_view()
    stats = trace_stats(trace)
    series = {f"turn {t.turn}": trace_stats(t) for t in context.turns} or {trace.method: stats}
    colours = None if context.turns else {trace.method: method_colour(trace.method)}
    title = "by turn" if context.turns else "this run"
    note = (f" One series per turn of the conversation ({len(context.turns)} turns); the sentence is the "
            "turn on screen's." if context.turns else "")
    step = find_step(trace, step_no)
    size = step_size(step) if step is not None else None
    split = time_split(trace, context.ar)
    return FiguresView(
        acceptance=acceptance_markdown(stats) + note,
        depth=depth_figure(series, colours=colours, title=f"Acceptance by depth, {title}"),
        histogram=histogram_figure(series, colours=colours,
                                   title=f"Passes by accepted drafted tokens, {title}"),
        size=size_markdown(size) if size is not None else NO_RUN,
        gains=gain_figure(size) if size is not None else empty_figure(NO_RUN, height=200),
        time=time_markdown(split),
        times=time_figure(split),
    )


def empty_view() -> FiguresView:
    empty = empty_figure(NO_RUN, height=200)
    return FiguresView(acceptance=NO_RUN, depth=empty, histogram=empty, size=NO_RUN, gains=empty, time=NO_RUN,
                       times=empty)


def figures_view(session: Session) -> FiguresView:
    """The views of the session's current run at the step on screen."""
    run = session.current
    if run is None or not run.trace.steps:
        return empty_view()
    return figures(run.trace, shown_step(session), context_of(session, run))


def first_figures(run: Run | None, step_no: int | None) -> FiguresView:
    """What a new page shows (the shipped run on its step: no session yet, so no comparison or turns)."""
    return figures(run.trace, step_no) if run is not None else empty_view()


class RunFigures:
    """Layout, handler and wiring of the run figures under the Decode tab's run charts."""

    def refresh_figures(self, session: Session):
        """The main view changed: follow it (while a run streams, wait for its end)."""
        if session.jobs.running:
            return FiguresView().to(self.ui)
        return figures_view(session).to(self.ui)

    def build(self, first: FiguresView) -> FiguresView:
        """The three tabs (call inside the Decode tab's right column), showing ``first``."""
        with gr.Tabs(elem_id="recap-run-figures"):
            with gr.Tab("Acceptance", id="acceptance"):
                acceptance = gr.Markdown(first.acceptance, elem_id="recap-acceptance-text")
                with gr.Row():
                    depth = gr.Plot(first.depth, show_label=False, elem_id="recap-acceptance-depth")
                    histogram = gr.Plot(first.histogram, show_label=False, elem_id="recap-acceptance-hist")
            with gr.Tab("Why this size", id="size"):
                size = gr.Markdown(first.size, elem_id="recap-size-text")
                gains = gr.Plot(first.gains, show_label=False, elem_id="recap-size-gains")
            with gr.Tab("Where the time goes", id="time"):
                time = gr.Markdown(first.time, elem_id="recap-time-text")
                times = gr.Plot(first.times, show_label=False, elem_id="recap-time-split")
        self.ui = FiguresView(acceptance=acceptance, depth=depth, histogram=histogram, size=size, gains=gains,
                              time=time, times=times)
        return self.ui

    def wire(self, session: gr.State, main: MainView, run_event: Any) -> None:
        outs = self.ui.outputs()
        main.tree.change(guarded(self.refresh_figures), [session], outs, api_visibility="private",
                         trigger_mode="always_last")
        run_event.then(guarded(self.refresh_figures), [session], outs, api_visibility="private")
