"""RECAP's draft as one kernel call: the suffix chain, best-first search over fused rows, the layout.

``draft_tree`` grows the tree below the root ``seq[n - 1]`` (DESIGN.md sections 4-5):

1. the suffix chain (``recap.drafting.suffix.suffix_chain``) below the bare root, each node
   scored at its parent's score times the suffix proposal's rate;
2. best-first search: a max-heap of frontier candidates ordered by path score (the product of
   the calibrated acceptance rates along the path, times ``discount`` per level), ties by push
   order. A placeholder item stands for a node's children, keyed by the node's own score (an
   upper bound): its context is fused (``recap.memory.fusion.lookup``) only when it pops.
   Popping a candidate adds it (or adopts the suffix-chain node carrying the same token, which
   then also carries the fusion) and pushes its next sibling and its own placeholder. With a
   pass cost, growth stops at the first node that does not pay for itself (``_dear``; candidates
   pop in non-increasing score order and the bar only rises, so the first refusal is final);
3. the layout (``recap.drafting.tree.layout``): depth-first, highest-score child first.

Outputs, in the final node order: ``out_i`` (NI, cap) int64 and ``out_f`` (NF, cap) float64, one
row per field, one column per node; per fusion that proposed a node a pool row (which memories
took part, their keys, uids and weights), and the rows those fusions read, copied
(``recap.memory.fusion.snapshot``) before an update can write over them: what the tree's ``sources``
are built from when read.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np

from recap.drafting.suffix import suffix_chain
from recap.drafting.tree import layout
from recap.memory.calibration import CONTEXT, SUFFIX, TOKEN, acceptance_rate
from recap.memory.fusion import PCTX, PN, Fusion, Pool, lookup, pool, snapshot
from recap.memory.jit import njit
from recap.memory.rows import key_after, named_memory, request_key, row_layout

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
O_ROOT, O_SUFFIX, O_MIXED, O_M1 = range(len(ORIGINS))
#: Why a draft stopped growing (``draft_tree``'s stop code indexes it)
STOPS = ("budget", "cost", "exhausted")
AT_BUDGET, AT_COST, EXHAUSTED = range(len(STOPS))
# node columns while drafting (the order nodes are added): ints, floats
N_TOK, N_PAR, N_DEP, N_SUF, N_ORI, N_POOL, N_KA, N_KB, N_KC = range(9)
N_SCORE, N_FUSED = range(2)


class Request(NamedTuple):
    """The request's tokens: seq[:n], the root last."""

    seq: np.ndarray  # (>= n,) int64
    n: int
    img: np.ndarray  # (I,) int64 image placeholders


def plain_request(*, seq: np.ndarray, n: int, img: np.ndarray) -> tuple:
    """A ``Request`` as a kernel call takes it, built by name (``draft_tree`` names it again)."""
    return (seq, n, img)


class Settings(NamedTuple):
    """RECAP's drafting settings (``RecapConfig``'s fields and the node budget)."""

    budget: int
    max_depth: int
    max_children: int
    calibrate: bool
    suffix: bool
    suffix_lengths: tuple[int, int, int]  # min_len, max_len, max_tokens (``suffix_chain``)
    cost_aware: bool
    discount: float
    prior: float  # the calibration's prior strength
    suffix_prior: float  # a suffix proposal's nominal probability
    fusion: Fusion


def plain_settings(settings: Settings) -> tuple:
    """A ``Settings`` as a kernel call takes it (``draft_tree`` names it again)."""
    return (*settings[:-1], tuple(settings.fusion))


class Scoring(NamedTuple):
    """What scores a node: the calibration counts and the pass cost."""

    calib: np.ndarray  # (3, BINS, 2) float64
    seconds: np.ndarray  # (cap + 2,) float64 a pass with b drafted nodes (read when cost_aware)
    marginal: np.ndarray  # (cap + 1,) float64


def plain_scoring(*, calib: np.ndarray, seconds: np.ndarray, marginal: np.ndarray) -> tuple:
    """A ``Scoring`` as a kernel call takes it, built by name."""
    return (calib, seconds, marginal)


class DraftBuffers(NamedTuple):
    """Where a draft goes (budget + 1 nodes at most)."""

    out_i: np.ndarray  # (NI, cap) int64
    out_f: np.ndarray  # (NF, cap) float64
    pool: Pool  # cap rows
    snap_i: np.ndarray  # (3 cap, iwidth) int64 the rows the fusions read, packed (``RowLayout``)
    snap_f: np.ndarray  # (3 cap, fwidth) float64


def draft_buffers(nodes: int, k: int) -> DraftBuffers:
    """Room for a draft of ``nodes`` nodes over top-``k`` rows."""
    col = row_layout(k)
    return DraftBuffers(
        out_i=np.empty((NI, nodes), dtype=np.int64), out_f=np.empty((NF, nodes), dtype=np.float64),
        pool=pool(nodes, k), snap_i=np.zeros((3 * nodes, col.iwidth), dtype=np.int64),
        snap_f=np.zeros((3 * nodes, col.fwidth), dtype=np.float64),
    )


@njit
def _suffix_nodes(req, settings, scoring, node_i, node_f):  # noqa: ANN001, ANN202
    """The suffix chain below the bare root (node 0); returns the node count."""
    chain = np.empty(settings.suffix_lengths[2], dtype=np.int64)
    length = suffix_chain(req.seq, req.n, settings.suffix_lengths, req.img, chain)
    n = 1
    if length == 0:
        return n
    conf = settings.suffix_prior
    if settings.calibrate:
        conf = acceptance_rate(scoring.calib, SUFFIX, settings.suffix_prior, settings.prior)
    max_new = min(settings.suffix_lengths[2], settings.budget)
    expected = 1.0  # tokens per pass the tree expects
    node = 0
    for x in range(length):
        if node_i[node, N_DEP] >= settings.max_depth or n - 1 >= max_new:
            break
        score = node_f[node, N_SCORE] * conf
        if settings.cost_aware:
            if _dear(scoring, n - 1, score, expected):
                break
            expected += score
        _add(node_i, node_f, node, n, chain[x], 1)
        node_f[n, N_SCORE], node_f[n, N_FUSED] = score, 0.0
        node_i[n, N_SUF], node_i[n, N_ORI] = 1, O_SUFFIX
        node = n
        n += 1
    return n


@njit
def _dear(scoring, b, score, expected):  # noqa: ANN001, ANN202
    """Whether a node of ``score`` added to b drafted nodes that expect ``expected`` tokens a pass does
    not pay for itself: s * T(b) <= dT(b) * M (``recap.drafting.treecost``); past the cost's cap none does
    (``or`` short-circuits: nothing is read past the arrays)."""
    return b >= scoring.marginal.shape[0] - 1 or score * scoring.seconds[b] <= scoring.marginal[b] * expected


@njit
def _add(node_i, node_f, parent, node, tok, suffix):  # noqa: ANN001, ANN202
    """Node ``node`` carries ``tok`` below ``parent``, under the key ending at it."""
    node_i[node, N_TOK], node_i[node, N_PAR], node_i[node, N_DEP] = tok, parent, node_i[parent, N_DEP] + 1
    node_i[node, N_SUF], node_i[node, N_ORI], node_i[node, N_POOL] = suffix, O_MIXED, -1
    node_i[node, N_KA], node_i[node, N_KB], node_i[node, N_KC] = key_after(_key(node_i, parent), tok)


@njit
def _key(node_i, node):  # noqa: ANN001, ANN202
    return node_i[node, N_KA], node_i[node, N_KB], node_i[node, N_KC]


@njit
def _rate(scoring, settings, pool, f, p):  # noqa: ANN001, ANN202
    """The acceptance rate of pool row f's candidate at probability p (p itself uncalibrated)."""
    if not settings.calibrate:
        return p
    return acceptance_rate(scoring.calib, _cls(pool, f), p, settings.prior)


@njit
def _cls(pool, f):  # noqa: ANN001, ANN202
    """The calibration class of pool row f's proposals: CONTEXT when M2 or M3 took part, else TOKEN."""
    return CONTEXT if pool.ints[f, PCTX] else TOKEN


@njit
def named_buffers(buf):  # noqa: ANN001, ANN201
    """``DraftBuffers`` from its plain form (``plain_buffers``)."""
    return DraftBuffers(*buf[:2], Pool(*buf[2]), *buf[3:])


def plain_buffers(buf: DraftBuffers) -> tuple:
    """A ``DraftBuffers`` as a kernel call takes it (see ``recap.memory.rows.record_rows``)."""
    return (*buf[:2], tuple(buf.pool), *buf[3:])


@njit
def draft_tree(req, mem, settings, scoring, buf):  # noqa: ANN001, ANN201
    """RECAP's draft below the root req.seq[req.n - 1], its records in plain form (``Request``,
    ``MemoryArrays``, ``Settings``, ``Scoring``, ``DraftBuffers``): returns (nodes, stop code, pool rows)."""
    named = Settings(*settings[:-1], Fusion(*settings[-1]))
    return _draft(Request(*req), named_memory(mem), named, Scoring(*scoring), named_buffers(buf))


@njit
def _draft(req, mem, settings, scoring, buf):  # noqa: ANN001, ANN202, C901
    """``draft_tree`` over the named records. Stop codes index ``STOPS``; ``buf`` has room for
    budget + 1 nodes and pool rows."""
    cap = settings.budget + 1
    budget, max_depth, max_children, discount = (
        settings.budget, settings.max_depth, settings.max_children, settings.discount,
    )
    pool = buf.pool
    node_i = np.empty((cap, N_KC + 1), dtype=np.int64)  # the tree in drafting order (N_* columns)
    node_f = np.empty((cap, 2))
    adopted = np.zeros(cap, dtype=np.bool_)
    seq, n_seq = req.seq, req.n
    root = seq[n_seq - 1]
    node_i[0, N_TOK], node_i[0, N_PAR], node_i[0, N_DEP] = root, -1, 0
    node_i[0, N_SUF], node_i[0, N_ORI], node_i[0, N_POOL] = 0, O_ROOT, -1
    node_i[0, N_KA], node_i[0, N_KB], node_i[0, N_KC] = request_key(seq, n_seq)
    node_f[0, N_SCORE], node_f[0, N_FUSED] = 1.0, 1.0
    n = _suffix_nodes(req, settings, scoring, node_i, node_f) if settings.suffix else 1
    n0, drafted = n, n - 1
    expected = 1.0  # tokens per pass the tree expects: the bonus token + every node's score
    for i in range(1, n0):
        expected += node_f[i, N_SCORE]
    why, npool = EXHAUSTED, 0
    if drafted >= budget:
        why = AT_BUDGET
    else:
        # the frontier: (-score, push counter, the parent's score, parent, rank, pool row (-1: a
        # placeholder)); the counters are distinct, so items pop by score, ties in push order
        heap = [(-node_f[0, N_SCORE] * discount, 1, 0.0, 0, -1, -1)]
        if max_depth <= 0:
            heap.pop()
        scratch = np.empty(12), np.empty(6, dtype=np.int64)  # the lookups' scratch: floats, ints
        tie = 1
        while heap:
            neg, _, base, parent, rank, f = heapq.heappop(heap)
            if f < 0:  # a placeholder: fuse the node's context, push its best child
                if lookup(_key(node_i, parent), mem, settings.fusion, pool, npool, scratch):
                    p = pool.probs[npool, 0]
                    if p > 0.0:
                        tie += 1
                        r = _rate(scoring, settings, pool, npool, p)
                        heapq.heappush(heap, (neg * r, tie, -neg, parent, 0, npool))
                    npool += 1
                continue
            nxt = rank + 1  # the next sibling becomes a candidate
            if nxt < max_children and nxt < pool.ints[f, PN]:
                p = pool.probs[f, nxt]
                if p > 0.0:
                    tie += 1
                    r = _rate(scoring, settings, pool, f, p)
                    heapq.heappush(heap, (-base * r, tie, base, parent, nxt, f))
            tok, p = pool.tokens[f, rank], pool.probs[f, rank]
            score = -neg
            existing = -1
            for i in range(1, n):
                if node_i[i, N_PAR] == parent and node_i[i, N_TOK] == tok:
                    existing = i
                    break
            if existing >= 0:
                if existing >= n0 or adopted[existing]:  # drafted nodes are expanded when added
                    continue
                node_f[existing, N_FUSED] = p  # adopt a suffix-chain node: it now also carries the fusion
                node_i[existing, N_POOL], node_i[existing, N_ORI] = f, O_MIXED
                if score > node_f[existing, N_SCORE]:
                    expected += score - node_f[existing, N_SCORE]
                    node_f[existing, N_SCORE] = score
                adopted[existing] = True
                node = existing
            else:
                if settings.cost_aware and _dear(scoring, drafted, score, expected):
                    why = AT_COST
                    break
                node = n
                _add(node_i, node_f, parent, n, tok, 0)
                node_i[n, N_POOL] = f
                node_f[n, N_SCORE], node_f[n, N_FUSED] = score, p
                n += 1
                drafted += 1
                expected += score
                if drafted >= budget:
                    why = AT_BUDGET
                    break
            if node_i[node, N_DEP] < max_depth:  # expand the node: its placeholder
                tie += 1
                heapq.heappush(heap, (-node_f[node, N_SCORE] * discount, tie, 0.0, node, -1, -1))
    _write_out(node_i, node_f, n, settings, pool, buf)
    snapshot(pool, npool, mem, buf.snap_i, buf.snap_f)
    return n, why, npool


@njit
def _write_out(node_i, node_f, n, settings, pool, buf):  # noqa: ANN001, ANN202
    """The tree in its layout's order into buf.out_i / buf.out_f."""
    order = layout(node_i[:n, N_PAR].copy(), node_f[:n, N_SCORE].copy(), n)
    new_index = np.empty(n, dtype=np.int64)
    for j in range(n):
        new_index[order[j]] = j
    out_i, out_f = buf.out_i, buf.out_f
    for j in range(n):
        i = order[j]
        out_i[TOK, j], out_i[DEP, j], out_i[SUF, j] = node_i[i, N_TOK], node_i[i, N_DEP], node_i[i, N_SUF]
        out_i[ORI, j] = node_i[i, N_ORI]
        out_i[PAR, j] = new_index[node_i[i, N_PAR]] if i > 0 else -1
        out_i[ORD, j] = i
        f = node_i[i, N_POOL]
        out_i[POOL, j] = f
        out_i[KA, j], out_i[KB, j], out_i[KC, j] = node_i[i, N_KA], node_i[i, N_KB], node_i[i, N_KC]
        out_f[SCORE, j], out_f[FUSED, j] = node_f[i, N_SCORE], node_f[i, N_FUSED]
        if f < 0:  # a suffix-chain node no memory proposed: counted at the suffix prior
            out_i[CLS, j], out_f[PCAL, j] = SUFFIX, settings.suffix_prior
        else:
            out_i[CLS, j], out_f[PCAL, j] = _cls(pool, f), node_f[i, N_FUSED]
