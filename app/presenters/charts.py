"""A run's charts: accepted length and time per step, and the Compare tab's accepted lengths per method.

Pure Plotly figures of traces (no Gradio); each method in its colour from the library's
registry (``method_colour``).
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from recap.trace.format import DecodeTrace

from ..state.settings import app_methods
from .tree import HIGHLIGHT_COLOR, drafted_text

OTHER_METHOD_COLOR = "#2563eb"  # a method this build does not know (an uploaded trace's)


def method_colour(method: str) -> str:
    """A method's colour from the library's registry (read now: a drafter registered later has its own)."""
    return next((m.colour for m in app_methods() if m.name == method), OTHER_METHOD_COLOR)


def _chart_layout(fig: go.Figure, title: str, height: int, xaxis_title: str = "step") -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 13}},
        height=height,
        margin={"l": 40, "r": 10, "t": 36, "b": 36},
        xaxis={"title": xaxis_title},
        legend={
            "orientation": "h",
            "y": 1.02,
            "yanchor": "bottom",
            "x": 1,
            "xanchor": "right",
            "font": {"size": 10},
        },
        template="plotly_white",
        uirevision="recap-chart",
    )
    return fig


#: The layout every run chart shares (title, margins, legend on top), for the other presenters' charts.
chart_layout = _chart_layout


def accepted_length_figure(
    trace: DecodeTrace | None, *, current: int | None = None, height: int = 260
) -> go.Figure:
    """Tokens produced per step (accepted drafted tokens + the bonus)."""
    fig = go.Figure()
    if trace is None or not trace.steps:
        return _chart_layout(fig, "Accepted length per step", height)
    steps = [s.step for s in trace.steps]
    lengths = [s.accepted_length for s in trace.steps]
    colors = [method_colour(trace.method)] * len(steps)
    sizes = [drafted_text(s, trace.budget) for s in trace.steps]
    if current is not None:
        colors = [HIGHLIGHT_COLOR if s == current else c for s, c in zip(steps, colors)]
    fig.add_trace(go.Bar(x=steps, y=lengths, marker_color=colors, name="tokens per step", customdata=sizes,
                         hovertemplate="step %{x}: %{y} tokens, %{customdata}<extra></extra>"))
    fig.add_hline(y=trace.mat, line_dash="dot", line_color="#dc2626",
                  annotation_text=f"mean {trace.mat:.2f}", annotation_position="top left")
    fig.update_yaxes(title="tokens", rangemode="tozero")
    return _chart_layout(fig, "Accepted length per step (drafted + bonus)", height)


def step_time_figure(trace: DecodeTrace | None, *, height: int = 260) -> go.Figure:
    """Time per step split into draft / verify / update (stacked bars, milliseconds)."""
    fig = go.Figure()
    if trace is None or not trace.steps:
        return _chart_layout(fig, "Time per step", height)
    steps = [s.step for s in trace.steps]
    for name, attr, color in (("draft", "draft_s", "#2563eb"), ("verify", "verify_s", "#f59e0b"),
                              ("update", "update_s", "#16a34a")):
        fig.add_trace(
            go.Bar(
                x=steps,
                y=[1000 * getattr(s, attr) for s in trace.steps],
                name=name,
                marker_color=color,
                hovertemplate=f"step %{{x}} {name}: %{{y:.2f}} ms<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="ms", rangemode="tozero")
    return _chart_layout(fig, "Time per step: draft / verify / update", height)


def compare_lengths_figure(traces: Mapping[str, DecodeTrace], *, height: int = 300) -> go.Figure:
    """Accepted length per step for several methods on one chart."""
    fig = go.Figure()
    for method, trace in traces.items():
        fig.add_trace(
            go.Scatter(
                x=[s.step for s in trace.steps],
                y=[s.accepted_length for s in trace.steps],
                mode="lines+markers",
                name=f"{method} (mean {trace.mat:.2f})",
                line={"color": method_colour(method), "shape": "hv"},
                marker={"size": 5},
            )
        )
    fig.update_yaxes(title="tokens per step", rangemode="tozero")
    return _chart_layout(fig, "Accepted length per step, by method", height)
