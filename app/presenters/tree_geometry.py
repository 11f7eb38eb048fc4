"""Where every node of a candidate tree goes, in pixels, so that no two labels overlap.

``tree_layout`` places nodes on a grid (x = depth, y = -row, see its docstring);
``tree_geometry`` turns that grid into pixel positions and estimated label boxes:

* rows are ``ROW_PX`` apart: enough for a label above its marker plus the marker of the
  row above, whatever the marker sizes, so labels of different rows never meet;
* columns (depths) are as far apart as the widest labels of the two columns need
  (half of each plus ``GAP_PX``), so labels of one row never meet either;
* the plot is at least ``min_width`` wide; narrower trees spread their columns out.

The figure then maps one data unit to one pixel (fixed width and height, fixed margins),
so the estimate holds on screen. Label widths are estimated from the text's characters
(``label_width``), the one assumption a test can check and the browser honours.
Deterministic: the same step always gives the same geometry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from recap.trace.format import TraceNode, TraceStep

BONUS = -1  # the bonus token's key in the graph and the layout (no trace node has index -1)
LABEL_FONT_PX = 11
BONUS_FONT_PX = 12
BONUS_MARKER_PX = 20
ROOT_MARKER_PX = 18
ROW_PX = 42  # vertical pixels per leaf row
GAP_PX = 10  # least horizontal space between two labels
PAD_PX = 12  # space around the outermost labels
MARGIN = {"l": 10, "r": 10, "t": 100, "b": 80}  # fixed: the plot area is what the geometry assumes
MIN_WIDTH_PX = 640


def token_label(text: str, limit: int = 14, *, exact: bool = False) -> str:
    """A token's text made visible: newlines and tabs drawn (\u21b5 \u21e5), an empty text \u2205.

    Word-piece vocabularies (SentencePiece, byte-level BPE, word-level) put a space in front
    of almost every word (" red"). On a label that space is the word boundary a reader
    expects, so one leading space is dropped and the labels read as text; a token that is
    only spaces shows each as \u2423, and any further leading or trailing space is \u2423 too.
    ``exact`` keeps the first leading space visible as well (hovers, the memory's rows:
    where " red" and "red" are different tokens to tell apart).
    """
    shown = text.replace("\n", "\u21b5").replace("\t", "\u21e5")
    if shown and not shown.strip(" "):
        shown = "\u2423" * len(shown)
    else:
        if shown.startswith(" ") and not exact:
            shown = shown[1:]
        if shown.startswith(" "):
            shown = "\u2423" + shown[1:]
        if shown.endswith(" "):
            shown = shown[:-1] + "\u2423"
    if shown == "":
        shown = "\u2205"
    if len(shown) > limit:
        shown = shown[: limit - 1] + "\u2026"
    return shown


def label_width(text: str, font_px: float = LABEL_FONT_PX) -> float:
    """Estimated rendered width (px) of a label: per-character em widths of a sans font,
    rounded up (wide letters, capitals and non-ASCII symbols count more)."""
    em = 0.0
    for ch in text:
        if ch in "mwMW@%":
            em += 0.95
        elif ch in "iljtfr.,;:'!|I":
            em += 0.36
        elif ch.isupper() or ch.isdigit():
            em += 0.72
        elif ord(ch) > 127:
            em += 1.0
        else:
            em += 0.6
    return em * font_px + 2.0


def node_size(node: TraceNode) -> float:
    """Marker size (px, diameter) by fused probability (root fixed)."""
    if node.parent < 0:
        return float(ROOT_MARKER_PX)
    p = min(max(node.fused, 0.0), 1.0)
    return 8.0 + 13.0 * math.sqrt(p)


# --------------------------------------------------------------------------- grid


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

    Children are ordered accepted first, then by path score; a node sits on the row of
    its first leaf in that order, so the accepted path is one straight line at the top
    and no two nodes share a position. With ``bonus``, key ``BONUS`` is where the bonus
    token goes (after the accepted path).
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


# --------------------------------------------------------------------------- pixels

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in plot pixels (y grows downwards)


@dataclass(frozen=True)
class TreeGeometry:
    """Pixel placement of one step's tree (plot area coordinates, y downwards)."""

    pos: dict[int, tuple[float, float]]  # node (or BONUS) -> marker centre
    labels: dict[int, str]  # node (or BONUS) -> label text
    label_boxes: dict[int, Box]
    marker_boxes: dict[int, Box]
    columns: list[float]  # x of each depth
    gaps: list[float]  # x of the free lane between column d and d + 1 (edge elbows)
    plot_width: float
    plot_height: float

    @property
    def width(self) -> int:
        return math.ceil(self.plot_width + MARGIN["l"] + MARGIN["r"])

    @property
    def height(self) -> int:
        return math.ceil(self.plot_height + MARGIN["t"] + MARGIN["b"])


def _label_box(x: float, y: float, marker: float, text: str, font: float) -> Box:
    """Plotly's "top center" text: centred, its baseline just above the marker."""
    w, h = label_width(text, font), 1.3 * font
    bottom = y - marker / 2 - 1.0
    return (x - w / 2, bottom - h, x + w / 2, bottom)


def tree_geometry(step: TraceStep, *, min_width: float = MIN_WIDTH_PX) -> TreeGeometry:
    grid = tree_layout(step)
    nodes = step.nodes
    labels = {n.index: token_label(n.text) for n in nodes}
    labels[BONUS] = token_label(step.bonus_text)
    fonts = {i: (BONUS_FONT_PX if i == BONUS else LABEL_FONT_PX) for i in grid}
    sizes = {n.index: node_size(n) for n in nodes} | {BONUS: float(BONUS_MARKER_PX)}
    n_cols = int(max(x for x, _ in grid.values())) + 1
    half = [0.0] * n_cols  # per column: the widest half label or marker
    for i, (x, _) in grid.items():
        half[int(x)] = max(half[int(x)], label_width(labels[i], fonts[i]) / 2, sizes[i] / 2)
    pitch = [half[d] + half[d + 1] + GAP_PX for d in range(n_cols - 1)]
    natural = half[0] + sum(pitch) + half[-1] + 2 * PAD_PX
    plot_width = max(natural, min_width - MARGIN["l"] - MARGIN["r"])
    spread = (plot_width - half[0] - half[-1] - 2 * PAD_PX) / sum(pitch) if pitch else 1.0
    columns = [PAD_PX + half[0]]
    for p in pitch:
        columns.append(columns[-1] + p * spread)
    gaps = [columns[d] + half[d] + GAP_PX * spread / 2 for d in range(n_cols - 1)]
    rows = 1 + int(max(-y for _, y in grid.values()))
    top = 2 * LABEL_FONT_PX + 6  # room for the first row's labels
    pos = {i: (columns[int(x)], top + ROW_PX * -y) for i, (x, y) in grid.items()}
    label_boxes = {i: _label_box(*pos[i], sizes[i], labels[i], fonts[i]) for i in grid}
    marker_boxes = {i: (pos[i][0] - sizes[i] / 2, pos[i][1] - sizes[i] / 2, pos[i][0] + sizes[i] / 2,
                        pos[i][1] + sizes[i] / 2) for i in grid}
    plot_height = top + ROW_PX * (rows - 1) + ROW_PX / 2 + 14  # + the depth axis ticks
    return TreeGeometry(pos, labels, label_boxes, marker_boxes, columns, gaps, plot_width, plot_height)


def boxes_overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
