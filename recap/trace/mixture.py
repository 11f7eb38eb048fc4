"""The fusion of memory rows as plain arithmetic: sum_j w_j q_j over (weight, ids, q) rows.

``recap.memory.fusion.lookup`` fuses rows inside the drafting kernel (arrays, numba); a trace keeps
each node's sources, and what is rebuilt from them (which source gave a node most of its fused
probability, ``recap.trace.record.node_origin``; the node inspector's fused bars,
``app.presenters.fusion``) is this one function, with the kernel's order of operations: rows in
order (most specific first), rows of weight 0 left out, each token's sum started at 0.0 and added to
left to right, so a fused probability rebuilt from the same rows is the kernel's to the bit (but where
the rows are one prediction, every key last written at one position: the kernel takes that row as it
is, the mixture sums its weighted copies, equal within a rounding).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: One fused row: its normalised fusion weight, its top-k ids and their probabilities renormalised over k.
Row = tuple[float, Sequence[int], Sequence[float]]


def mixture(rows: Iterable[Row]) -> dict[int, float]:
    """Each token's fused probability sum_j w_j q_j(token), tokens in first-seen order."""
    fused: dict[int, float] = {}
    for weight, ids, q in rows:
        if not weight:
            continue
        for token, p in zip(ids, q):
            fused[token] = fused.get(token, 0.0) + weight * p
    return fused
