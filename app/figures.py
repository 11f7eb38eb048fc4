"""Pure figure builders: trace data in, Plotly figures out.

Nothing here touches a model, a session or Gradio: every function takes plain trace
objects (``recap.trace.TraceStep`` / ``DecodeTrace``) and returns a ``plotly`` figure,
so the same code draws the live view, uploaded traces, the comparison tab and the
walkthrough.

Tree layout (``tree_layout``): a ``networkx.DiGraph`` of the step's nodes; the root is
at the left and depth grows to the right (x = depth). Children are ordered accepted
first, then by path score; a node sits on the row of its first leaf in that order, so
the accepted path is one straight line at the top and no two nodes share a position
(sibling subtrees occupy disjoint row ranges).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import networkx as nx
import plotly.graph_objects as go

from recap.trace import DecodeTrace, TraceNode, TraceStep

#: One colour per node origin (the legend of every tree in the app).
ORIGIN_COLORS: dict[str, str] = {
    "root": "#6b7280",  # grey
    "m1": "#2563eb",  # blue: 1-token persistent memory
    "m2": "#16a34a",  # green: 2-token contextual memory
    "m3": "#0d9488",  # teal: 3-token contextual memory
    "suffix": "#9333ea",  # purple: suffix match in this request
    "mixed": "#ea580c",  # orange: no single source gave most of the fused probability
    "lookup": "#a16207",  # brown: prompt lookup (pld)
    "template": "#db2777",  # pink
}
ORIGIN_LABELS: dict[str, str] = {
    "root": "root (last accepted token)",
    "m1": "M1: 1-token persistent memory",
    "m2": "M2: 2-token contextual memory",
    "m3": "M3: 3-token contextual memory",
    "suffix": "suffix match",
    "mixed": "mixed (fused sources)",
    "lookup": "prompt lookup",
    "template": "template",
}
ACCEPTED_COLOR = "#facc15"  # bright yellow halo + edges of the accepted path
BONUS_COLOR = "#dc2626"  # red star: the bonus token (target's own choice)
HIGHLIGHT_COLOR = "#111827"
METHOD_COLORS: dict[str, str] = {"recap": "#2563eb", "tr": "#16a34a", "pld": "#a16207", "ar": "#6b7280"}
#: Plotly keeps zoom / pan across updates while this stays constant.
UIREVISION = "recap-tree"
ROW_PX = 38  # vertical pixels per leaf row


def token_label(text: str, limit: int = 14) -> str:
    """A token's text made visible: newlines and leading / trailing spaces shown."""
    shown = text.replace("\n", "\u21b5").replace("\t", "\u21e5")
    if shown.startswith(" "):
        shown = "\u2423" + shown[1:]
    if shown.endswith(" ") and len(shown) > 1:
        shown = shown[:-1] + "\u2423"
    if shown == "":
        shown = "\u2205"
    if len(shown) > limit:
        shown = shown[: limit - 1] + "\u2026"
    return shown


# --------------------------------------------------------------------------- layout


BONUS = -1  # the bonus token's key in the graph and the layout (no trace node has index -1)


def tree_graph(step: TraceStep, *, bonus: bool = True) -> nx.DiGraph:
    """The step's tree as a DiGraph (node ids = trace node indices, edges parent -> child).

    Edges are inserted accepted child first, then by descending path score, so
    ``G.successors`` yields children in display order. With ``bonus``, the bonus token is
    node ``BONUS``: the first child of the accepted path's last node, so it keeps that
    row for itself and the rejected proposals there go below it.
    """
    g = nx.DiGraph()
    on_path = set(step.accepted)
    for node in step.nodes:
        g.add_node(node.index, depth=node.depth)
    children: dict[int, list[TraceNode]] = {}
    for node in step.nodes[1:]:
        children.setdefault(node.parent, []).append(node)
    last = step.accepted[-1]
    if bonus:
        g.add_node(BONUS, depth=step.nodes[last].depth + 1)
        g.add_edge(last, BONUS)
    for parent, kids in children.items():
        kids.sort(key=lambda n: (n.index not in on_path, -n.score, n.index))
        for kid in kids:
            g.add_edge(parent, kid.index)
    return g


def tree_layout(step: TraceStep, *, bonus: bool = True) -> dict[int, tuple[float, float]]:
    """Node index -> (x, y): x = depth (root at 0, left), y = -row (first row on top).

    With ``bonus``, key ``BONUS`` is where the bonus token goes (after the accepted path).
    """
    g = tree_graph(step, bonus=bonus)
    row: dict[int, int] = {}
    next_row = 0
    # Post-order: a leaf takes the next free row, an inner node its first child's row.
    for n in nx.dfs_postorder_nodes(g, source=0):
        succ = list(g.successors(n))
        if succ:
            row[n] = row[succ[0]]
        else:
            row[n] = next_row
            next_row += 1
    depth = nx.get_node_attributes(g, "depth")
    return {n: (float(depth[n]), -float(row[n])) for n in g.nodes}


# --------------------------------------------------------------------------- hover


def _fmt(x: float) -> str:
    return f"{x:.3f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.1e}"


def node_hover(node: TraceNode, step: TraceStep, children_tokens: Sequence[int] = ()) -> str:
    """The hover text of one node: token, depth, scores and every source's details."""
    e = html.escape
    lines = [
        f"<b>{e(token_label(node.text, 40))}</b>  (token {node.token}, node {node.index})",
        f"step {step.step} · depth {node.depth} · origin {node.origin}"
        + (" · suffix match" if node.suffix and node.origin != "suffix" else ""),
        f"path score {_fmt(node.score)} · fused prob {_fmt(node.fused)}",
        "accepted" if node.accepted else "rejected",
    ]
    wanted = node.target_token
    if children_tokens and wanted not in children_tokens:
        lines.append(f"target wanted next: <b>{e(token_label(node.target_text, 40))}</b> (no child had it)")
    else:
        lines.append(f"target's next token here: {e(token_label(node.target_text, 40))}")
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
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 14})
    fig.update_layout(
        height=height,
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        uirevision=UIREVISION,
        template="plotly_white",
    )
    return fig


def tree_figure(
    step: TraceStep,
    *,
    title: str | None = None,
    highlight: int | None = None,
    max_height: int = 900,
    uirevision: str = UIREVISION,
) -> go.Figure:
    """One decode step's candidate tree.

    One marker per drafted token, labelled with its text, coloured by origin and sized
    by fused probability; the accepted path is drawn thick and bright, rejected nodes
    faded; the bonus token (the target's own next token after the accepted path) is a
    red star after the path's end. ``highlight`` circles one node (the inspector's pick).
    """
    pos = tree_layout(step)
    nodes = step.nodes
    on_path = set(step.accepted)
    children: dict[int, list[int]] = {}
    for n in nodes[1:]:
        children.setdefault(n.parent, []).append(n.token)
    fig = go.Figure()

    # Edges: rejected ones faint, the accepted path thick.
    rej_x: list[float | None] = []
    rej_y: list[float | None] = []
    acc_x: list[float | None] = []
    acc_y: list[float | None] = []
    for n in nodes[1:]:
        (x0, y0), (x1, y1) = pos[n.parent], pos[n.index]
        xs, ys = (acc_x, acc_y) if (n.index in on_path and n.parent in on_path) else (rej_x, rej_y)
        xm = x0 + 0.35  # elbow: along the parent's row, down, then across to the child
        xs += [x0, xm, xm, x1, None]
        ys += [y0, y0, y1, y1, None]
    fig.add_trace(
        go.Scatter(x=rej_x, y=rej_y, mode="lines", line={"color": "#cbd5e1", "width": 1}, hoverinfo="skip",
                   showlegend=False, name="edges")
    )
    fig.add_trace(
        go.Scatter(x=acc_x, y=acc_y, mode="lines", line={"color": ACCEPTED_COLOR, "width": 7}, hoverinfo="skip",
                   name="accepted path", legendgroup="accepted")
    )

    # Nodes: one trace per origin (legend entries), opacity by accepted / rejected.
    by_origin: dict[str, list[TraceNode]] = {}
    for n in nodes:
        by_origin.setdefault(n.origin, []).append(n)
    for origin in [o for o in ORIGIN_COLORS if o in by_origin] + [o for o in by_origin if o not in ORIGIN_COLORS]:
        group = by_origin[origin]
        fig.add_trace(
            go.Scatter(
                x=[pos[n.index][0] for n in group],
                y=[pos[n.index][1] for n in group],
                mode="markers+text",
                text=[html.escape(token_label(n.text)) for n in group],
                textposition="top center",
                textfont={"size": 11, "color": ["#111827" if n.index in on_path else "#9ca3af" for n in group]},
                marker={
                    "color": ORIGIN_COLORS.get(origin, "#64748b"),
                    "size": [node_size(n) for n in group],
                    "opacity": [1.0 if n.index in on_path else 0.35 for n in group],
                    "line": {
                        "color": [ACCEPTED_COLOR if n.index in on_path else "#ffffff" for n in group],
                        "width": [3 if n.index in on_path else 1 for n in group],
                    },
                    "symbol": "diamond" if origin == "root" else "circle",
                },
                hovertext=[node_hover(n, step, children.get(n.index, ())) for n in group],
                hoverinfo="text",
                customdata=[n.index for n in group],
                name=ORIGIN_LABELS.get(origin, origin),
                legendgroup=origin,
            )
        )

    # The bonus token after the accepted path: what the target wanted there.
    last = step.accepted[-1]
    lx, ly = pos[last]
    bx, by = pos[BONUS]
    rejected_kids = [nodes[i] for i in range(1, len(nodes)) if nodes[i].parent == last]
    wanted = html.escape(token_label(step.bonus_text, 40))
    bonus_hover = f"<b>bonus token: {wanted}</b> (token {step.bonus_token})<br>the target's own next token after the accepted path"
    if rejected_kids:
        proposed = ", ".join(html.escape(token_label(k.text)) for k in rejected_kids[:8])
        bonus_hover += f"<br>the drafter proposed: {proposed}" + (" …" if len(rejected_kids) > 8 else "")
    fig.add_trace(
        go.Scatter(x=[lx, bx], y=[ly, by], mode="lines", line={"color": BONUS_COLOR, "width": 3, "dash": "dot"},
                   hoverinfo="skip", showlegend=False, name="bonus edge")
    )
    fig.add_trace(
        go.Scatter(
            x=[bx],
            y=[by],
            mode="markers+text",
            text=[html.escape(token_label(step.bonus_text))],
            textposition="top center",
            textfont={"size": 12, "color": BONUS_COLOR},
            marker={"symbol": "star", "size": 20, "color": BONUS_COLOR, "line": {"color": "#7f1d1d", "width": 1}},
            hovertext=[bonus_hover],
            hoverinfo="text",
            name="bonus token (target's choice)",
        )
    )
    if highlight is not None and 0 <= highlight < len(nodes):
        hx, hy = pos[highlight]
        fig.add_trace(
            go.Scatter(x=[hx], y=[hy], mode="markers",
                       marker={"symbol": "circle-open", "size": 34, "color": HIGHLIGHT_COLOR, "line": {"width": 3}},
                       hoverinfo="skip", name="selected node")
        )

    rows = 1 + max(-y for _, y in pos.values())
    depth = max(x for x, _ in pos.values())
    height = int(min(max_height, max(340, 140 + ROW_PX * rows)))
    n_acc = len(step.accepted) - 1
    head = title or f"Step {step.step}: {len(nodes) - 1} drafted, {n_acc} accepted + bonus \u2192 {len(step.emitted)} tokens"
    fig.update_layout(
        title={"text": html.escape(head), "x": 0.01, "font": {"size": 14}},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 80},
        xaxis={"title": {"text": "depth", "standoff": 2}, "range": [-0.6, depth + 0.8], "dtick": 1, "zeroline": False, "showgrid": True,
               "gridcolor": "#f1f5f9"},
        yaxis={"visible": False, "range": [-rows + 0.3, 1.4]},
        legend={"orientation": "h", "y": 0.01, "yanchor": "bottom", "yref": "container", "font": {"size": 10}},
        hovermode="closest",
        uirevision=uirevision,
        template="plotly_white",
        plot_bgcolor="#ffffff",
    )
    return fig


def node_size(node: TraceNode) -> float:
    """Marker size by fused probability (root fixed)."""
    if node.parent < 0:
        return 18.0
    p = min(max(node.fused, 0.0), 1.0)
    return 8.0 + 13.0 * math.sqrt(p)


# --------------------------------------------------------------------------- run charts


def _chart_layout(fig: go.Figure, title: str, height: int, xaxis_title: str = "step") -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 13}},
        height=height,
        margin={"l": 40, "r": 10, "t": 36, "b": 36},
        xaxis={"title": xaxis_title},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right", "font": {"size": 10}},
        template="plotly_white",
        uirevision="recap-chart",
    )
    return fig


def accepted_length_figure(trace: DecodeTrace | None, *, current: int | None = None, height: int = 260) -> go.Figure:
    """Tokens produced per step (accepted drafted tokens + the bonus)."""
    fig = go.Figure()
    if trace is None or not trace.steps:
        return _chart_layout(fig, "Accepted length per step", height)
    steps = [s.step for s in trace.steps]
    lengths = [s.accepted_length for s in trace.steps]
    colors = [METHOD_COLORS.get(trace.method, "#2563eb")] * len(steps)
    if current is not None:
        colors = [HIGHLIGHT_COLOR if s == current else c for s, c in zip(steps, colors)]
    fig.add_trace(go.Bar(x=steps, y=lengths, marker_color=colors, name="tokens per step",
                         hovertemplate="step %{x}: %{y} tokens<extra></extra>"))
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
        fig.add_trace(go.Bar(x=steps, y=[1000 * getattr(s, attr) for s in trace.steps], name=name,
                             marker_color=color, hovertemplate=f"step %{{x}} {name}: %{{y:.2f}} ms<extra></extra>"))
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
                line={"color": METHOD_COLORS.get(method), "shape": "hv"},
                marker={"size": 5},
            )
        )
    fig.update_yaxes(title="tokens per step", rangemode="tozero")
    return _chart_layout(fig, "Accepted length per step, by method", height)
