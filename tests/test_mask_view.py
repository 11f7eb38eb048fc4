"""The tree attention mask figure (app/mask_view.py) equals the ancestor relation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_figures import make_step, make_trace

from app.presenters.mask import (
    EXPLANATION,
    MASKED,
    SEES,
    SELECTED_COL,
    SELECTED_ROW,
    mask_figure,
    mask_matrix,
    prefix_length,
)


def brute_force_sees(parents: list[int], i: int, j: int) -> bool:
    """Walk up from i: does the walk meet j?"""
    while i >= 0:
        if i == j:
            return True
        i = parents[i]
    return False


@st.composite
def tree(draw):
    n = draw(st.integers(1, 40))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


@settings(max_examples=40, deadline=None)
@given(tree())
def test_mask_is_the_ancestor_relation(parents):
    step = make_step(parents, [0])
    n = len(parents)
    want = [[brute_force_sees(parents, i, j) for j in range(n)] for i in range(n)]
    assert mask_matrix(step) == want
    z = mask_figure(step).data[0].z
    for i in range(n):
        assert z[i][0] == SEES  # the whole prefix, one collapsed column
        assert [v != MASKED for v in z[i][1:]] == want[i]


def test_selected_node_row_and_column_are_highlighted():
    parents = [-1, 0, 0, 1, 3]
    step = make_step(parents, [0, 1, 3])
    z = mask_figure(step, selected=3).data[0].z
    assert [v for v in z[3]] == [SELECTED_ROW, SELECTED_ROW, SELECTED_ROW, MASKED, SELECTED_ROW, MASKED]
    assert z[4][4] == SELECTED_COL  # node 4 (a child of 3) sees node 3
    assert z[2][4] == MASKED


def test_labels_prefix_and_sentence():
    step = make_step([-1, 0, 1], [0, 1], texts=["r", " the", "<b>"])
    fig = mask_figure(step, prefix=41)
    heat = fig.data[0]
    assert heat.x[0] == "prefix (41 tokens)"
    assert list(heat.y) == ["0 r", "1 the", "2 &lt;b&gt;"]
    assert "one forward pass" in EXPLANATION


def test_prefix_length_counts_prompt_and_earlier_output():
    steps = [make_step([-1, 0, 1], [0, 1, 2], step=1), make_step([-1, 0], [0], step=2),
             make_step([-1], [0], step=3)]
    trace = make_trace(steps)  # prompt_tokens 5
    assert [prefix_length(trace, s) for s in steps] == [4, 4 + 3, 4 + 3 + 1]
