"""Token Recycling's draft as one compiled call (``recap.memory.fastpath``): the static template
filled from M1's flat rows (``TRDrafter.draft``'s loop), the same tree as the reference's."""

from __future__ import annotations

import numpy as np

from recap.drafting.fastdraft import (
    DEP,
    FUSED,
    KA,
    KB,
    KC,
    ORD,
    ORI,
    PAR,
    POOL,
    SCORE,
    SUF,
    TOK,
    snap_copy_m1,
)
from recap.memory.fastpath import njit
from recap.memory.flatfuse import PC, PMASK


@njit
def tr_fill(b2, b1, root, t_parent, t_rank, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq,  # noqa: ANN001, ANN201
            out_i, out_f, pool_i, pool_f, snap_i, snap_f):
    """``TRDrafter.draft``: fill the static template (t_parent[i], t_rank[i]) for template node i + 1
    from the M1 rows, in template order. Returns (nodes, pool rows): one pool row per node whose
    row was read (the entry that proposed its children), whose rows go to snap_i / snap_f as in
    ``draft_tree``. Nodes stay in the order they were added; each node's key (its last three
    tokens: b2, b1 the two request tokens before the root, ``NONE`` where absent) goes to KA-KC."""
    t = t_parent.shape[0]
    where = np.full(t + 1, -1, dtype=np.int64)  # template index -> tree index (-1: dropped)
    where[0] = 0
    row_of = np.full(t + 1, -1, dtype=np.int64)  # tree index -> its pool row (-1: not read yet)
    out_i[TOK, 0], out_i[PAR, 0], out_i[DEP, 0], out_i[SUF, 0], out_i[ORI, 0], out_i[ORD, 0] = root, -1, 0, 0, 0, 0
    out_i[POOL, 0] = -1
    out_i[KA, 0], out_i[KB, 0], out_i[KC, 0] = b2, b1, root
    out_f[SCORE, 0], out_f[FUSED, 0] = 1.0, 1.0
    n = 1
    npool = 0
    k = m1_ids.shape[1]
    for x in range(t):
        parent = where[t_parent[x]]
        if parent < 0:
            continue
        ptok = out_i[TOK, parent]
        if not (0 <= ptok < m1_ids.shape[0]) or m1_uid[ptok] < 0:
            continue
        rank = t_rank[x]
        if rank >= k or m1_probs[ptok, rank] <= 0:
            continue
        tok = m1_ids[ptok, rank]
        dup = False
        for i in range(1, n):
            if out_i[PAR, i] == parent and out_i[TOK, i] == tok:
                dup = True
                break
        if dup:
            continue
        if row_of[parent] < 0:
            row_of[parent] = npool
            pool_i[npool, PMASK], pool_i[npool, PC] = 1, ptok
            pool_f[npool, 0], pool_f[npool, 1], pool_f[npool, 2] = 0.0, 0.0, 1.0
            npool += 1
        p = m1_q[ptok, rank]
        out_i[TOK, n], out_i[PAR, n], out_i[DEP, n], out_i[SUF, n] = tok, parent, out_i[DEP, parent] + 1, 0
        out_i[ORI, n], out_i[ORD, n], out_i[POOL, n] = 3, n, row_of[parent]
        out_i[KA, n], out_i[KB, n], out_i[KC, n] = out_i[KB, parent], out_i[KC, parent], tok
        out_f[SCORE, n], out_f[FUSED, n] = out_f[SCORE, parent] * p, p
        where[x + 1] = n
        n += 1
    for j in range(npool):
        snap_copy_m1(pool_i[j, PC], m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq, snap_i, snap_f,
                     3 * j + 2)
    return n, npool
