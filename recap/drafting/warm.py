"""Compiling the kernels off the import path.

numba compiles a kernel at its first call (or loads it from its on-disk cache: about 0.4 s for
all of them; some tens of seconds to compile on a fresh machine). Nothing compiles at import:
``recap.load_target`` calls ``start``, which runs every kernel once on a tiny memory, through the
production code, in a background thread, while the model loads and the first request is
prepared. A decode that arrives first compiles, or waits for, only the kernels it calls (numba
compiles one kernel at a time, under its own lock).
"""

from __future__ import annotations

import threading

import torch

from recap.core.config import RecapConfig
from recap.drafting.protocol import DraftState, Verification
from recap.drafting.recap_drafter import RecapDrafter
from recap.drafting.token_recycling import TRDrafter
from recap.drafting.tree import depth_first_order
from recap.drafting.treecost import PassCost
from recap.memory.store import RequestMemory, TokenMemory

__all__ = ["start", "warm"]

_started: list[threading.Thread] = []
_lock = threading.Lock()


def warm() -> None:
    """Run every kernel once (the prefill's write first: a decode needs it first)."""
    memory = TokenMemory(8, 2)
    for scoped in (False, True):
        req = RequestMemory(memory, image_token_ids=[7], image_key="warm", scoped=scoped)
        seq = [1, 2, 3, 1, 2]
        recap = RecapDrafter(req, RecapConfig(budget=4, top_k=2), 4, PassCost.from_fit((1e-3, 1e-5, 0.0), 4))
        probs = torch.tensor([[0.6, 0.4]] * 4)
        recap.update(
            DraftState(seq, 0),
            Verification(None, [], [], torch.tensor([[2, 3], [3, 1], [1, 2], [2, 3]]), probs),
        )
        for drafter in (recap, TRDrafter(req, RecapConfig(budget=2, top_k=2), 2)):
            tree = drafter.draft(DraftState(seq, 1))
            size = len(tree)
            rows = (torch.zeros(size, 2, dtype=torch.int64), torch.full((size, 2), 0.5))
            tree.sources  # noqa: B018  (built from the snapshot)
            drafter.update(DraftState(seq, 1), Verification(tree, [0] * size, [0], *rows))
            drafter.update(DraftState(seq, 2), Verification(tree.reordered(), [0] * size, [0], *rows))
    req.m2.items()
    depth_first_order([-1, 0, 0], [1.0, 0.5, 0.7])


def start() -> threading.Thread:
    """``warm`` in a daemon thread, once per process; returns the thread (join it to wait)."""
    with _lock:
        if not _started:
            thread = threading.Thread(target=warm, name="recap-kernels", daemon=True)
            thread.start()
            _started.append(thread)
        return _started[0]
