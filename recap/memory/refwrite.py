"""The memories' reference write path: ``RequestMemory.record`` in plain Python over ``Entry`` objects.

The definition of what a step writes (``recap.memory.store``): the block's statistics in a handful
of tensor ops, one shared ``Entry`` per prediction, filed under its keys in the caller's order
(latest write wins); M1's tensors catch up when read (``flush``). The compiled path
(``recap.memory.flatwrite``) writes the same rows. Like it, this module imports nothing from the
store (the store imports it): the memories and the ``Entry`` type come in as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import torch

from recap.memory.flatwrite import next_uids


def record(
    mem: Any,
    entry: type,
    keys: Sequence[tuple[int | None, int | None, int]],
    top_ids: torch.Tensor,
    top_probs: torch.Tensor,
    *,
    step: int,
    depths: Sequence[int],
    order: Sequence[int] | None = None,
) -> None:
    """``RequestMemory.record`` (see there) for a ``RequestMemory`` ``mem`` on the reference path."""
    k = top_probs.shape[-1]
    probs = top_probs.float()
    q = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)  # (N, k) renormalised over k
    h = torch.special.entr(q).sum(-1)  # (N,)
    conc = (1.0 - h / math.log(k)).clamp_(0.0, 1.0) if k > 1 else torch.ones_like(h)
    n = len(keys)
    # One Entry per prediction, built by C-level maps (Entry is a NamedTuple: tuple.__new__
    # skips its Python-level __new__); the loop below only files them.
    entries = list(map(
        tuple.__new__,
        repeat(entry, n),
        zip(
            map(tuple, top_ids.tolist()), map(tuple, probs.tolist()), h.tolist(), conc.tolist(),
            repeat(mem.request, n), repeat(step, n), depths, map(tuple, q.tolist()), next_uids(mem.m1, n),
        ),
    ))
    img, vocab = mem.image_token_ids, mem.m1.vocab_size
    m1_rows, m1_dirty = mem.m1._entries, mem.m1._dirty
    rows2, rows3 = mem.m2._rows, mem.m3._rows
    context = mem.use_context
    for i in range(n) if order is None else order:
        a, b, c = keys[i]
        if c in img:
            continue
        e = entries[i]
        if 0 <= c < vocab:  # (a row outside the table would never reach the tensors)
            m1_rows[c] = e
            m1_dirty.add(c)
        if context and b is not None and b not in img:
            rows2[(b, c)] = e
            if a is not None and a not in img:
                rows3[(a, b, c)] = e


def flush(m1: Any) -> None:
    """Write the rows a ``TokenMemory`` marked dirty into its tensors and kernel arrays (one batch)."""
    if not m1._dirty:
        return
    keys = sorted(m1._dirty)
    rows = [m1._entries[key] for key in keys]
    idx = torch.tensor(keys, dtype=torch.int64)
    m1._ids[idx] = torch.tensor([e.ids for e in rows], dtype=torch.int64)  # type: ignore[union-attr]
    m1._probs[idx] = torch.tensor([e.probs for e in rows], dtype=torch.float32)  # type: ignore[union-attr]
    m1._stats[idx] = torch.tensor([(e.entropy, e.concentration) for e in rows], dtype=torch.float32)  # type: ignore[union-attr]
    m1._prov[idx] = torch.tensor([(e.request, e.step, e.depth) for e in rows], dtype=torch.int32)  # type: ignore[union-attr]
    m1._q[keys] = [e.normalised() for e in rows]  # type: ignore[union-attr]
    m1._uid[keys] = [e.uid for e in rows]  # type: ignore[union-attr]
    m1._hasq[keys] = [e.q is not None for e in rows]  # type: ignore[union-attr]
    m1._dirty.clear()
