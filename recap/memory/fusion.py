"""Entropy-confidence fusion of a context's memory rows (DESIGN.md section 3), as a kernel.

For the rows found for a context (any of M3, M2, M1), each with key length n_j and top-k
distribution q_j (renormalised over its k tokens):

    specificity  s(n)  increasing in key length (default 1, 2, 4 for n = 1, 2, 3)
    concentration c_j = 1 - H(q_j) / log k           (low entropy = confident)
    weight        w_j = s(n_j) * (c_j + eps), normalised over the rows (their plain sum)
    fused         p(x) = sum_j w_j * q_j(x)

Two ablation modes: ``"fixed"`` (weights by specificity rank, 0.70 / 0.20 / 0.10 as in the
authors' development code) and ``"backoff"`` (only the most specific row). One row alone is its
own distribution; rows that are one prediction (the same uid: every key last written at the same
position) are that distribution whatever the weights. The candidates are the union of the
positive-weight rows' top-k, most probable first (ties keep the rows' order).

``lookup`` writes one fusion into a row of a ``Pool`` (the candidates, their probabilities,
which memories took part and their weights), which the drafting kernel searches over.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from recap.memory.jit import njit
from recap.memory.rows import IDS, NONE, UID, Q, find, row_layout, snap_m1

#: A fusion's sources, most specific first (``src`` 0, 1, 2), and their bits in ``Pool.ints[:, PMASK]``
KINDS = ("m3", "m2", "m1")
M3_BIT, M2_BIT, M1_BIT = (4 >> src for src in range(len(KINDS)))
# Pool.ints columns: which memories took part (the bits), the context (a, b, c),
# the uids of the M3 / M2 / M1 rows (-1: absent), candidates, contextual, the M3 / M2 table slots;
# Pool.weights: the weights of (M3, M2, M1)
PMASK, PA, PB, PC, PU3, PU2, PU1, PN, PCTX, PS3, PS2 = range(11)
NPI = 11


class Fusion(NamedTuple):
    """How rows are fused (``RecapConfig``'s fields)."""

    use_m2: bool
    use_m3: bool
    mode: int  # index in recap.core.config.FUSION_MODES
    eps: float
    s1: float  # specificity of a 1-, 2-, 3-token key
    s2: float
    s3: float


class Pool(NamedTuple):
    """One row per fusion made while drafting (P rows)."""

    ints: np.ndarray  # (P, NPI) int64
    weights: np.ndarray  # (P, 3) float64
    tokens: np.ndarray  # (P, 3 k) int64 candidates, most probable first
    probs: np.ndarray  # (P, 3 k) float64 their fused probabilities


def pool(rows: int, k: int) -> Pool:
    return Pool(
        ints=np.zeros((rows, NPI), dtype=np.int64), weights=np.zeros((rows, 3), dtype=np.float64),
        tokens=np.empty((rows, 3 * k), dtype=np.int64), probs=np.empty((rows, 3 * k), dtype=np.float64),
    )


@njit
def lookup(key, mem, fusion, out, j, scratch):  # noqa: ANN001, ANN201, C901
    """The fusion of context key = (a, b, c) (``NONE`` where shorter) into pool row j; False: no
    memory knows it.

    ``scratch`` = (work: >= 9 float64, iwork: >= 6 int64), allocated once by the caller.
    """
    a, b, c = key
    work, iwork = scratch
    m1, t2, t3 = mem.m1, mem.t2, mem.t3
    k = m1.ids.shape[1]
    has1 = 0 <= c < m1.ids.shape[0] and m1.uid[c] >= 0
    s2 = find(t2.keys, NONE, b, c) if fusion.use_m2 and b != NONE else -1
    s3 = find(t3.keys, a, b, c) if fusion.use_m3 and a != NONE else -1
    if s3 < 0 and s2 < 0 and not has1:
        return False
    pi = out.ints
    pi[j, PA], pi[j, PB], pi[j, PC] = a, b, c
    pi[j, PS3], pi[j, PS2] = s3, s2
    pi[j, PU3] = t3.irow[s3, UID] if s3 >= 0 else -1
    pi[j, PU2] = t2.irow[s2, UID] if s2 >= 0 else -1
    pi[j, PU1] = m1.uid[c] if has1 else -1
    out.weights[j, 0] = out.weights[j, 1] = out.weights[j, 2] = 0.0
    mask = (M3_BIT if s3 >= 0 else 0) | (M2_BIT if s2 >= 0 else 0) | (M1_BIT if has1 else 0)
    pi[j, PMASK] = mask
    pi[j, PCTX] = 1 if mask > 1 else 0
    count = 0  # the rows most specific first (slot 0 = M3, 1 = M2, 2 = M1)
    for src in range(3):
        if mask & (M3_BIT >> src):
            iwork[count] = src
            count += 1
    raw, conc, w = work[0:3], work[3:6], work[6:9]
    uid = iwork[3:6]
    if count == 1:  # one row: its own distribution, weight 1
        out.weights[j, iwork[0]] = 1.0
        _copy_row(iwork[0], (s3, s2, c), mem, out, j)
        return True
    for r in range(count):  # the weights: raw, their plain sum, normalised
        src = iwork[r]
        if src == 0:
            conc[r], uid[r] = t3.frow[s3, row_layout(k).stats + 1], t3.irow[s3, UID]
        elif src == 1:
            conc[r], uid[r] = t2.frow[s2, row_layout(k).stats + 1], t2.irow[s2, UID]
        else:
            conc[r], uid[r] = np.float64(m1.stats[c, 1]), m1.uid[c]
        if fusion.mode == 0:
            raw[r] = (fusion.s3 if src == 0 else (fusion.s2 if src == 1 else fusion.s1)) * (
                conc[r] + fusion.eps
            )
        elif fusion.mode == 1:
            raw[r] = (0.70, 0.20, 0.10)[min(r, 2)]
        else:
            raw[r] = 1.0 if r == 0 else 0.0
    total = 0.0
    for r in range(count):
        total += raw[r]
    for r in range(count):
        w[r] = 1.0 / count if total <= 0 else raw[r] / total
        out.weights[j, iwork[r]] = w[r]
    if uid[1] == uid[0] and (count == 2 or uid[2] == uid[0]):
        # every key last written at one position: that one distribution, whatever the weights
        _copy_row(iwork[0], (s3, s2, c), mem, out, j)
        return True
    n = 0  # the mixture: candidates in first-seen order, then a stable sort by probability
    tokens, probs = out.tokens, out.probs
    for r in range(count):
        if w[r] == 0.0:
            continue
        src = iwork[r]
        for t in range(k):
            if src == 0:
                tok, p = t3.irow[s3, IDS + t], t3.frow[s3, Q + t]
            elif src == 1:
                tok, p = t2.irow[s2, IDS + t], t2.frow[s2, Q + t]
            else:
                tok, p = m1.ids[c, t], m1.q[c, t]
            at = -1
            for u in range(n):
                if tokens[j, u] == tok:
                    at = u
                    break
            if at < 0:
                tokens[j, n] = tok
                probs[j, n] = 0.0 + w[r] * p
                n += 1
            else:
                probs[j, at] = probs[j, at] + w[r] * p
    for u in range(1, n):  # insertion sort, descending, equal probabilities keep their order
        tok, p = tokens[j, u], probs[j, u]
        v = u - 1
        while v >= 0 and probs[j, v] < p:
            tokens[j, v + 1], probs[j, v + 1] = tokens[j, v], probs[j, v]
            v -= 1
        tokens[j, v + 1], probs[j, v + 1] = tok, p
    pi[j, PN] = n
    return True


@njit
def _copy_row(src, rows, mem, out, j):  # noqa: ANN001, ANN202
    """One row's own ids and q into pool row j (src 0 = M3, 1 = M2, 2 = M1: rows = M3's slot, M2's,
    M1's row)."""
    s3, s2, c = rows
    k = mem.m1.ids.shape[1]
    for t in range(k):
        if src == 0:
            out.tokens[j, t], out.probs[j, t] = mem.t3.irow[s3, IDS + t], mem.t3.frow[s3, Q + t]
        elif src == 1:
            out.tokens[j, t], out.probs[j, t] = mem.t2.irow[s2, IDS + t], mem.t2.frow[s2, Q + t]
        else:
            out.tokens[j, t], out.probs[j, t] = mem.m1.ids[c, t], mem.m1.q[c, t]
    out.ints[j, PN] = k


@njit
def snapshot(pool, npool, mem, irow, frow):  # noqa: ANN001, ANN201
    """The rows each pool row's fusion read, packed as the tables pack them, row 3 j + src for
    src 0 = M3, 1 = M2, 2 = M1: what the tree's ``sources`` are made of when read."""
    for j in range(npool):
        mask = pool.ints[j, PMASK]
        if mask & M3_BIT:
            irow[3 * j, :] = mem.t3.irow[pool.ints[j, PS3], :]
            frow[3 * j, :] = mem.t3.frow[pool.ints[j, PS3], :]
        if mask & M2_BIT:
            irow[3 * j + 1, :] = mem.t2.irow[pool.ints[j, PS2], :]
            frow[3 * j + 1, :] = mem.t2.frow[pool.ints[j, PS2], :]
        if mask & M1_BIT:
            snap_m1(pool.ints[j, PC], mem.m1, irow, frow, 3 * j + 2)
