"""Fusion over the flat row tables (``recap.memory.rows``): the compiled twin of ``fusion.fuse``.

``lookup`` is ``recap.drafting.recap_drafter.RecapDrafter._lookup`` for one context: the M3,
M2 and M1 rows of its last one to three tokens, fused as ``recap.memory.fusion`` fuses them
(``single`` for one source; ``fusion_weights`` then the identity shortcut or the mixture),
with the same float64 operations in the same order. It writes the result into one row of a
*pool* (the candidates, their probabilities, which memories took part and their weights), which
the compiled drafter (``recap.drafting.fastdraft``) searches over.
"""

from __future__ import annotations

import numpy as np

from recap.memory.fastpath import njit
from recap.memory.rows import NONE, find

# pool_i columns: which memories took part (bits: 4 M3, 2 M2, 1 M1), the context (a, b, c), uids
# of the M3 / M2 / M1 entries (-1: absent), candidates, contextual, the M3 / M2 table slots;
# pool_f: weights (M3, M2, M1)
PMASK, PA, PB, PC, PU3, PU2, PU1, PN, PCTX, PS3, PS2 = range(11)
NPI = 11
NPF = 3
#: ``ip`` (int parameters) and ``fp`` (float parameters) layouts
(I_BUDGET, I_DEPTH, I_CHILDREN, I_M2, I_M3, I_MODE, I_CAL, I_SUFFIX, I_SMIN, I_SMAX, I_STOK, I_COST) = range(12)
(F_DISCOUNT, F_EPS, F_S1, F_S2, F_S3, F_PRIOR, F_SUFFIX_PRIOR) = range(7)
MODES = ("entropy", "fixed", "backoff")


@njit
def lookup(a, b, c, clen, m1_ids, m1_q, m1_stats, m1_uid, t2_keys, t2_irow, t2_frow, t3_keys, t3_irow, t3_frow,  # noqa: ANN001, ANN201, C901
           ip, fp, pool_i, pool_f, pool_tok, pool_p, j, work, iwork):
    """``RecapDrafter._lookup`` of context (a, b, c) (its last ``clen`` tokens) into pool row j; False: none.

    ``work`` (>= 9 float64) and ``iwork`` (>= 6 int64): scratch the caller allocates once.
    """
    k = m1_ids.shape[1]
    has1 = 0 <= c < m1_ids.shape[0] and m1_uid[c] >= 0
    s2 = find(t2_keys, NONE, b, c) if ip[I_M2] != 0 and clen >= 2 else -1
    s3 = find(t3_keys, a, b, c) if ip[I_M3] != 0 and clen == 3 else -1
    if s3 < 0 and s2 < 0 and not has1:
        return False
    pool_i[j, PA], pool_i[j, PB], pool_i[j, PC] = a, b, c
    pool_i[j, PS3], pool_i[j, PS2] = s3, s2
    pool_i[j, PU3] = t3_irow[s3, 0] if s3 >= 0 else -1
    pool_i[j, PU2] = t2_irow[s2, 0] if s2 >= 0 else -1
    pool_i[j, PU1] = m1_uid[c] if has1 else -1
    pool_f[j, 0] = pool_f[j, 1] = pool_f[j, 2] = 0.0
    mask = (4 if s3 >= 0 else 0) | (2 if s2 >= 0 else 0) | (1 if has1 else 0)
    pool_i[j, PMASK] = mask
    pool_i[j, PCTX] = 1 if mask > 1 else 0
    # the entries most specific first (slot 0 = M3, 1 = M2, 2 = M1): their ids, q, concentration, uid
    count = 0
    for slot in range(3):
        if mask & (4 >> slot):
            iwork[count] = slot
            count += 1
    raw, conc, w = work[0:3], work[3:6], work[6:9]
    uid = iwork[3:6]
    if count == 1:  # one source: its own distribution (``fusion.single``), weight 1
        pool_f[j, iwork[0]] = 1.0
        _copy_row(iwork[0], s3, s2, c, m1_ids, m1_q, t2_irow, t2_frow, t3_irow, t3_frow, pool_tok, pool_p, j)
        pool_i[j, PN] = k
        return True
    for r in range(count):  # fusion_weights: raw weights, their plain sum, normalised
        slot = iwork[r]
        if slot == 0:
            conc[r], uid[r] = t3_frow[s3, 2 * k + 1], t3_irow[s3, 0]
        elif slot == 1:
            conc[r], uid[r] = t2_frow[s2, 2 * k + 1], t2_irow[s2, 0]
        else:
            conc[r], uid[r] = np.float64(m1_stats[c, 1]), m1_uid[c]
        if ip[I_MODE] == 0:
            raw[r] = fp[F_S3 - slot] * (conc[r] + fp[F_EPS])  # specificity[key length - 1]
        elif ip[I_MODE] == 1:
            raw[r] = (0.70, 0.20, 0.10)[min(r, 2)]
        else:
            raw[r] = 1.0 if r == 0 else 0.0
    total = 0.0
    for r in range(count):
        total += raw[r]
    for r in range(count):
        w[r] = 1.0 / count if total <= 0 else raw[r] / total
        pool_f[j, iwork[r]] = w[r]
    if uid[1] == uid[0] and (count == 2 or uid[2] == uid[0]):
        # every key last written at one position: that one distribution, whatever the weights
        _copy_row(iwork[0], s3, s2, c, m1_ids, m1_q, t2_irow, t2_frow, t3_irow, t3_frow, pool_tok, pool_p, j)
        pool_i[j, PN] = k
        return True
    n = 0  # the mixture: candidates in first-seen order, then a stable sort by probability
    for r in range(count):
        if w[r] == 0.0:
            continue
        slot = iwork[r]
        for t in range(k):
            if slot == 0:
                tok, p = t3_irow[s3, 1 + t], t3_frow[s3, t]
            elif slot == 1:
                tok, p = t2_irow[s2, 1 + t], t2_frow[s2, t]
            else:
                tok, p = m1_ids[c, t], m1_q[c, t]
            at = -1
            for u in range(n):
                if pool_tok[j, u] == tok:
                    at = u
                    break
            if at < 0:
                pool_tok[j, n] = tok
                pool_p[j, n] = 0.0 + w[r] * p
                n += 1
            else:
                pool_p[j, at] = pool_p[j, at] + w[r] * p
    for u in range(1, n):  # insertion sort, descending, equal probabilities keep their order
        tok, p = pool_tok[j, u], pool_p[j, u]
        v = u - 1
        while v >= 0 and pool_p[j, v] < p:
            pool_tok[j, v + 1], pool_p[j, v + 1] = pool_tok[j, v], pool_p[j, v]
            v -= 1
        pool_tok[j, v + 1], pool_p[j, v + 1] = tok, p
    pool_i[j, PN] = n
    return True


@njit
def _copy_row(slot, s3, s2, c, m1_ids, m1_q, t2_irow, t2_frow, t3_irow, t3_frow, pool_tok, pool_p, j):  # noqa: ANN001, ANN202
    """One entry's own ids and q into pool row j (slot 0 = M3, 1 = M2, 2 = M1)."""
    k = m1_ids.shape[1]
    for t in range(k):
        if slot == 0:
            pool_tok[j, t], pool_p[j, t] = t3_irow[s3, 1 + t], t3_frow[s3, t]
        elif slot == 1:
            pool_tok[j, t], pool_p[j, t] = t2_irow[s2, 1 + t], t2_frow[s2, t]
        else:
            pool_tok[j, t], pool_p[j, t] = m1_ids[c, t], m1_q[c, t]
