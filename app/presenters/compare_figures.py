"""Compare's figures per method, side by side: acceptance by depth, passes by accepted tokens, the time
each method took to emit its tokens, and each one's break-even against the autoregressive run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import plotly.graph_objects as go

from recap.trace.format import DecodeTrace
from recap.trace.step_costs import time_split

from .acceptance import depth_figure, histogram_figure, trace_stats
from .charts import method_colour
from .costs import methods_time_markdown, times_by_method


@dataclass(frozen=True)
class MethodFigures:
    depth: go.Figure
    histogram: go.Figure
    times: go.Figure
    costs: str  # the break-even per method, in words


def method_figures(traces: Mapping[str, DecodeTrace], reference: str,
                   labels: Mapping[str, str]) -> MethodFigures:
    """The figures of a comparison's runs (``reference``: the autoregressive one, whose pass time is the
    one-token baseline). Methods that draft nothing (``reference``) are left out of the acceptance charts."""
    drafting = {m: t for m, t in traces.items() if m != reference and t.steps}
    stats = {labels.get(m, m): trace_stats(t) for m, t in drafting.items()}
    colours = {labels.get(m, m): method_colour(m) for m in traces}
    ar = traces.get(reference)
    splits = {labels.get(m, m): time_split(t, ar) for m, t in traces.items() if t.steps}
    return MethodFigures(
        depth=depth_figure(stats, colours=colours, title="Acceptance by depth, by method"),
        histogram=histogram_figure(stats, colours=colours,
                                   title="Passes by accepted drafted tokens, by method"),
        times=times_by_method(splits, colours),
        costs=methods_time_markdown(traces, reference, labels),
    )
