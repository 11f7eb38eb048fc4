"""RECAP's draft as one compiled call (``recap.memory.fastpath``): suffix chain, search, layout.

``draft_tree`` is the reference draft (``RecapDrafter.draft``: ``suffix_continuation`` and
``add_chain`` from ``recap.drafting.suffix``, ``best_first`` over ``RecapDrafter._lookup`` and
``recap.memory.fusion.fuse``, the layout of ``DraftTree.reordered``) over the flat tables of
``recap.memory.rows``, with the same arithmetic in the same order (float64, no fast-math), so
it grows the same tree with the same scores and fused probabilities. The heap orders items by
(key, counter) as ``heapq`` does the reference's tuples; fusions are recomputed instead of
cached (a cache only ever returns what recomputing gives).

Outputs, in the final (laid-out) node order: ``out_i`` (NI, cap) int64 and ``out_f`` (NF, cap)
float64, one row per field (below), one column per node (a field of all nodes is contiguous), and per fusion that proposed a node a row of ``pool_i`` /
``pool_f`` (which memories took part, their keys, uids and weights), from which
``recap.drafting.fastglue`` builds the tree's ``sources`` with the memories' own Entries.
"""

from __future__ import annotations

import numpy as np

from recap.memory.fastpath import njit
from recap.memory.flatfuse import (
    F_DISCOUNT,
    F_PRIOR,
    F_SUFFIX_PRIOR,
    I_BUDGET,
    I_CAL,
    I_CHILDREN,
    I_COST,
    I_DEPTH,
    I_SMAX,
    I_SMIN,
    I_STOK,
    I_SUFFIX,
    PC,
    PCTX,
    PMASK,
    PN,
    PS2,
    PS3,
    lookup,
)
from recap.memory.rows import HASQ, NONE

# out_i rows: token, parent, depth, suffix flag, origin, order (when added), pool row of the
# fusion that proposed it (-1: none), its key (a, b, c: its own last three tokens, NONE where
# the request is shorter), its calibration class
TOK, PAR, DEP, SUF, ORI, ORD, POOL, KA, KB, KC, CLS = range(11)
NI = 11
# out_f rows: path score, fused probability, the probability its calibration sample counts at
SCORE, FUSED, PCAL = range(3)
NF = 3
#: ``ORI`` codes -> ``DraftTree.origins``
ORIGINS = ("root", "suffix", "mixed", "m1")
STOPS = ("budget", "cost", "exhausted")
CONTEXT, TOKEN, SUFFIX = 0, 1, 2  # recap.memory.calibration.Calibration's classes
BINS = 10  # Calibration.BINS


@njit
def _blocked(tok, img):  # noqa: ANN001, ANN202
    for t in img:
        if t == tok:
            return True
    return False


@njit
def suffix_chain(seq, n, min_len, max_len, max_tokens, img, out):  # noqa: ANN001, ANN201
    """``recap.drafting.suffix.suffix_continuation`` over seq[:n]; the chain into ``out``, returns its length."""
    if n < min_len + 1:
        return 0
    last = seq[n - 1]
    if _blocked(last, img):
        return 0
    best_len, best_end = 0, -1
    for end in range(n - 2, -1, -1):
        if seq[end] != last:
            continue
        length = 1
        while length < max_len and end - length >= 0 and seq[end - length] == seq[n - 1 - length] \
                and not _blocked(seq[end - length], img):
            length += 1
        if length > best_len:
            best_len, best_end = length, end
            if length == max_len:
                break
    if best_len < min_len:
        return 0
    m = 0
    for j in range(best_end + 1, min(best_end + 1 + max_tokens, n)):
        if _blocked(seq[j], img):
            break
        out[m] = seq[j]
        m += 1
    return m


@njit
def _rate(calib, cls, p, prior):  # noqa: ANN001, ANN202
    """``Calibration.rate`` / the drafter's rater: (accepted + prior * p) / (proposed + prior)."""
    b = int(p * BINS)
    if b > BINS - 1:
        b = BINS - 1
    return (calib[cls, b, 1] + prior * p) / (calib[cls, b, 0] + prior)


@njit
def _heap_push(hk, hc, hb, hi, n, key, counter, base, parent, rank, fused):  # noqa: ANN001, ANN202
    """Push an item onto the heap of n items ordered by (key, counter); returns n + 1."""
    i = n
    while i > 0:  # sift the hole up, then write the item there
        up = (i - 1) >> 1
        if hk[up] < key or (hk[up] == key and hc[up] < counter):
            break
        hk[i], hc[i], hb[i] = hk[up], hc[up], hb[up]
        hi[i, 0], hi[i, 1], hi[i, 2] = hi[up, 0], hi[up, 1], hi[up, 2]
        i = up
    hk[i], hc[i], hb[i] = key, counter, base
    hi[i, 0], hi[i, 1], hi[i, 2] = parent, rank, fused
    return n + 1


@njit
def _heap_pop(hk, hc, hb, hi, n):  # noqa: ANN001, ANN202
    """Remove the smallest item (moved to slot n - 1, where the caller reads it); returns n - 1."""
    n -= 1
    for r in range(3):
        hi[0, r], hi[n, r] = hi[n, r], hi[0, r]
    hk[0], hk[n] = hk[n], hk[0]
    hc[0], hc[n] = hc[n], hc[0]
    hb[0], hb[n] = hb[n], hb[0]
    key, counter, base = hk[0], hc[0], hb[0]
    parent, rank, fused = hi[0, 0], hi[0, 1], hi[0, 2]
    i = 0
    while True:  # sift the moved last item down
        lo = 2 * i + 1
        if lo >= n:
            break
        best = lo
        if lo + 1 < n and (hk[lo + 1] < hk[lo] or (hk[lo + 1] == hk[lo] and hc[lo + 1] < hc[lo])):
            best = lo + 1
        if key < hk[best] or (key == hk[best] and counter < hc[best]):
            break
        hk[i], hc[i], hb[i] = hk[best], hc[best], hb[best]
        hi[i, 0], hi[i, 1], hi[i, 2] = hi[best, 0], hi[best, 1], hi[best, 2]
        i = best
    hk[i], hc[i], hb[i] = key, counter, base
    hi[i, 0], hi[i, 1], hi[i, 2] = parent, rank, fused
    return n


@njit
def draft_tree(seq, n_seq, img, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq,  # noqa: ANN001, ANN201, C901
               t2_keys, t2_irow, t2_frow, t3_keys, t3_irow, t3_frow, calib, ip, fp, seconds, marginal,
               out_i, out_f, pool_i, pool_f, pool_tok, pool_p, snap_i, snap_f):
    """RECAP's draft below the root seq[n_seq - 1]: returns (nodes, stop code, pool rows).

    Then the rows the pool's fusions read are copied into snap_i / snap_f (3 rows per pool row,
    at least 3 (budget + 1) rows: ``snapshot``), before any update can write over them.

    ``ip`` / ``fp``: the ``I_*`` / ``F_*`` parameters (``recap.memory.flatfuse``); ``seconds`` /
    ``marginal``: the pass cost (read with ``ip[I_COST]``); ``out_i`` / ``out_f`` have at least
    budget + 1 columns, the pool as many rows and ``pool_tok`` / ``pool_p`` 3 k columns. Stop codes
    index ``STOPS``.
    """
    cap = ip[I_BUDGET] + 1
    budget, max_depth, max_children = ip[I_BUDGET], ip[I_DEPTH], ip[I_CHILDREN]
    discount, prior, cost_on, calibrate = fp[F_DISCOUNT], fp[F_PRIOR], ip[I_COST] != 0, ip[I_CAL] != 0
    # the tree in drafting order: ints (token, parent, depth, suffix, origin, pool, key a, b, c, key length)
    ti = np.empty((cap, 10), dtype=np.int64)
    tf = np.empty((cap, 2))  # score, fused
    adopted = np.zeros(cap, dtype=np.bool_)
    root = seq[n_seq - 1]
    ti[0, 0], ti[0, 1], ti[0, 2], ti[0, 3], ti[0, 4], ti[0, 5] = root, -1, 0, 0, 0, -1
    ti[0, 6] = seq[n_seq - 3] if n_seq >= 3 else NONE
    ti[0, 7] = seq[n_seq - 2] if n_seq >= 2 else NONE
    ti[0, 8], ti[0, 9] = root, min(n_seq, 3)
    tf[0, 0], tf[0, 1] = 1.0, 1.0
    n = 1
    if ip[I_SUFFIX] != 0:  # the suffix chain first (``add_chain`` on the bare root)
        chain = np.empty(ip[I_STOK], dtype=np.int64)
        length = suffix_chain(seq, n_seq, ip[I_SMIN], ip[I_SMAX], ip[I_STOK], img, chain)
        if length > 0:
            conf = _rate(calib, SUFFIX, fp[F_SUFFIX_PRIOR], prior) if calibrate else fp[F_SUFFIX_PRIOR]
            max_new = min(ip[I_STOK], budget)
            mat = 1.0
            node = 0
            for x in range(length):
                if ti[node, 2] >= max_depth or n - 1 >= max_new:
                    break
                score = tf[node, 0] * conf
                if cost_on:
                    b = n - 1
                    if b >= marginal.shape[0] - 1 or score * seconds[b] <= marginal[b] * mat:
                        break
                    mat += score
                tok = chain[x]
                ti[n, 0], ti[n, 1], ti[n, 2], ti[n, 3], ti[n, 4], ti[n, 5] = tok, node, ti[node, 2] + 1, 1, 1, -1
                _child_key(ti, node, n, tok)
                tf[n, 0], tf[n, 1] = score, 0.0
                node = n
                n += 1
    n0 = n
    drafted = n0 - 1
    total = 0.0
    for i in range(1, n0):
        total += tf[i, 0]
    mat = 1.0 + total
    why = 2
    npool = 0
    if drafted >= budget:
        why = 0
    else:
        hcap = (cap + 1) * (max_children + 2)
        hk, hb = np.empty(hcap), np.empty(hcap)
        hc = np.empty(hcap, dtype=np.int64)
        hi = np.empty((hcap, 3), dtype=np.int64)  # parent, rank, pool row (-1: a placeholder)
        work, iwork = np.empty(12), np.empty(6, dtype=np.int64)  # the lookups' scratch
        size = 0
        counter = 0
        if ti[0, 2] < max_depth:
            counter = 1
            size = _heap_push(hk, hc, hb, hi, size, -tf[0, 0] * discount, 1, 0.0, 0, -1, -1)
        while size > 0:
            size = _heap_pop(hk, hc, hb, hi, size)
            neg, base = hk[size], hb[size]
            parent, rank, f = hi[size, 0], hi[size, 1], hi[size, 2]
            if f < 0:  # a placeholder: look the node's context up, push its best child
                if lookup(ti[parent, 6], ti[parent, 7], ti[parent, 8], ti[parent, 9], m1_ids, m1_q, m1_stats,
                          m1_uid, t2_keys, t2_irow, t2_frow, t3_keys, t3_irow, t3_frow,
                          ip, fp, pool_i, pool_f, pool_tok, pool_p, npool, work, iwork):
                    p = pool_p[npool, 0]
                    if p > 0.0:
                        counter += 1
                        r = _rate(calib, pool_i[npool, PCTX] ^ 1, p, prior) if calibrate else p
                        size = _heap_push(hk, hc, hb, hi, size, neg * r, counter, -neg, parent, 0, npool)
                    npool += 1
                continue
            nxt = rank + 1  # the next sibling becomes a candidate
            if nxt < max_children and nxt < pool_i[f, PN]:
                p = pool_p[f, nxt]
                if p > 0.0:
                    counter += 1
                    r = _rate(calib, pool_i[f, PCTX] ^ 1, p, prior) if calibrate else p
                    size = _heap_push(hk, hc, hb, hi, size, -base * r, counter, base, parent, nxt, f)
            tok, p = pool_tok[f, rank], pool_p[f, rank]
            score = -neg
            existing = -1
            for i in range(1, n):
                if ti[i, 1] == parent and ti[i, 0] == tok:
                    existing = i
                    break
            if existing >= 0:
                if existing >= n0 or adopted[existing]:
                    continue
                tf[existing, 1] = p  # adopt a suffix-chain node: it now also carries the fusion
                ti[existing, 5] = f
                ti[existing, 4] = 2
                if score > tf[existing, 0]:
                    mat += score - tf[existing, 0]
                    tf[existing, 0] = score
                adopted[existing] = True
                node = existing
            else:
                if cost_on and score * seconds[drafted] <= marginal[drafted] * mat:
                    why = 1
                    break
                node = n
                ti[n, 0], ti[n, 1], ti[n, 2], ti[n, 3], ti[n, 4], ti[n, 5] = tok, parent, ti[parent, 2] + 1, 0, 2, f
                _child_key(ti, parent, n, tok)
                tf[n, 0], tf[n, 1] = score, p
                n += 1
                drafted += 1
                mat += score
                if drafted >= budget:
                    why = 0
                    break
            if ti[node, 2] < max_depth:  # expand the node: its placeholder
                counter += 1
                size = _heap_push(hk, hc, hb, hi, size, -tf[node, 0] * discount, counter, 0.0, node, -1, -1)
    order = _depth_first(ti, tf, n)
    new_index = np.empty(n, dtype=np.int64)
    for j in range(n):
        new_index[order[j]] = j
    for j in range(n):
        i = order[j]
        out_i[TOK, j], out_i[DEP, j], out_i[SUF, j], out_i[ORI, j] = ti[i, 0], ti[i, 2], ti[i, 3], ti[i, 4]
        out_i[PAR, j] = new_index[ti[i, 1]] if i > 0 else -1
        out_i[ORD, j] = i
        f = ti[i, 5]
        out_i[POOL, j] = f
        out_i[KA, j], out_i[KB, j], out_i[KC, j] = ti[i, 6], ti[i, 7], ti[i, 8]
        out_f[SCORE, j], out_f[FUSED, j] = tf[i, 0], tf[i, 1]
        if f < 0:  # a suffix-chain node no memory proposed: counted at the suffix prior
            out_i[CLS, j], out_f[PCAL, j] = SUFFIX, fp[F_SUFFIX_PRIOR]
        else:
            out_i[CLS, j], out_f[PCAL, j] = (CONTEXT if pool_i[f, PMASK] > 1 else TOKEN), tf[i, 1]
    snapshot(pool_i, npool, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq, t2_irow, t2_frow,
             t3_irow, t3_frow, snap_i, snap_f)
    return n, why, npool


@njit
def _child_key(ti, parent, node, tok):  # noqa: ANN001, ANN202
    """Node's key: its parent's last two tokens, then its own token."""
    plen = ti[parent, 9]
    ti[node, 6] = ti[parent, 7] if plen >= 2 else NONE
    ti[node, 7] = ti[parent, 8]
    ti[node, 8] = tok
    ti[node, 9] = min(plen + 1, 3)


@njit
def _depth_first(ti, tf, n):  # noqa: ANN001, ANN202
    """``recap.drafting.tree.depth_first_order``: children by score, highest first, ties by index."""
    order = np.empty(n, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    kids = np.empty(n, dtype=np.int64)
    top = 1
    stack[0] = 0
    m = 0
    while top > 0:
        top -= 1
        i = stack[top]
        order[m] = i
        m += 1
        nk = 0
        for j in range(n - 1, i, -1):  # children, highest index first (the reversed list)
            if ti[j, 1] == i:
                kids[nk] = j
                nk += 1
        for u in range(1, nk):  # stable insertion sort by score, ascending
            x = kids[u]
            v = u - 1
            while v >= 0 and tf[kids[v], 0] > tf[x, 0]:
                kids[v + 1] = kids[v]
                v -= 1
            kids[v + 1] = x
        for u in range(nk):
            stack[top] = kids[u]
            top += 1
    return order


@njit
def snapshot(pool_i, npool, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq, t2_irow, t2_frow,  # noqa: ANN001, ANN201
             t3_irow, t3_frow, irow, frow):
    """The rows each pool row's fusion read, packed (``recap.memory.rows``: irow (3 npool, k + 5),
    frow (3 npool, 2 k + 2)), row 3 j + slot for slot 0 = M3, 1 = M2, 2 = M1: what the tree's
    ``sources`` are made of when read, whatever the update writes over the tables meanwhile."""
    for j in range(npool):
        mask = pool_i[j, PMASK]
        if mask & 4:
            irow[3 * j, :] = t3_irow[pool_i[j, PS3], :]
            frow[3 * j, :] = t3_frow[pool_i[j, PS3], :]
        if mask & 2:
            irow[3 * j + 1, :] = t2_irow[pool_i[j, PS2], :]
            frow[3 * j + 1, :] = t2_frow[pool_i[j, PS2], :]
        if mask & 1:
            snap_copy_m1(pool_i[j, PC], m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq, irow, frow,
                         3 * j + 2)


@njit
def snap_copy_m1(c, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq, irow, frow, r):  # noqa: ANN001, ANN201
    """M1's row c, packed as ``recap.memory.rows`` packs a row, into irow / frow row r."""
    k = m1_ids.shape[1]
    irow[r, 0] = m1_uid[c]
    for t in range(k):
        irow[r, 1 + t] = m1_ids[c, t]
        frow[r, t] = m1_q[c, t]
        frow[r, k + t] = m1_probs[c, t]
    irow[r, k + 1], irow[r, k + 2], irow[r, k + 3] = m1_prov[c, 0], m1_prov[c, 1], m1_prov[c, 2]
    irow[r, k + 4] = HASQ if m1_hasq[c] else 0
    frow[r, 2 * k], frow[r, 2 * k + 1] = m1_stats[c, 0], m1_stats[c, 1]
