"""The tree attention mask of a step: why one forward pass verifies the whole tree.

The engine verifies a tree by feeding all its nodes at once, each at position prefix +
depth, with an attention mask in which node i sees the whole prefix (the prompt and the
output so far), its ancestors and itself, and nothing else (``recap.verification.treemask.ancestor_matrix``,
the very function the engine's mask is built from). So every branch is scored exactly as
if it were the only continuation. The heatmap draws that mask: the prefix collapsed to
one column, then the tree node by node, labelled with tokens; a selected node's row
(what it sees) and column (who sees it) are highlighted.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from recap.trace.format import DecodeTrace, TraceStep
from recap.verification.treemask import ancestor_matrix

from .tree import ACCEPTED_COLOR, token_label

EXPLANATION = (
    "Each row is one drafted token and sees the whole prefix plus only its own ancestors, so every branch "
    "is scored exactly as if it alone followed the prefix: one forward pass checks the whole tree."
)
MASKED, SEES, SELECTED_ROW, SELECTED_COL = 0, 1, 2, 3
COLORSCALE = [  # discrete: masked, sees, the selected node's view, who sees the selected node
    [0.0, "#f8fafc"], [0.25, "#f8fafc"],
    [0.25, "#93c5fd"], [0.5, "#93c5fd"],
    [0.5, "#1d4ed8"], [0.75, "#1d4ed8"],
    [0.75, ACCEPTED_COLOR], [1.0, ACCEPTED_COLOR],
]


def prefix_length(trace: DecodeTrace, step: TraceStep) -> int:
    """Tokens in the KV cache when ``step`` was verified: the prompt but its last token,
    plus every token emitted before the step (the root is the tree's first node)."""
    before = 0
    for s in trace.steps:
        if s.step == step.step:
            break
        before += len(s.emitted)
    return trace.prompt_tokens - 1 + before


def mask_matrix(step: TraceStep) -> list[list[bool]]:
    """[i][j]: whether tree node i attends to tree node j (j is i or an ancestor of i)."""
    return ancestor_matrix([n.parent for n in step.nodes]).tolist()


def mask_figure(step: TraceStep, *, prefix: int | None = None, selected: int | None = None,
                height: int | None = None) -> go.Figure:
    """The heatmap: rows = queries (tree nodes), columns = the prefix block then the nodes."""
    nodes = step.nodes
    n = len(nodes)
    allowed = mask_matrix(step)
    labels = [f"{i} {html.escape(token_label(node.text, 10))}" for i, node in enumerate(nodes)]
    prefix_label = "prefix" + (f" ({prefix} tokens)" if prefix is not None else "")
    z = []
    for i in range(n):
        row = [SEES]  # every node sees the whole prefix
        for j in range(n):
            v = SEES if allowed[i][j] else MASKED
            if selected is not None and v == SEES:
                if i == selected:
                    v = SELECTED_ROW
                elif j == selected:
                    v = SELECTED_COL
            row.append(v)
        if selected is not None and i == selected:
            row[0] = SELECTED_ROW
        z.append(row)
    hover = [[("sees " if z[i][j] else "does not see ") + (prefix_label if j == 0 else labels[j - 1])
              for j in range(n + 1)] for i in range(n)]
    hover = [[f"{labels[i]} {h}" for h in row] for i, row in enumerate(hover)]
    fig = go.Figure(go.Heatmap(
        z=z, x=[prefix_label, *labels], y=labels, zmin=0, zmax=3, colorscale=COLORSCALE, showscale=False,
        xgap=1, ygap=1, hovertext=hover, hoverinfo="text",
    ))
    cell = 18 if n <= 40 else 10
    side = max(260, 120 + cell * n)
    sel = f" · node {selected} highlighted" if selected is not None else ""
    fig.update_layout(
        title={
            "text": f"Tree attention mask, step {step.step}{sel}<br><sup>rows: drafted tokens (queries) · "
            "columns: what they attend to</sup>",
            "x": 0.01,
            "y": 0.98,
            "yanchor": "top",
            "pad": {"t": 4},
            "font": {"size": 13},
        },
        height=height or min(side + 110, 960),
        template="plotly_white",
        margin={"l": 10, "r": 10, "t": 130, "b": 10},
        xaxis={"side": "top", "tickangle": -60, "tickfont": {"size": 9}},
        yaxis={"autorange": "reversed", "tickfont": {"size": 9}},
    )
    return fig
