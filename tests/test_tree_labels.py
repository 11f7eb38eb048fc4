"""Readable trees (app/tree_geometry.py): no two labels overlap, up to the largest budget."""

from __future__ import annotations

import itertools

from conftest_app import example
from hypothesis import given, settings
from hypothesis import strategies as st
from test_figures import make_step, node_points

from app.presenters.tree import REJECTED_LABEL_COLOR, tree_figure
from app.presenters.tree_geometry import BONUS, MARGIN, boxes_overlap, label_width, tree_geometry
from app.state.settings import Limits
from recap.trace.format import TraceStep

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target

WORDS = ["large", "yellow", "small", "W", "mmmmmmmmmmmmmm", ".", " the", "\n", "triangle", "<|im_end|>",
         "\u00e9t\u00e9", "iiiiiii", "WWWWWWWWWWWWWW", "", " "]


def assert_readable(step: TraceStep) -> None:
    geom = tree_geometry(step)
    keys = list(geom.label_boxes)
    for a, b in itertools.combinations(keys, 2):
        assert not boxes_overlap(geom.label_boxes[a], geom.label_boxes[b]), f"labels of {a} and {b} overlap"
    for a, b in itertools.permutations(keys, 2):
        assert not boxes_overlap(geom.label_boxes[a], geom.marker_boxes[b]), f"label of {a} covers node {b}"
    for x0, y0, x1, y1 in geom.label_boxes.values():
        assert 0 <= x0 and x1 <= geom.plot_width and 0 <= y0 and y1 <= geom.plot_height


@st.composite
def big_tree(draw):
    """A tree of up to the app's largest budget (plus the root), depth capped at its largest depth."""
    n = 1 + draw(st.integers(0, Limits().max_budget))
    parents, depth = [-1], [0]
    for i in range(1, n):
        p = draw(st.integers(0, i - 1))
        while depth[p] >= Limits().max_depth:
            p = parents[p]
        parents.append(p)
        depth.append(depth[p] + 1)
    texts = [draw(st.sampled_from(WORDS)) for _ in range(n)]
    path = [0]
    while True:
        kids = [i for i, p in enumerate(parents) if p == path[-1]]
        if not kids or not draw(st.booleans()):
            break
        path.append(draw(st.sampled_from(kids)))
    return parents, path, texts


@settings(max_examples=25, deadline=None)
@given(big_tree())
def test_no_two_labels_overlap_up_to_the_largest_budget(tree):
    parents, path, texts = tree
    assert_readable(make_step(parents, path, texts=texts))


def test_a_chain_of_long_labels_and_a_fan_of_siblings():
    chain = [-1] + list(range(Limits().max_depth))
    assert_readable(make_step(chain, [0, 1, 2], texts=["WWWWWWWWWWWWWW"] * len(chain)))
    fan = [-1] + [0] * Limits().max_budget
    assert_readable(make_step(fan, [0, 1], texts=[WORDS[i % len(WORDS)] for i in range(len(fan))]))


def test_labels_of_the_issue_example_do_not_collide():
    # Two rejected siblings "large" / "yellow" at depths 7-8 of a 24-node tree (the issue's report).
    parents = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 7, 8, 9, 6, 12, 0, 14, 15, 16, 17, 18, 19, 20, 21, 5, 23]
    texts = ["a"] + ["large", "yellow"] * 12
    assert_readable(make_step(parents, [0, 1, 2, 3], texts=texts))


def test_the_figure_draws_one_pixel_per_data_unit():
    step = make_step([-1, 0, 0, 1, 1, 3], [0, 1, 3], texts=["r", "large", "yellow", "large", "yellow", "x"])
    geom = tree_geometry(step)
    fig = tree_figure(step)
    lay = fig.layout
    assert lay.width - lay.margin.l - lay.margin.r == geom.width - MARGIN["l"] - MARGIN["r"]
    assert lay.xaxis.range[1] - lay.xaxis.range[0] <= lay.width - lay.margin.l - lay.margin.r
    assert abs(lay.xaxis.range[1] - lay.xaxis.range[0] - geom.plot_width) < 1e-9
    assert abs(lay.yaxis.range[1] - lay.yaxis.range[0] - geom.plot_height) < 1e-9
    assert lay.height - lay.margin.t - lay.margin.b >= geom.plot_height
    assert lay.autosize is False and lay.margin.autoexpand is False
    for i, (x, y, _) in node_points(fig).items():
        assert (x, -y) == geom.pos[i]


def test_layout_is_deterministic_and_wide_labels_widen_columns():
    step = make_step([-1, 0, 1], [0, 1], texts=["r", "a", "b"])
    assert tree_geometry(step) == tree_geometry(step)
    wide = make_step([-1, 0, 1], [0, 1], texts=["r", "WWWWWWWWWWWWWW", "WWWWWWWWWWWWWW"])
    assert tree_geometry(wide, min_width=0).plot_width > tree_geometry(step, min_width=0).plot_width
    assert label_width("WWW") > label_width("iii")
    assert BONUS in tree_geometry(step).label_boxes


def _luminance(hex_color: str) -> float:
    rgb = [int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_rejected_labels_are_legible():
    # WCAG AA contrast (4.5:1) against the white plot background.
    assert (1.05) / (_luminance(REJECTED_LABEL_COLOR) + 0.05) >= 4.5
    step = make_step([-1, 0, 0], [0, 1])
    fig = tree_figure(step)
    colors = {
        i: c for tr in fig.data if tr.customdata is not None for i, c in zip(tr.customdata, tr.textfont.color)
    }
    assert colors[2] == REJECTED_LABEL_COLOR


def test_real_trees_are_readable(target):
    import recap

    image, prompt = example()
    trace = recap.generate(target, image, prompt, method="recap", max_new_tokens=48, trace=True).trace
    for step in trace.steps:
        assert_readable(step)
