"""The Benchmark tab's acceptance figures: per row of a run, read from its results.json.

A run written since the figures exist holds them per row (``summary[row].overall.acceptance``:
``recap.bench.statistics``, the same ``recap.trace.stats`` numbers as a trace's), and they are drawn as
they are. A run written before holds only each pass's tokens emitted (``accepted_hist``): that
histogram is drawn under its own name, and the note says the per-depth rates were not recorded. No
number is made up for what the file does not hold.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from recap.trace.stats import AcceptanceStats

from .acceptance import SERIES_COLOURS, depth_figure, histogram_figure
from .charts import chart_layout
from .text import md_text
from .tree import empty_figure

NOT_RECORDED = (
    "This run's results.json predates the acceptance figures: its per-depth rates and accepted drafted "
    "tokens were not recorded (re-run `python -m recap bench` to record them). Shown instead: each row's "
    "passes by the tokens they emitted (drafted tokens accepted + the target's own), which it did record."
)


@dataclass(frozen=True)
class BenchAcceptance:
    depth: go.Figure
    histogram: go.Figure
    note: str


def _rows(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    summary = results.get("summary", {})
    return [(name, s.get("overall", {})) for name, s in summary.items()
            if name != "oracle" and isinstance(s, dict) and isinstance(s.get("overall"), dict)]


def bench_acceptance(results: dict[str, Any]) -> BenchAcceptance:
    """The run's acceptance charts per row, or what its file holds, with a note saying which."""
    rows = _rows(results)
    stats: dict[str, AcceptanceStats] = {}
    for name, overall in rows:
        acc = overall.get("acceptance")
        if isinstance(acc, dict) and acc.get("drafted"):  # rows that drafted (hf, ar draft nothing)
            try:
                stats[name] = AcceptanceStats.from_dict(acc)
            except (KeyError, TypeError, ValueError):
                continue  # a malformed row: left out, as the markdown table leaves it
    colours = {name: SERIES_COLOURS[i % len(SERIES_COLOURS)] for i, (name, _) in enumerate(rows)}
    if stats:
        return BenchAcceptance(
            depth=depth_figure(stats, colours=colours, title="Acceptance by depth, per row (all requests)"),
            histogram=histogram_figure(stats, colours=colours,
                                       title="Passes by accepted drafted tokens, per row"),
            note=" · ".join(f"**{md_text(name)}** {st.summary()}" for name, st in stats.items()),
        )
    return BenchAcceptance(
        depth=empty_figure("Per-depth acceptance was not recorded in this run.", height=260),
        histogram=emitted_figure(rows, colours), note=NOT_RECORDED,
    )


def emitted_figure(rows: list[tuple[str, dict[str, Any]]], colours: dict[str, str]) -> go.Figure:
    """Passes by tokens emitted, per row, from the recorded ``accepted_hist`` (share of each row's passes)."""
    fig = go.Figure()
    for name, overall in rows:
        hist = overall.get("accepted_hist")
        if not isinstance(hist, dict) or not hist:
            continue
        try:
            pairs = sorted((int(k), int(v)) for k, v in hist.items())
        except (TypeError, ValueError):
            continue
        total = sum(v for _, v in pairs) or 1
        shown = html.escape(name)  # a results.json's row name: Plotly renders some HTML
        fig.add_trace(go.Bar(x=[k for k, _ in pairs], y=[v / total for _, v in pairs], name=shown,
                             customdata=[v for _, v in pairs], marker_color=colours.get(name),
                             hovertemplate=f"{shown} · %{{x}} tokens: %{{customdata}} passes (%{{y:.0%}})"
                                           "<extra></extra>"))
    fig.update_layout(barmode="group", legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0},
                      margin={"b": 70})
    fig.update_yaxes(title="share of passes", tickformat=".0%", rangemode="tozero")
    fig.update_xaxes(dtick=1)
    return chart_layout(fig, "Passes by tokens emitted, per row (recorded)", 320,
                        xaxis_title="tokens emitted")
