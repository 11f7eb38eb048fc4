"""What verifying a tree needs from its shape: the ancestor matrix and the additive attention mask.

Pure functions of the parent list (node 0 the root, every parent before its children), no
model; ``recap.verification.verify`` feeds the mask to the target, the app's mask view shows the matrix.
``recap.drafting.tree`` re-exports both. ``windowed_tree_bias`` is the mask of a sliding-window
layer (Gemma 3's local layers), whose cache holds only the prefix's last entries.
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


def device_tree_bias(
    parents: Sequence[int], prefix_len: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``tree_attention_bias`` built on ``device``: only the (N, N) tree block crosses from the host,
    the prefix columns are zeros made there. On an accelerator the whole (1, 1, N, P + N) mask would
    be a host copy per step that grows with the context (17 MB at N = 257, P = 32k in bf16); the
    block is N * N entries whatever the context. Equal to ``tree_attention_bias`` entry for entry."""
    n = len(parents)
    block = tree_attention_bias(parents, 0, dtype)  # (1, 1, N, N) on the host
    bias = torch.zeros(1, 1, n, prefix_len + n, dtype=dtype, device=device)  # (1, 1, N, P + N)
    bias[..., prefix_len:] = block.to(device, non_blocking=True)
    return bias


def windowed_tree_bias(
    parents: Sequence[int], depths: Sequence[int], prefix_len: int, cached: int, window: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Additive attention mask of a sliding-window layer for a tree after a cached prefix.

    The layer's cache holds the prefix's last ``cached`` entries (positions ``prefix_len -
    cached`` to ``prefix_len - 1``; a sliding cache keeps ``window - 1`` of them, a full one all
    ``prefix_len``), then the N tree entries. Node i sits at position ``prefix_len +
    depths[i]``, the position its path would have when decoded one token at a time, and sees
    what that token would: the entries of ``tree_attention_bias`` (prefix, ancestors, itself)
    whose position is within the last ``window`` positions, its own included (transformers'
    sliding window: ``query - key < window``). Deep nodes thus lose their oldest ancestors too.
    Returns (1, 1, N, cached + N) in ``dtype`` (0 open, the dtype's minimum closed).
    """
    if not 0 <= cached <= prefix_len:
        raise ValueError(f"cached must be between 0 and prefix_len ({prefix_len}), got {cached}")
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    bias = tree_attention_bias(parents, cached, dtype)  # the kept prefix columns open, the tree's by ancestry
    n = len(parents)
    if n == 0:
        return bias
    query = prefix_len + torch.tensor(list(depths), dtype=torch.int64)  # (N,)
    keys = torch.cat([torch.arange(prefix_len - cached, prefix_len), query])  # (cached + N,) positions
    outside = (query[:, None] - keys[None, :]) >= window
    return bias.masked_fill_(outside.view(1, 1, n, cached + n), torch.finfo(dtype).min)


@functools.lru_cache(maxsize=8)
def _min_bytes(dtype: torch.dtype) -> bytes:
    """The bytes of ``dtype``'s minimum (a closed mask entry)."""
    return bytes(torch.full((1,), torch.finfo(dtype).min, dtype=dtype).view(torch.uint8).tolist())
