"""Compiling the kernels off the import path.

numba compiles a kernel at its first call (or loads it from its on-disk cache: about 0.4 s for
all of them; some tens of seconds to compile on a fresh machine). Nothing compiles at import:
``recap.load_target`` calls ``start``, which runs the kernels the engine calls once on a tiny
memory, through the drafters' own factories, in a background thread, while the model loads and
the first request is prepared. A decode that arrives first compiles, or waits for, only the
kernels it calls (numba compiles one kernel at a time, under its own lock).
"""

from __future__ import annotations

import threading

import torch

from recap.core.config import RecapConfig
from recap.drafting.pld import make_pld
from recap.drafting.protocol import DraftSetup, DraftState, Verification
from recap.drafting.recap_drafter import make_recap
from recap.drafting.token_recycling import make_tr
from recap.drafting.treecost import PassCost
from recap.memory.store import TokenMemory

__all__ = ["start", "warm"]

_started: list[threading.Thread] = []
_lock = threading.Lock()


def warm() -> None:
    """Each drafter that calls a kernel (``recap``, ``tr``, ``pld``) as the engine runs it: the
    prefill's update (over 128 prompt tokens: M2 / M3 grow, ``ContextMemory.reserve``), one draft,
    that draft's update."""
    setup = DraftSetup(
        RecapConfig(budget=4, top_k=2), 8, TokenMemory(8, 2), blocked=frozenset({7}), scope="warm",
        pass_cost=lambda cap: PassCost.from_fit((1e-3, 1e-5, 0.0), cap),
    )
    seq = [1, 2, 3, 1, 2, 3, 4] * 19
    prefill = torch.tensor([[2, 3]]).repeat(len(seq) - 1, 1), torch.full((len(seq) - 1, 2), 0.5)
    for make in (make_recap, make_tr, make_pld):
        drafter = make(setup)
        drafter.update(DraftState(seq, 0), Verification(None, [], [], *prefill))
        tree = drafter.draft(DraftState(seq, 1))
        rows = torch.zeros(len(tree), 2, dtype=torch.int64), torch.full((len(tree), 2), 0.5)
        drafter.update(DraftState(seq, 1), Verification(tree, [0] * len(tree), [0], *rows))


def start() -> threading.Thread:
    """``warm`` in a daemon thread, once per process; returns the thread (join it to wait)."""
    with _lock:
        if not _started:
            thread = threading.Thread(target=warm, name="recap-kernels", daemon=True)
            thread.start()
            _started.append(thread)
        return _started[0]
