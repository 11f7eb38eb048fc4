"""What verifying a tree needs from its shape: the ancestor matrix and the additive attention mask.

Pure functions of the parent list (node 0 the root, every parent before its children), no
model; ``recap.verification.verify`` feeds the mask to the target, the app's mask view shows the matrix.
``recap.drafting.tree`` re-exports both.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch


def _ancestor_pairs(parents: Sequence[int]) -> tuple[list[int], list[int]]:
    """(row, column) index lists of the ancestor-or-self relation: one pass over the nodes."""
    ancestors: list[list[int]] = []
    rows: list[int] = []
    cols: list[int] = []
    for i, p in enumerate(parents):
        mine = [*ancestors[p], i] if p >= 0 else [i]
        ancestors.append(mine)
        rows.extend([i] * len(mine))
        cols.extend(mine)
    return rows, cols


def ancestor_matrix(parents: Sequence[int]) -> torch.Tensor:
    """(N, N) bool: [i, j] is True when j is i or one of its ancestors."""
    n = len(parents)
    rows, cols = _ancestor_pairs(parents)
    anc = torch.zeros(n, n, dtype=torch.bool)
    anc[torch.tensor(rows), torch.tensor(cols)] = True
    return anc


def tree_attention_bias(parents: Sequence[int], prefix_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask for verifying a tree after a cached prefix.

    Returns (1, 1, N, P + N) in ``dtype``: 0 where node i may attend (the whole prefix,
    its ancestors and itself), the dtype's minimum elsewhere. A float mask, because a
    boolean one is silently added to the scores under eager attention. Built as bytes:
    node i's row of the tree block is its parent's row with column i opened, one bytearray
    copy per node, and the whole mask is one buffer read by one ``torch.frombuffer`` (index
    tensors made from Python lists cost more than the small model's verification: 70 against
    11 us for 25 nodes on one CPU thread).
    """
    n = len(parents)
    if n == 0:
        return torch.zeros(1, 1, 0, prefix_len, dtype=dtype)
    closed = _min_bytes(dtype)
    size = len(closed)
    opened = bytes(size)
    blank = closed * n
    rows: list[bytearray] = []
    for i, p in enumerate(parents):
        row = bytearray(rows[p] if p >= 0 else blank)
        row[i * size : (i + 1) * size] = opened
        rows.append(row)
    buf = bytearray(bytes(prefix_len * size).join([b"", *rows]))  # each row: P zeros, then its tree block
    return torch.frombuffer(buf, dtype=dtype).view(1, 1, n, prefix_len + n)


@functools.lru_cache(maxsize=8)
def _min_bytes(dtype: torch.dtype) -> bytes:
    """The bytes of ``dtype``'s minimum (a closed mask entry)."""
    return bytes(torch.full((1,), torch.finfo(dtype).min, dtype=dtype).view(torch.uint8).tolist())
