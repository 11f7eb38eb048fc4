"""``tr``: Token Recycling, persistent 1-token rows filling a static breadth-first template.

``tr_fill`` is the draft, one kernel call: template node i + 1 hangs below template node
``parent[i]`` and takes the ``rank[i]``-th prediction of its parent's M1 row, in template order;
a node whose parent was dropped, whose row is empty or zero there, or whose token its parent
already has is dropped (with its subtree). Nodes stay in the order they were added.
"""

from __future__ import annotations

import numpy as np

from recap.core.config import RecapConfig
from recap.drafting import search
from recap.drafting.protocol import DraftSetup, DraftState
from recap.drafting.recycling import RecyclingDrafter, persistent_memory, request_memory
from recap.drafting.search import DEP, FUSED, KA, KB, KC, O_M1, O_ROOT, ORD, ORI, PAR, POOL, SCORE, SUF, TOK
from recap.drafting.tree import DraftTree, static_template
from recap.memory.fusion import M1_BIT, PC, PMASK
from recap.memory.jit import njit
from recap.memory.rows import M1Rows, key_after, request_key, snap_m1
from recap.memory.store import RequestMemory


@njit
def tr_fill(root, template, m1, buf):  # noqa: ANN001, ANN201
    """``_fill`` with ``M1Rows`` and ``DraftBuffers`` in plain form (``recap.memory.rows.record_rows``)."""
    return _fill(root, template, M1Rows(*m1), search.named_buffers(buf))


@njit
def _fill(root, template, m1, buf):  # noqa: ANN001, ANN202
    """Fill ``template`` = (parent, rank) arrays below the root, whose key ``root`` ends at its token.
    Returns (nodes, pool rows): one pool row per node whose row was read (the entry that proposed its
    children), whose rows go to the snapshot as in ``draft_tree``; each node's key goes to KA-KC."""
    tok0 = root[2]
    t_parent, t_rank = template
    out_i, out_f, pool = buf.out_i, buf.out_f, buf.pool
    t = t_parent.shape[0]
    where = np.full(t + 1, -1, dtype=np.int64)  # template index -> tree index (-1: dropped)
    where[0] = 0
    row_of = np.full(t + 1, -1, dtype=np.int64)  # tree index -> its pool row (-1: not read yet)
    out_i[TOK, 0], out_i[PAR, 0], out_i[DEP, 0], out_i[SUF, 0] = tok0, -1, 0, 0
    out_i[ORI, 0], out_i[ORD, 0], out_i[POOL, 0] = O_ROOT, 0, -1
    out_i[KA, 0], out_i[KB, 0], out_i[KC, 0] = root
    out_f[SCORE, 0], out_f[FUSED, 0] = 1.0, 1.0
    n = 1
    npool = 0
    k = m1.ids.shape[1]
    for x in range(t):
        parent = where[t_parent[x]]
        if parent < 0:
            continue
        ptok = out_i[TOK, parent]
        if not (0 <= ptok < m1.ids.shape[0]) or m1.uid[ptok] < 0:
            continue
        rank = t_rank[x]
        if rank >= k or m1.probs[ptok, rank] <= 0:
            continue
        tok = m1.ids[ptok, rank]
        dup = False
        for i in range(1, n):
            if out_i[PAR, i] == parent and out_i[TOK, i] == tok:
                dup = True
                break
        if dup:
            continue
        if row_of[parent] < 0:
            row_of[parent] = npool
            pool.ints[npool, PMASK], pool.ints[npool, PC] = M1_BIT, ptok
            pool.weights[npool, 0], pool.weights[npool, 1], pool.weights[npool, 2] = 0.0, 0.0, 1.0
            npool += 1
        p = m1.q[ptok, rank]
        out_i[TOK, n], out_i[PAR, n], out_i[DEP, n], out_i[SUF, n] = tok, parent, out_i[DEP, parent] + 1, 0
        out_i[ORI, n], out_i[ORD, n], out_i[POOL, n] = O_M1, n, row_of[parent]
        above = (out_i[KA, parent], out_i[KB, parent], out_i[KC, parent])
        out_i[KA, n], out_i[KB, n], out_i[KC, n] = key_after(above, tok)
        out_f[SCORE, n], out_f[FUSED, n] = out_f[SCORE, parent] * p, p
        where[x + 1] = n
        n += 1
    for j in range(npool):
        snap_m1(pool.ints[j, PC], m1, buf.snap_i, buf.snap_f, 3 * j + 2)
    return n, npool


class TRDrafter(RecyclingDrafter):
    """Token Recycling: fill a static template breadth-first from the 1-token rows (M1 only)."""

    cost = None  # ``Resizable``: a static template is never cost-aware
    last_stop = ""

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int) -> None:
        self.config, self._k = config, memory.k
        self._templates: dict[int, tuple[np.ndarray, ...]] = {}  # by node count, each made once
        self._template, self._limit = self._arrays(budget), budget
        super().__init__(memory, budget, self._template[0].shape[0] + 1)
        self._buffers = search.plain_buffers(self.buffers)

    def _arrays(self, limit: int) -> tuple[np.ndarray, ...]:
        """The static template of ``limit`` nodes as (parent, rank) int64 arrays."""
        if limit not in self._templates:
            shape = static_template(limit, self.config.max_depth, self._k)
            self._templates[limit] = tuple(np.array([n[i] for n in shape], dtype=np.int64) for i in (0, 1))
        return self._templates[limit]

    def resize(self, limit: int, cost: object = None) -> None:
        """``Resizable``: the static template of ``limit`` nodes next (the best ``limit`` of the
        assumed rank rates, as Token Recycling builds one of that size)."""
        if not 0 <= limit <= self.budget:
            raise ValueError(f"a tree limit must be in [0, {self.budget}], got {limit}")
        if limit != self._limit:
            self._template, self._limit = self._arrays(limit), limit

    def draft(self, state: DraftState) -> DraftTree:
        seq, n = self.seq.sync(state.seq)
        size, npool = tr_fill(request_key(seq, n), self._template, tuple(self.memory.m1.table), self._buffers)
        return self.tree_of(size, npool)


def make_tr(setup: DraftSetup) -> TRDrafter:
    memory = persistent_memory(setup)
    budget = setup.node_budget()
    return TRDrafter(request_memory(memory, setup, use_context=False), setup.config, budget)  # M1 only
