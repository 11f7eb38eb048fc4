"""The memories' rows as flat arrays (their one storage), the records the kernels take, and the
kernel that files a block of target predictions into M1, M2 and M3.

* M1 (``recap.memory.store.TokenMemory``) is ``M1Rows``: one top-k row per vocabulary token.
* M2 / M3 (``recap.memory.context.ContextMemory``) are ``TableArrays`` each: open addressing
  over (a, b, c) keys (an M2 key's ``a`` is ``NONE``), linear probing, at most half full. A slot
  holds a whole row, packed: ``irow`` = uid, ids[k], request, step, depth, seq (the key's
  first-write number: the order the table iterates in, as a dict's insertion order) and
  ``frow`` = q[k], probs[k], entropy, concentration (float64 holding the float32 values exactly).
* ``Entry`` is a view of one row, built on demand (the trace, the app and the tests read them).

A row's ``q`` is its probabilities renormalised over the k tokens, exactly as the write computed
them (float32 tensor ops) or, for a row read back from a file, as ``Entry.normalised`` does; its
``uid`` identifies the recorded prediction (one prediction filed under several keys keeps one
uid), which fusion compares where all of a context's keys were last written at one position.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import NamedTuple

import numpy as np
import torch

from recap.memory.jit import njit

#: A key position with no token (``None`` in a Python key); never a token id.
NONE = np.int64(np.iinfo(np.int64).min)
# int64 constants, so that the hash wraps alike compiled and as plain Python (NUMBA_DISABLE_JIT)
_MIX_A, _MIX_B, _MIX_C = (
    np.int64(0x9E3779B97F4A7C15 - (1 << 64)), np.int64(0xC2B2AE3D27D4EB4F - (1 << 64)),
    np.int64(0x165667B19E3779F9),
)


class Entry(NamedTuple):
    """One recorded prediction: the target's top-k after a key, with provenance (a row's view)."""

    ids: tuple[int, ...]  # top-k token ids, most probable first
    probs: tuple[float, ...]  # their softmax probabilities under the full vocabulary
    entropy: float  # entropy (nats) of probs renormalised over the k tokens
    concentration: float  # 1 - entropy / log k, in [0, 1]
    request: int
    step: int
    depth: int
    q: tuple[float, ...] | None = None  # probs renormalised over the k tokens (None: made by hand)
    uid: int = -1  # the prediction's identity (-1: made by hand)

    def normalised(self) -> tuple[float, ...]:
        """probs renormalised to sum to 1 over the k tokens (their plain left-to-right sum; 0 -> 1)."""
        if self.q is not None:
            return self.q
        mass = 0.0
        for p in self.probs:  # not sum(): from Python 3.12 it compensates, and the kernels add plainly
            mass += p
        mass = mass or 1.0
        return tuple(p / mass for p in self.probs)

    def prob_of(self, token: int) -> float:
        """The probability this entry gave ``token`` (0 when outside its top-k)."""
        try:
            return self.probs[self.ids.index(token)]
        except ValueError:
            return 0.0


class M1Rows(NamedTuple):
    """M1's rows: row t is the prediction after token t."""

    ids: np.ndarray  # (V, k) int64
    probs: np.ndarray  # (V, k) float32
    stats: np.ndarray  # (V, 2) float32: entropy, concentration
    prov: np.ndarray  # (V, 3) int32: request (-1: an empty row), step, depth
    q: np.ndarray  # (V, k) float64
    uid: np.ndarray  # (V,) int64 (-1: empty)


class TableArrays(NamedTuple):
    """An M2 or M3 table (C slots, a power of two)."""

    keys: np.ndarray  # (C, 3) int64 (NONE in keys[:, 2]: a free slot)
    irow: np.ndarray  # (C, iwidth) int64 packed rows (``RowLayout``)
    frow: np.ndarray  # (C, fwidth) float64
    meta: np.ndarray  # (2,) int64: keys held, the next first-write number


#: A packed row's fields at fixed columns: irow's uid, ids[t] at IDS + t; frow's q[t] at Q + t.
UID, IDS, Q = 0, 1, 0


class RowLayout(NamedTuple):
    """Where a packed row's other fields are over k predictions (``row_layout``; the module docstring
    gives the layout)."""

    prov: int  # irow: request, then step and depth
    seq: int  # irow: the first-write number (the last column)
    probs: int  # frow: probs[t] at probs + t
    stats: int  # frow: entropy, then concentration
    iwidth: int
    fwidth: int


@njit
def row_layout(k):  # noqa: ANN001, ANN201
    """The ``RowLayout`` of rows of k predictions."""
    return RowLayout(prov=k + 1, seq=k + 4, probs=k, stats=2 * k, iwidth=k + 5, fwidth=2 * k + 2)


class MemoryArrays(NamedTuple):
    """What a request drafts from and writes to: M1 and its M2 / M3."""

    m1: M1Rows
    t2: TableArrays
    t3: TableArrays


class Keys(NamedTuple):
    """The keys of a block of N predictions, and the order they are filed in (later wins)."""

    a: np.ndarray  # (N,) int64: x_{t-2} (NONE: none)
    b: np.ndarray  # (N,) int64: x_{t-1}
    c: np.ndarray  # (N,) int64: x_t
    order: np.ndarray  # (M,) int64: the rows to file, in filing order


class Predictions(NamedTuple):
    """A block of N target predictions and the statistics the memories keep of them."""

    ids: np.ndarray  # (N, k) int64 top-k ids
    probs: np.ndarray  # (N, k) float32 their probabilities
    q: np.ndarray  # (N, k) float32 renormalised over the k tokens
    h: np.ndarray  # (N,) float32 entropy of q
    depths: np.ndarray  # (N,) int64 tree depth of each position


class Writer(NamedTuple):
    """Who writes a block: the provenance every row gets, and what may not be a key."""

    img: np.ndarray  # (I,) int64 image placeholder ids: never part of a key
    vocab: int  # M1's rows
    request: int
    step: int
    uid0: int  # the block's first uid (row i gets uid0 + i)
    context: bool  # M2 / M3 are written too


def predictions(
    top_ids: torch.Tensor, top_probs: torch.Tensor, depths: Sequence[int] | np.ndarray
) -> Predictions:
    """A block's rows from the target's top-k (N, k) on the host: q and the entropy by tensor ops."""
    probs = top_probs if top_probs.dtype == torch.float32 else top_probs.float()
    q = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)  # (N, k)
    h = torch.special.entr(q).sum(-1)  # (N,)
    depth = depths if isinstance(depths, np.ndarray) else np.asarray(depths, dtype=np.int64)
    return Predictions(ids=top_ids.numpy(), probs=probs.numpy(), q=q.numpy(), h=h.numpy(), depths=depth)


@njit
def key_after(key, tok):  # noqa: ANN001, ANN201
    """The key ending at ``tok``, after the position whose key is ``key``: every memory key is its
    position's last three tokens (a, b, c), ``NONE`` where the request is shorter; the one place
    that builds one (the drafts' nodes, the prompt's and a tree's rows, a request's root)."""
    return key[1], key[2], tok


@njit
def request_key(seq, n):  # noqa: ANN001, ANN201
    """The key ending at seq[n - 1] (no token at all for n = 0)."""
    key = (NONE, NONE, NONE)
    for i in range(max(n - 3, 0), n):
        key = key_after(key, seq[i])
    return key


@njit
def slot(keys, a, b, c):  # noqa: ANN001, ANN201
    """The slot of key (a, b, c): where it is, or the free slot where it would go."""
    mask = keys.shape[0] - 1
    h = (a * _MIX_A) ^ (b * _MIX_B) ^ (c * _MIX_C)
    i = (h ^ (h >> 29)) & mask
    while True:
        if keys[i, 2] == NONE or (keys[i, 0] == a and keys[i, 1] == b and keys[i, 2] == c):
            return i
        i = (i + 1) & mask


@njit
def find(keys, a, b, c):  # noqa: ANN001, ANN201
    """The slot holding key (a, b, c), or -1."""
    i = slot(keys, a, b, c)
    return i if keys[i, 2] != NONE else -1


@njit
def put(t, a, b, c, src_i, src_f):  # noqa: ANN001, ANN201
    """Write row (src_i: irow less its first-write number, src_f) under (a, b, c); a new key gets the
    next first-write number."""
    s = slot(t.keys, a, b, c)
    if t.keys[s, 2] == NONE:
        t.keys[s, 0], t.keys[s, 1], t.keys[s, 2] = a, b, c
        t.irow[s, -1] = t.meta[1]
        t.meta[0] += 1
        t.meta[1] += 1
    t.irow[s, :-1] = src_i
    t.frow[s, :] = src_f


@njit
def insert(t, keys, irow, frow):  # noqa: ANN001, ANN201
    """Copy whole rows (their first-write numbers included) into table t, which has room."""
    for j in range(keys.shape[0]):
        s = slot(t.keys, keys[j, 0], keys[j, 1], keys[j, 2])
        if t.keys[s, 2] == NONE:
            t.meta[0] += 1
        t.keys[s, :] = keys[j, :]
        t.irow[s, :] = irow[j, :]
        t.frow[s, :] = frow[j, :]


@njit
def blocked(tok, img):  # noqa: ANN001, ANN201
    """Whether ``tok`` is an image placeholder (never part of a key, never proposed)."""
    for t in img:
        if t == tok:
            return True
    return False


@njit
def concentration(h, k, out):  # noqa: ANN001, ANN201
    """out = clamp(1 - h / log k, 0, 1) in float32 (1 for k = 1)."""
    if k <= 1:
        out[:] = 1.0
        return
    logk = np.float32(np.log(k))
    one, zero = np.float32(1.0), np.float32(0.0)
    for i in range(h.shape[0]):
        x = one - h[i] / logk
        out[i] = zero if x < zero else (one if x > one else x)


@njit
def file_rows(keys, rows, writer, mem):  # noqa: ANN001, ANN201
    """File predictions ``keys.order[j]`` (j ascending: later writes win) into M1 / M2 / M3.

    M1 gets every row whose c is a vocabulary token and no image placeholder; with
    ``writer.context``, M2 every such row whose b is a token too, M3 every one whose a is as
    well. The tables must have room for every row (``ContextMemory.reserve``).
    """
    n, k = rows.ids.shape[0], rows.ids.shape[1]
    conc = np.empty(n, dtype=np.float32)
    concentration(rows.h, k, conc)
    col = row_layout(k)
    src_i = np.empty(col.seq, dtype=np.int64)
    src_f = np.empty(col.fwidth, dtype=np.float64)
    m1, img = mem.m1, writer.img
    for j in range(keys.order.shape[0]):
        i = keys.order[j]
        c = keys.c[i]
        if blocked(c, img):
            continue
        uid = writer.uid0 + i
        if 0 <= c < writer.vocab:
            for t in range(k):
                m1.ids[c, t] = rows.ids[i, t]
                m1.probs[c, t] = rows.probs[i, t]
                m1.q[c, t] = rows.q[i, t]
            m1.stats[c, 0], m1.stats[c, 1] = rows.h[i], conc[i]
            m1.prov[c, 0], m1.prov[c, 1], m1.prov[c, 2] = writer.request, writer.step, rows.depths[i]
            m1.uid[c] = uid
        b = keys.b[i]
        if not writer.context or b == NONE or blocked(b, img):
            continue
        src_i[UID] = uid
        for t in range(k):
            src_i[IDS + t] = rows.ids[i, t]
            src_f[Q + t] = rows.q[i, t]
            src_f[col.probs + t] = rows.probs[i, t]
        prov = col.prov
        src_i[prov], src_i[prov + 1], src_i[prov + 2] = writer.request, writer.step, rows.depths[i]
        src_f[col.stats], src_f[col.stats + 1] = rows.h[i], conc[i]
        put(mem.t2, NONE, b, c, src_i, src_f)
        a = keys.a[i]
        if a == NONE or blocked(a, img):
            continue
        put(mem.t3, a, b, c, src_i, src_f)


@njit
def snap_m1(c, m1, irow, frow, r):  # noqa: ANN001, ANN201
    """M1's row c, packed as the tables pack a row, into irow / frow row r."""
    k = m1.ids.shape[1]
    col = row_layout(k)
    irow[r, UID] = m1.uid[c]
    for t in range(k):
        irow[r, IDS + t] = m1.ids[c, t]
        frow[r, Q + t] = m1.q[c, t]
        frow[r, col.probs + t] = m1.probs[c, t]
    for f in range(3):
        irow[r, col.prov + f] = m1.prov[c, f]
    irow[r, col.seq] = 0
    frow[r, col.stats], frow[r, col.stats + 1] = m1.stats[c, 0], m1.stats[c, 1]


def plain_memory(*, m1: M1Rows, t2: TableArrays, t3: TableArrays) -> tuple:
    """A ``MemoryArrays`` as a kernel call takes it, built by name (``named_memory`` names it again)."""
    return (tuple(m1), tuple(t2), tuple(t3))


@njit
def named_memory(mem):  # noqa: ANN001, ANN201
    """``MemoryArrays`` from its plain form (``plain_memory``)."""
    return MemoryArrays(M1Rows(*mem[0]), TableArrays(*mem[1]), TableArrays(*mem[2]))


@njit
def record_rows(keys, rows, writer, mem):  # noqa: ANN001, ANN201
    """``file_rows`` called from Python (the write path's one kernel call per block), its records
    in their plain form (fields in order: numba types a plain tuple by its fast path, a NamedTuple
    field by field, several microseconds a call)."""
    file_rows(Keys(*keys), Predictions(*rows), Writer(*writer), named_memory(mem))


def read_back_q(probs: np.ndarray) -> np.ndarray:
    """(V, k) float64: each row's float32 probs over their plain left-to-right sum, as
    ``Entry.normalised()`` computes it (mass 0 -> 1): the q of rows read back from a file."""
    p = probs.astype(np.float64)
    mass = np.zeros(p.shape[0], dtype=np.float64)
    for t in range(p.shape[1]):  # column by column: the same order as a left-to-right sum per row
        mass += p[:, t]
    mass[mass == 0.0] = 1.0
    return p / mass[:, None]


def unpack(irow: np.ndarray, frow: np.ndarray) -> list[Entry]:
    """The Entries of packed rows, built by C-level maps over the columns (one ``tolist`` per array)."""
    n = irow.shape[0]
    if n == 0:
        return []
    k = irow.shape[1] - row_layout(0).iwidth
    col, icol, fcol = row_layout(k), irow.T.tolist(), frow.T.tolist()
    prov, probs, stats = col.prov, col.probs, col.stats
    fields = (  # Entry's, in order
        zip(*icol[IDS : IDS + k]), zip(*fcol[probs : probs + k]), fcol[stats], fcol[stats + 1], icol[prov],
        icol[prov + 1], icol[prov + 2], zip(*fcol[Q : Q + k]), icol[UID],
    )
    return list(map(tuple.__new__, repeat(Entry, n), zip(*fields)))
