"""One fusion arithmetic outside the kernel (recap.trace.mixture): the trace's origins and the node
inspector's fused bars both use it, and from a tree's own rows it gives the kernel's fused
probabilities (to the bit, but where the rows are one prediction: the kernel copies that row, and the
mixture sums its weighted copies, within a rounding)."""

from __future__ import annotations

import math

import recap
from app.presenters import fusion as fusion_view
from recap.trace import record
from recap.trace.mixture import mixture


def test_rows_in_order_zero_weights_left_out_tokens_first_seen():
    rows = [(0.75, [3, 1], [0.5, 0.5]), (0.0, [9], [1.0]), (0.25, [1, 2], [0.25, 0.75])]
    fused = mixture(rows)
    assert list(fused) == [3, 1, 2]  # 9: its row weighs nothing
    assert fused == {3: 0.0 + 0.75 * 0.5, 1: 0.0 + 0.75 * 0.5 + 0.25 * 0.25, 2: 0.0 + 0.25 * 0.75}
    assert mixture([]) == {}


def test_the_origins_and_the_inspector_call_it():
    assert record.mixture is mixture and fusion_view.mixture is mixture


def test_a_trees_rows_mix_to_the_kernels_fused_probabilities(shapes_target):
    """Every fused node of RECAP's trees (two rows or more) gets, from its rows, the fused
    probability the drafting kernel gave it."""
    memory = recap.TokenMemory.for_target(shapes_target)
    # size_loop off: trees drafted whatever this machine's timings (the check needs fused nodes)
    cfg = recap.RecapConfig(scoped_memory=False, calibrate=False, suffix=False, size_loop=False)
    checked, exact = 0, 0
    for _ in range(2):  # the second request drafts from the first one's rows
        for rec in recap.iter_steps(shapes_target, None, "describe the picture .", method="recap",
                                    max_new_tokens=16, memory=memory, config=cfg):
            tree = rec.tree
            for i in range(1, len(tree)):
                if len(tree.sources[i]) < 2:
                    continue
                rows = [(w, e.ids, e.normalised()) for _, w, e in tree.sources[i]]
                fused = mixture(rows)[tree.tokens[i]]
                assert math.isclose(fused, tree.fused[i], rel_tol=1e-12, abs_tol=1e-15)
                if fused != tree.fused[i]:  # only rows written at one position: one prediction
                    assert len({(e.request, e.step, e.depth) for _, _, e in tree.sources[i]}) == 1
                checked += 1
                exact += fused == tree.fused[i]
    assert checked and exact
