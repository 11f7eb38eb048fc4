"""The memory drafters' update as compiled calls (``recap.memory.fastpath``): the keys and write
order of a verified tree's rows, RECAP's calibration samples, and RECAP's whole update in one call
(``update_tree``: its rows filed by ``recap.memory.rows.file_rows``, then its samples counted)."""

from __future__ import annotations

import numpy as np

from recap.drafting.fastdraft import BINS, CLS, DEP, KA, KB, KC, PAR, PCAL, TOK
from recap.memory.fastpath import njit
from recap.memory.rows import file_rows


@njit
def count_samples(calib, cls, pcal, parents, tokens, picked, n):  # noqa: ANN001, ANN201
    """``Calibration.update`` with node i's sample (class cls[i], probability pcal[i], accepted when
    picked[parents[i]] == tokens[i]) for i = 1..n-1, in order."""
    for i in range(1, n):
        b = int(pcal[i] * BINS)
        if b > BINS - 1:
            b = BINS - 1
        calib[cls[i], b, 0] += 1.0
        if picked[parents[i]] == tokens[i]:
            calib[cls[i], b, 1] += 1.0


@njit
def path_last(n, path):  # noqa: ANN001, ANN201
    """The write order of a verified tree's rows: every node off the path ascending, then the path."""
    on = np.zeros(n, dtype=np.bool_)
    for i in path:
        on[i] = True
    order = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if not on[i]:
            order[m] = i
            m += 1
    for i in path:
        order[m] = i
        m += 1
    return order


@njit
def tree_keys(tokens, parents, b2, b1, a, b, c):  # noqa: ANN001, ANN201
    """``recap.drafting.recycling.node_keys`` into a, b, c (``NONE`` for None): b2, b1 the two
    request tokens before the root."""
    for i in range(tokens.shape[0]):
        p = parents[i]
        c[i] = tokens[i]
        if p < 0:
            a[i], b[i] = b2, b1
        else:
            pp = parents[p]
            a[i] = tokens[pp] if pp >= 0 else b1
            b[i] = tokens[p]


@njit
def update_tree(out_i, out_f, size, path, picked, calib, calibrate, img, vocab,  # noqa: ANN001, ANN201
                ids, probs, q, h, request, step, uid0, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq,
                context, t2_keys, t2_irow, t2_frow, t2_log, t2_meta, t3_keys, t3_irow, t3_frow, t3_log, t3_meta):
    """RECAP's update of the tree ``draft_tree`` left in out_i / out_f (``size`` nodes), in one call:
    its rows filed with the accepted ``path`` last (``rows.file_rows`` under the nodes' keys),
    then, with ``calibrate``, every drafted node's calibration sample (``count_samples``)."""
    order = path_last(size, path)
    new = file_rows(out_i[KA, :size], out_i[KB, :size], out_i[KC, :size], order, img, vocab, ids, probs, q, h,
                    out_i[DEP, :size], request, step, uid0, m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid,
                    m1_hasq, context, t2_keys, t2_irow, t2_frow, t2_log, t2_meta, t3_keys, t3_irow, t3_frow, t3_log,
                    t3_meta)
    if calibrate:
        count_samples(calib, out_i[CLS], out_f[PCAL], out_i[PAR], out_i[TOK], picked, size)
    return new
