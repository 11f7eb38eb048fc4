"""What aliasing cost a run, as text, a chart and table rows (``recap.trace.aliasing_stats``'s numbers).

Token texts come from the trace (a visitor's upload may hold anything): they go through
``md_text`` in Markdown and ``token_label`` in the table and the chart, never rendered as HTML.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from recap.trace.aliasing_stats import AliasingCost

from .charts import chart_layout
from .text import md_text
from .tree import ORIGIN_COLORS, token_label

#: Sources in the tree's legend colours (``app.presenters.tree.ORIGIN_COLORS``); M1, the tree's blue, in
#: shades by where its row was written.
SOURCE_COLOURS = {"M1 · this image": "#60a5fa", "M1 · another image": "#1d4ed8", "M1 · prompt": "#93c5fd",
                  "M1 · unknown": "#bfdbfe", "M2": ORIGIN_COLORS["m2"], "M3": ORIGIN_COLORS["m3"],
                  "suffix": ORIGIN_COLORS["suffix"], "mixed": ORIGIN_COLORS["mixed"]}


def source_figure(cost: AliasingCost, *, height: int = 280) -> go.Figure:
    """Refused drafted tokens by source (one bar each), M1 split by where its row was written."""
    names = list(cost.by_source)
    fig = go.Figure(go.Bar(
        x=names, y=[cost.by_source[n] for n in names],
        marker_color=[SOURCE_COLOURS.get(n, "#9ca3af") for n in names],
        hovertemplate="%{x}: %{y} refused<extra></extra>",
    ))
    fig.update_yaxes(title="drafted tokens refused", rangemode="tozero")
    return chart_layout(fig, "Refused drafted tokens by source", height, xaxis_title="source")


def cost_markdown(cost: AliasingCost, method: str) -> str:
    """The summary in words, with what to read in the chart and the table."""
    if not cost.drafted:
        return f"This {md_text(method)} run drafted nothing: nothing was refused, nothing aliased."
    share = cost.fixable_share
    fixed = (f"In **{cost.fixable}** of them ({share:.0%}) the context's M2 or M3 row predicted the target's "
             "token: the contextual memories would have fixed them (or did, through a sibling)."
             if share is not None else
             "No refusal's context had an M2 or M3 row (this run recorded none): what they would have fixed "
             "is unknown.")
    return (f"The target refused **{cost.refused}** of the **{cost.drafted}** drafted tokens (it accepted "
            f"{cost.accepted}; {cost.unchecked} more lay below a refusal and were never checked). {fixed} "
            "The chart counts the refusals by the node's source, M1 by where its row was written; the table "
            "lists the contexts (their last token) with the most refusals: choose one to open its first "
            "state.")


def context_rows(cost: AliasingCost) -> list[list[Any]]:
    """The contexts table's rows, worst first."""
    return [[token_label(c.text), c.refusals, c.m1, c.fixable, c.step, c.node] for c in cost.contexts]
