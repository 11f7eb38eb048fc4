"""The Decode tab's main view: a typed record of its outputs, rendered from the session's current run.

Other tabs point the main view at a run they made (Compare, the aliasing inspector), and
the trace-file panel shows uploaded traces in it, so the record and its rendering live here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from ..presenters.charts import accepted_length_figure, step_time_figure
from ..presenters.text import error_html, highlighted, status_markdown
from ..presenters.tree import empty_figure, tree_figure
from ..state.runs import Run
from ..state.session import Session
from ..state.steps import find_step
from .records import KEEP, Record


@dataclass
class MainView(Record):
    """The main view: counters, error box, tree, step slider, output text, two run charts."""

    status: gr.Markdown | str = KEEP
    error: gr.HTML | str = KEEP
    tree: gr.Plot | go.Figure = KEEP
    step: gr.Slider = KEEP
    text: gr.HighlightedText = KEEP
    lengths: gr.Plot | go.Figure = KEEP
    times: gr.Plot | go.Figure = KEEP


@dataclass
class RunView(MainView):
    """What Run streams: the main view, then the finished run's trace file."""

    trace_file: gr.File | str | None = KEEP  # the file's path


def shown_step(session: Session) -> int | None:
    run = session.current
    if run is None or not run.trace.steps:
        return None
    if session.view_step is None:
        return run.trace.steps[-1].step
    return min(max(session.view_step, 1), len(run.trace.steps))


def main_view(session: Session, *, running: bool = False, note: str = "", error: str = "",
              charts: bool = True) -> MainView:
    """The main view of the session's current run (``charts=False``: the two charts stay as they are)."""
    run = session.current
    step_no = shown_step(session)
    highlight = None
    if session.highlight and session.highlight[0] == step_no:
        highlight = session.highlight[1]
    return render_run(
        run, step_no, highlight=highlight, running=running, note=note, error=error, charts=charts
    )


@dataclass(frozen=True)
class RunPicture:
    """What the main view draws of one run at one step, as plain values: a handler's update
    (``render_run``) and the Decode tab's first page (``app.tabs.decode.tab``) are both made from it."""

    status: str
    tree: go.Figure
    step: int  # the step on screen (1 when there is none)
    steps: int
    # the output's token spans with their labels (``app.presenters.text.highlighted``)
    text: list[tuple[str, str]]
    colors: dict[str, str]
    lengths: go.Figure | None  # None: not drawn (``charts=False``)
    times: go.Figure | None

    @property
    def slider(self) -> dict[str, Any]:
        """The step slider's range and value (it moves once there are two steps)."""
        return {
            "minimum": 1,
            "maximum": max(self.steps, 2),
            "value": self.step,
            "interactive": self.steps > 1,
        }


def picture(
    run: Run | None,
    step_no: int | None = None,
    *,
    highlight: int | None = None,
    running: bool = False,
    note: str = "",
    charts: bool = True,
) -> RunPicture:
    """One run at one step (None: its latest); no run: the empty view."""
    trace = run.trace if run else None
    if trace is not None and step_no is None and trace.steps:
        step_no = trace.steps[-1].step
    step = find_step(trace, step_no) if trace is not None else None
    tree = tree_figure(step, highlight=highlight, cap=trace.budget) if step is not None else empty_figure()
    value, colors = highlighted(trace, step_no)
    return RunPicture(
        status=status_markdown(trace, running=running, source=run.source if run else "run", note=note),
        tree=tree, step=step_no or 1, steps=len(trace.steps) if trace else 0, text=value, colors=colors,
        lengths=accepted_length_figure(trace, current=step_no) if charts else None,
        times=step_time_figure(trace) if charts else None,
    )


def render_run(
    run: Run | None,
    step_no: int | None = None,
    *,
    highlight: int | None = None,
    running: bool = False,
    note: str = "",
    error: str = "",
    charts: bool = True,
) -> MainView:
    """The main view of one run at one step (None: its latest)."""
    p = picture(run, step_no, highlight=highlight, running=running, note=note, charts=charts)
    return MainView(
        status=p.status,
        error=error_html(error),
        tree=p.tree,
        step=gr.Slider(**p.slider, step=1),
        text=gr.HighlightedText(value=p.text, color_map=p.colors),
        lengths=KEEP if p.lengths is None else p.lengths,
        times=KEEP if p.times is None else p.times,
    )


def error_view(message: str = "") -> MainView:
    """Leave every view as it is; only show ``message`` (if any) in the error box."""
    return MainView(error=error_html(message) if message else KEEP)


def run_view(view: MainView, trace_path: gr.File | str | None = KEEP) -> RunView:
    return RunView(**vars(view), trace_file=trace_path)
