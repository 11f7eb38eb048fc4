"""Pure figure builders: trace data in, Plotly figures out.

Nothing here touches a model, a session or Gradio: every function takes plain trace
objects (``recap.trace.format.TraceStep`` / ``DecodeTrace``) and returns a ``plotly`` figure,
so the same code draws the live view, uploaded traces, the comparison tab and the
walkthrough.

Tree layout: ``app.presenters.tree_geometry`` places the nodes (root at the left, depth to the
right, the accepted path one straight row at the top) in pixels sized to the labels, so
no two labels overlap; ``tree_traces`` draws a step whole or, for the play, one moment
of it (``TreeState``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from recap.trace.format import TraceNode, TraceStep

from . import sampling as sampling_view
from .tree_geometry import (
    BONUS,
    BONUS_FONT_PX,
    BONUS_MARKER_PX,
    LABEL_FONT_PX,
    MARGIN,
    MIN_WIDTH_PX,
    TreeGeometry,
    node_size,
    token_label,
    tree_geometry,
)

#: One colour per node origin (the legend of every tree in the app).
ORIGIN_COLORS: dict[str, str] = {
    "root": "#6b7280",  # grey
    "m1": "#2563eb",  # blue: 1-token persistent memory
    "m2": "#16a34a",  # green: 2-token contextual memory
    "m3": "#0d9488",  # teal: 3-token contextual memory
    "suffix": "#9333ea",  # purple: suffix match in this request
    "mixed": "#ea580c",  # orange: no single source gave most of the fused probability
    "lookup": "#a16207",  # brown: prompt lookup (pld)
}
OTHER_ORIGIN_COLOR = "#64748b"  # an origin the app does not know (a registered drafter's own)
ORIGIN_LABELS: dict[str, str] = {
    "root": "root (last accepted token)",
    "m1": "M1: 1-token persistent memory",
    "m2": "M2: 2-token contextual memory",
    "m3": "M3: 3-token contextual memory",
    "suffix": "suffix match",
    "mixed": "mixed (fused sources)",
    "lookup": "prompt lookup",
}
ACCEPTED_COLOR = "#facc15"  # bright yellow halo + edges of the accepted path
BONUS_COLOR = "#dc2626"  # red star: the bonus token (target's own choice)
HIGHLIGHT_COLOR = "#111827"
#: Plotly keeps zoom / pan across updates while this stays constant.
UIREVISION = "recap-tree"


def origin_colour(origin: str) -> str:
    """The colour of a node origin; a neutral grey for one the app does not know."""
    return ORIGIN_COLORS.get(origin, OTHER_ORIGIN_COLOR)


def origin_label(origin: str) -> str:
    """The legend label of a node origin; the origin itself for one the app does not know."""
    return ORIGIN_LABELS.get(origin, origin)


# --------------------------------------------------------------------------- hover


def _fmt(x: float) -> str:
    return f"{x:.3f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.1e}"


def node_hover(node: TraceNode, step: TraceStep, children_tokens: Sequence[int] = ()) -> str:
    """The hover text of one node: token, depth, scores and every source's details."""
    e = html.escape
    lines = [
        f"<b>{e(token_label(node.text, 40, exact=True))}</b>  (token {node.token}, node {node.index})",
        f"step {step.step} · depth {node.depth} · origin {node.origin}"
        + (" · suffix match" if node.suffix and node.origin != "suffix" else ""),
        f"path score {_fmt(node.score)} · fused prob {_fmt(node.fused)}",
        "accepted" if node.accepted else "rejected",
    ]
    drawn = sampling_view.hover_lines(node, step, children_tokens)  # None: a greedy step
    if drawn is not None:
        lines += drawn
    elif children_tokens and node.target_token not in children_tokens:
        lines.append(
            f"target wanted next: <b>{e(token_label(node.target_text, 40, exact=True))}</b> (no child had it)"
        )
    else:
        lines.append(f"target's next token here: {e(token_label(node.target_text, 40, exact=True))}")
    for src in node.sources:
        same = "?" if src.same_image is None else ("yes" if src.same_image else "no")
        lines.append(
            f"<b>{src.kind}</b>: weight {_fmt(src.weight)} · entropy {_fmt(src.entropy)} · "
            f"p(token) {_fmt(src.prob)}<br>&nbsp;&nbsp;from request {src.request}, step {src.step}, "
            f"depth {src.depth}, same image: {same}"
        )
    if not node.sources and node.index > 0:
        lines.append("no memory source (chain proposal)")
    return "<br>".join(lines)


# --------------------------------------------------------------------------- tree figure


def empty_figure(message: str = "Run a request to see its candidate trees.", height: int = 360) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(
        text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 14}
    )
    fig.update_layout(
        height=height,
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        uirevision=UIREVISION,
        template="plotly_white",
    )
    return fig


LABEL_COLOR = "#111827"  # accepted / drafted labels
REJECTED_LABEL_COLOR = "#4b5563"  # rejected labels: darker than the faded markers, readable
DRAFTED_LABEL_COLOR = "#374151"
SUFFIX_RING = ORIGIN_COLORS["suffix"]
REJECT_RING = "#dc2626"


@dataclass(frozen=True)
class TreeState:
    """What a tree figure shows: all of it (the finished step) or a moment of its play.

    shown: nodes drawn (None: all). verified: nodes whose verdict (accepted / rejected) is
    shown (None: all); the others look "drafted". bonus: draw the bonus token. suffix_rings:
    ring suffix-chain nodes (while the tree grows). rejected_rings: ring the verified
    rejected children of accepted nodes (where the target's token differed).
    """

    shown: frozenset[int] | None = None
    verified: frozenset[int] | None = None
    bonus: bool = True
    suffix_rings: bool = False
    rejected_rings: bool = False
    hover: bool = True  # full hover texts (False: token only; keeps the frames of a play small)


FINISHED = TreeState()


def tree_traces(step: TraceStep, geom: TreeGeometry, state: TreeState = FINISHED) -> list[go.Scatter]:
    """The tree's traces, always the same ones in the same order (edges, accepted path, one
    per origin present in the step, bonus edge, bonus token), so the frames of a play
    differ only in their points and styles."""
    pos = {i: (x, -y) for i, (x, y) in geom.pos.items()}  # data y grows upwards
    nodes = step.nodes
    shown = set(range(len(nodes))) if state.shown is None else set(state.shown)
    verified = shown if state.verified is None else set(state.verified) & shown
    on_path = set(step.accepted)
    children: dict[int, list[int]] = {}
    for n in nodes[1:]:
        children.setdefault(n.parent, []).append(n.token)

    rej_x: list[float | None] = []
    rej_y: list[float | None] = []
    acc_x: list[float | None] = []
    acc_y: list[float | None] = []
    for n in nodes[1:]:
        if n.index not in shown:
            continue
        (x0, y0), (x1, y1) = pos[n.parent], pos[n.index]
        bright = n.index in on_path and n.index in verified
        xs, ys = (acc_x, acc_y) if bright else (rej_x, rej_y)
        xm = geom.gaps[nodes[n.parent].depth]  # elbow in the free lane between the two columns
        xs += [x0, xm, xm, x1, None]
        ys += [y0, y0, y1, y1, None]
    traces = [
        go.Scatter(
            x=rej_x,
            y=rej_y,
            mode="lines",
            line={"color": "#cbd5e1", "width": 1},
            hoverinfo="skip",
            showlegend=False,
            name="edges",
        ),
        go.Scatter(
            x=acc_x,
            y=acc_y,
            mode="lines",
            line={"color": ACCEPTED_COLOR, "width": 7},
            hoverinfo="skip",
            name="accepted path",
            legendgroup="accepted",
        ),
    ]

    def ring(n: TraceNode) -> tuple[str, float]:
        if n.index in verified:
            if n.index in on_path:
                return ACCEPTED_COLOR, 3
            if state.rejected_rings and n.parent in on_path:
                return REJECT_RING, 3
            return "#ffffff", 1
        if state.suffix_rings and n.suffix:
            return SUFFIX_RING, 3
        return "#ffffff", 1

    def label_color(n: TraceNode) -> str:
        if n.index not in verified:
            return DRAFTED_LABEL_COLOR
        return LABEL_COLOR if n.index in on_path else REJECTED_LABEL_COLOR

    def opacity(n: TraceNode) -> float:
        if n.index not in verified:
            return 0.8
        return 1.0 if n.index in on_path else 0.35

    origins = {n.origin for n in nodes}
    for origin in [o for o in ORIGIN_COLORS if o in origins] + sorted(
        o for o in origins if o not in ORIGIN_COLORS
    ):
        group = [n for n in nodes if n.origin == origin and n.index in shown]
        rings = [ring(n) for n in group]
        traces.append(
            go.Scatter(
                x=[pos[n.index][0] for n in group],
                y=[pos[n.index][1] for n in group],
                mode="markers+text",
                text=[html.escape(geom.labels[n.index]) for n in group],
                textposition="top center",
                textfont={"size": LABEL_FONT_PX, "color": [label_color(n) for n in group]},
                marker={
                    "color": origin_colour(origin),
                    "size": [node_size(n) for n in group],
                    "opacity": [opacity(n) for n in group],
                    "line": {"color": [c for c, _ in rings], "width": [w for _, w in rings]},
                    "symbol": "diamond" if origin == "root" else "circle",
                },
                hovertext=[
                    node_hover(n, step, children.get(n.index, ()))
                    if state.hover
                    else html.escape(geom.labels[n.index])
                    for n in group
                ],
                hoverinfo="text",
                customdata=[n.index for n in group],
                name=origin_label(origin),
                legendgroup=origin,
            )
        )

    last = step.accepted[-1]
    (lx, ly), (bx, by) = pos[last], pos[BONUS]
    rejected_kids = [nodes[i] for i in range(1, len(nodes)) if nodes[i].parent == last]
    wanted = html.escape(token_label(step.bonus_text, 40, exact=True))
    how = sampling_view.bonus_line(step) or "the target's own next token after the accepted path"
    bonus_hover = f"<b>bonus token: {wanted}</b> (token {step.bonus_token})<br>{how}"
    if rejected_kids:
        proposed = ", ".join(html.escape(token_label(k.text, exact=True)) for k in rejected_kids[:8])
        bonus_hover += f"<br>the drafter proposed: {proposed}" + (" …" if len(rejected_kids) > 8 else "")
    b = state.bonus
    traces.append(go.Scatter(x=[lx, bx] if b else [], y=[ly, by] if b else [], mode="lines",
                             line={"color": BONUS_COLOR, "width": 3, "dash": "dot"}, hoverinfo="skip",
                             showlegend=False, name="bonus edge"))
    traces.append(
        go.Scatter(
            x=[bx] if b else [],
            y=[by] if b else [],
            mode="markers+text",
            text=[html.escape(geom.labels[BONUS])] if b else [],
            textposition="top center",
            textfont={"size": BONUS_FONT_PX, "color": BONUS_COLOR},
            marker={
                "symbol": "star",
                "size": BONUS_MARKER_PX,
                "color": BONUS_COLOR,
                "line": {"color": "#7f1d1d", "width": 1},
            },
            hovertext=[bonus_hover] if b else [],
            hoverinfo="text",
            name="bonus token (target's choice)",
        )
    )
    return traces


def drafted_count(step: TraceStep) -> int:
    """The tree size the drafter chose this step (root excluded; older traces: the nodes it holds)."""
    return step.tree_size if step.tree_size is not None else len(step.nodes) - 1


def drafted_text(step: TraceStep, cap: int = 0) -> str:
    """``24 drafted (cap 24)``: the step's tree size and the run's node budget (0: none to show)."""
    return f"{drafted_count(step)} drafted" + (f" (cap {cap})" if cap else "")


def step_heading(step: TraceStep, cap: int = 0) -> str:
    """The tree's title; ``cap`` is the run's node budget (``DecodeTrace.budget``)."""
    n_acc = len(step.accepted) - 1
    tokens = len(step.emitted)
    heading = f"Step {step.step}: {drafted_text(step, cap)}, {n_acc} accepted + bonus \u2192 {tokens} tokens"
    # a tree sized by cost says why it has its size
    return heading if step.sizing is None else f"{heading}; {step.sizing.summary()}"


def tree_layout_dict(geom: TreeGeometry, title: str, uirevision: str = UIREVISION) -> dict:
    """The tree figure's layout: one data unit = one pixel (fixed size and margins)."""
    return {
        "title": {"text": html.escape(title), "x": 0.01, "font": {"size": 14}},
        "width": geom.width,
        "height": geom.height,
        "autosize": False,
        "margin": {**MARGIN, "autoexpand": False},
        "xaxis": {
            "range": [0, geom.plot_width],
            "zeroline": False,
            "tickmode": "array",
            "tickvals": geom.columns,
            "ticktext": ["depth 0"] + [str(d) for d in range(1, len(geom.columns))],
            "showgrid": True,
            "gridcolor": "#f1f5f9",
            "fixedrange": False,
        },
        "yaxis": {"visible": False, "range": [-geom.plot_height, 0]},
        "legend": {
            "orientation": "h",
            "y": 0.01,
            "yanchor": "bottom",
            "yref": "container",
            "font": {"size": 10},
        },
        "hovermode": "closest",
        "uirevision": uirevision,
        "template": "plotly_white",
        "plot_bgcolor": "#ffffff",
    }


def tree_figure(
    step: TraceStep,
    *,
    title: str | None = None,
    highlight: int | None = None,
    max_height: int | None = None,
    uirevision: str = UIREVISION,
    min_width: float = MIN_WIDTH_PX,
    cap: int = 0,
) -> go.Figure:
    """One decode step's candidate tree (``cap``: the run's node budget, for the title).

    One marker per drafted token, labelled with its text, coloured by origin and sized
    by fused probability; the accepted path is drawn thick and bright, rejected nodes
    faded (their labels stay readable); the bonus token (the target's own next token
    after the accepted path) is a red star after the path's end. ``highlight`` circles one
    node (the inspector's pick). The figure is as large as its labels need
    (``app.presenters.tree_geometry``): no two labels overlap. ``max_height`` is accepted for older
    callers and no longer caps the height (a cap would squeeze rows onto each other).
    """
    del max_height
    geom = tree_geometry(step, min_width=min_width)
    fig = go.Figure(tree_traces(step, geom))
    if highlight is not None and 0 <= highlight < len(step.nodes):
        hx, hy = geom.pos[highlight]
        fig.add_trace(
            go.Scatter(
                x=[hx],
                y=[-hy],
                mode="markers",
                marker={"symbol": "circle-open", "size": 34, "color": HIGHLIGHT_COLOR, "line": {"width": 3}},
                hoverinfo="skip",
                name="selected node",
            )
        )
    fig.update_layout(tree_layout_dict(geom, title or step_heading(step, cap), uirevision))
    return fig


# --------------------------------------------------------------------------- run charts
