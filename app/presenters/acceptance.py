"""Acceptance figures as Plotly charts: per-depth conditional acceptance and passes by accepted tokens.

Pure figures of ``recap.trace.stats.AcceptanceStats`` (computed from traces, or read back from a
benchmark's results.json), so the Decode view, Compare (one series per method), the Benchmark tab
(one per row) and a conversation (one per turn) draw the very numbers the library computes. A depth
no pass reached has no rate: it is marked "not reached" at 0, never drawn as a rate of 0.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import plotly.graph_objects as go

from recap.trace.format import DecodeTrace
from recap.trace.stats import AcceptanceStats, run_stats

from .charts import chart_layout

#: Colours of series that are not methods (turns, benchmark rows), in order.
SERIES_COLOURS = ("#2563eb", "#f59e0b", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#db2777", "#65a30d")
UNREACHED_COLOUR = "#9ca3af"


def _legend_below(fig: go.Figure) -> go.Figure:
    """Several series: the legend under the plot (on top it covers the title)."""
    fig.update_layout(legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0, "xanchor": "left"},
                      margin={"b": 70})
    return fig


def trace_stats(trace: DecodeTrace) -> AcceptanceStats:
    """A run's figures, every depth up to its configured ``max_depth`` (a depth never reached shows)."""
    depth = trace.config.get("max_depth")
    return run_stats(trace, depths=depth if isinstance(depth, int) and not isinstance(depth, bool) else None)


def _colour(name: str, i: int, colours: Mapping[str, str] | None) -> str:
    return (colours or {}).get(name, SERIES_COLOURS[i % len(SERIES_COLOURS)])


def depth_figure(series: Mapping[str, AcceptanceStats], *, colours: Mapping[str, str] | None = None,
                 title: str = "Acceptance by depth", height: int = 320) -> go.Figure:
    """P(depth d accepted | depth d - 1 accepted) per depth, one bar group per series; the hover gives
    the counts (accepted of observed). Depths never observed are grey crosses at 0, "not reached"."""
    fig = go.Figure()
    unreached_shown = False
    for i, (raw, st) in enumerate(series.items()):
        name = html.escape(raw)  # series names may come from a file (a benchmark's rows): Plotly renders HTML
        seen = [d for d in st.per_depth if d.rate is not None]
        fig.add_trace(go.Bar(
            x=[d.depth for d in seen], y=[d.rate for d in seen], name=name,
            marker_color=_colour(raw, i, colours),
            customdata=[[d.accepted, d.observed] for d in seen],
            hovertemplate=f"{name} · depth %{{x}}: %{{y:.2f}} (%{{customdata[0]}} of %{{customdata[1]}} "
                          "passes that reached it)<extra></extra>",
        ))
        unseen = [d.depth for d in st.per_depth if d.rate is None]
        if unseen:
            fig.add_trace(go.Scatter(
                x=unseen, y=[0] * len(unseen), mode="markers", name="not reached", legendgroup="unreached",
                showlegend=not unreached_shown, marker={"symbol": "x", "color": UNREACHED_COLOUR, "size": 9},
                hovertemplate=f"{name} · depth %{{x}}: not reached (no pass drafted there after an accepted "
                              "token)<extra></extra>",
            ))
            unreached_shown = True
    fig.update_layout(barmode="group", showlegend=len(series) > 1 or unreached_shown)
    fig.update_yaxes(title="P(accepted | parent accepted)", range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return _legend_below(chart_layout(fig, title, height, xaxis_title="depth"))


def histogram_figure(series: Mapping[str, AcceptanceStats], *, colours: Mapping[str, str] | None = None,
                     title: str = "Passes by accepted drafted tokens", height: int = 320) -> go.Figure:
    """Each series' passes by how many drafted tokens they accepted (0, 1, 2, ...), as a share of its
    passes (the hover gives the count)."""
    fig = go.Figure()
    for i, (raw, st) in enumerate(series.items()):
        name = html.escape(raw)
        xs = sorted(st.accepted_hist)
        counts = [st.accepted_hist[x] for x in xs]
        fig.add_trace(go.Bar(
            x=xs, y=[c / st.steps if st.steps else 0.0 for c in counts], name=name, customdata=counts,
            marker_color=_colour(raw, i, colours),
            hovertemplate=f"{name} · %{{x}} accepted: %{{customdata}} passes (%{{y:.0%}})<extra></extra>",
        ))
    fig.update_layout(barmode="group", showlegend=len(series) > 1)
    fig.update_yaxes(title="share of passes", tickformat=".0%", rangemode="tozero")
    fig.update_xaxes(dtick=1)
    return _legend_below(chart_layout(fig, title, height, xaxis_title="drafted tokens accepted in the pass"))


def acceptance_markdown(st: AcceptanceStats, what: str = "This run") -> str:
    """One paragraph: the run's figures in words, and what to read in the two charts."""
    rate = st.acceptance_rate
    drafted = (f"accepted **{st.accepted}** of **{st.drafted}** drafted tokens ({rate:.0%})"
               if rate is not None else "drafted nothing")
    return (f"{what} emitted **{st.tokens_per_pass:.2f}** tokens per pass over {st.steps} passes and "
            f"{drafted}. "
            "Left: of the passes whose path reached depth d - 1 with a token drafted at d, the share that "
            "accepted it (a falling bar is where the drafter's guesses run out). Right: how many drafted "
            "tokens each pass accepted; every pass adds the target's own token.")
