"""Flat row tables for the compiled hot path (``recap.memory.fastpath``): what the kernels read and write.

The reference memories are dicts of immutable ``Entry`` objects (``recap.memory.store``); on the
compiled path the flat tables are the truth and the dicts are views, filled from them when read:

* M1 lives in ``TokenMemory``'s dense table (numpy arrays behind its tensors) plus what the
  kernels need besides: ``q`` (V, k) float64, each row's probabilities renormalised exactly as
  ``Entry.normalised()`` gives them, ``uid`` (V,) int64, the row's identity (-1: empty), and
  ``hasq`` (V,) bool (the row's Entry carries its q: written by ``record``, not read back).
  Fusion's "all keys last written at the same position" shortcut compares entries by uid,
  unique per recorded prediction (``Entry.uid``).
* M2 / M3 live in a ``ContextTable`` each: open addressing over (a, b, c) keys (an M2 key's
  ``a`` is ``NONE``), linear probing, at most half full. A slot holds a whole row, packed:
  ``irow`` = uid, ids[k], request, step, depth, flags (``LOGGED``, ``HASQ``) and ``frow`` =
  q[k], probs[k], entropy, concentration (float64, the float32 values exactly). Keys written
  since the dict view was last filled are logged in first-write order (``log``), so filling
  the view later (``ContextTable.pending``) gives the dict the reference's loop would have
  built: the same keys, in the same order, with the latest rows.

``record_rows`` is the write path's one compiled call per step: it files a block of N
predictions into all three tables in the caller's order (latest write wins).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import chain, repeat

import numpy as np

from recap.memory.fastpath import njit

#: A key position with no token (``None`` in the reference keys); never a token id.
NONE = np.iinfo(np.int64).min
_MIX_A, _MIX_B, _MIX_C = 0x9E3779B97F4A7C15 - (1 << 64), 0xC2B2AE3D27D4EB4F - (1 << 64), 0x165667B19E3779F9
LOGGED, HASQ = 1, 2  # irow flags


@njit
def _slot(keys: np.ndarray, a: int, b: int, c: int) -> int:
    """The slot of key (a, b, c): where it is, or the empty slot where it would go."""
    mask = keys.shape[0] - 1
    h = (a * _MIX_A) ^ (b * _MIX_B) ^ (c * _MIX_C)
    i = (h ^ (h >> 29)) & mask
    while True:
        if keys[i, 2] == NONE or (keys[i, 0] == a and keys[i, 1] == b and keys[i, 2] == c):
            return i
        i = (i + 1) & mask


@njit
def find(keys: np.ndarray, a: int, b: int, c: int) -> int:
    """The slot holding key (a, b, c), or -1."""
    i = _slot(keys, a, b, c)
    return i if keys[i, 2] != NONE else -1


@njit
def _put(keys, irow, frow, log, meta, a, b, c, src_i, src_f) -> bool:  # noqa: ANN001
    """Write row (src_i, src_f) under (a, b, c), logging a key first written since the view was filled.
    Returns whether the key is new to the table."""
    s = _slot(keys, a, b, c)
    new = keys[s, 2] == NONE
    if new:
        keys[s, 0], keys[s, 1], keys[s, 2] = a, b, c
    logged = not new and (irow[s, -1] & LOGGED) != 0
    irow[s, :] = src_i
    frow[s, :] = src_f
    irow[s, -1] |= LOGGED
    if not logged:
        j = meta[0]
        log[j, 0], log[j, 1], log[j, 2] = a, b, c
        meta[0] = j + 1
    return new


@njit
def _rehash(old_keys, old_irow, old_frow, keys, irow, frow) -> None:  # noqa: ANN001
    for j in range(old_keys.shape[0]):
        if old_keys[j, 2] != NONE:
            i = _slot(keys, old_keys[j, 0], old_keys[j, 1], old_keys[j, 2])
            keys[i, :] = old_keys[j, :]
            irow[i, :] = old_irow[j, :]
            frow[i, :] = old_frow[j, :]


@njit
def _pending(keys, irow, log, meta, slots) -> int:  # noqa: ANN001
    """The slots of the logged keys, in log order, into ``slots``; clears the log."""
    n = meta[0]
    for j in range(n):
        s = _slot(keys, log[j, 0], log[j, 1], log[j, 2])
        slots[j] = s
        irow[s, -1] &= ~LOGGED
    meta[0] = 0
    return n


class ContextTable:
    """M2 or M3 as flat arrays (see the module docstring): ``keys`` (C, 3) int64, ``irow``
    (C, k + 5) int64, ``frow`` (C, 2 k + 2) float64, the write ``log`` (C, 3) and ``meta``
    ([logged keys]); C a power of two. ``count`` is the number of keys held."""

    def __init__(self, k: int, capacity: int = 256) -> None:
        self.k = k
        self.count = 0
        self.meta = np.zeros(1, dtype=np.int64)
        self._allocate(max(16, 1 << (int(capacity) - 1).bit_length()))

    def _allocate(self, cap: int) -> None:
        self.keys = np.full((cap, 3), NONE, dtype=np.int64)
        self.irow = np.zeros((cap, self.k + 5), dtype=np.int64)
        self.frow = np.zeros((cap, 2 * self.k + 2), dtype=np.float64)
        old = getattr(self, "log", None)
        self.log = np.empty((cap, 3), dtype=np.int64)
        if old is not None:
            self.log[: self.meta[0]] = old[: self.meta[0]]

    def reserve(self, more: int) -> None:
        """Room for ``more`` new keys while staying at most half full (rehashes when it grows)."""
        need = 2 * (self.count + more)
        cap = self.keys.shape[0]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        old = (self.keys, self.irow, self.frow)
        self._allocate(cap)
        _rehash(*old, self.keys, self.irow, self.frow)

    def copy(self) -> ContextTable:
        out = ContextTable.__new__(ContextTable)
        out.k, out.count = self.k, self.count
        out.keys, out.irow, out.frow, out.log, out.meta = (
            x.copy() for x in (self.keys, self.irow, self.frow, self.log, self.meta))
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the writing kernel takes: keys, irow, frow, log, meta."""
        return self.keys, self.irow, self.frow, self.log, self.meta

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the reading kernels take: keys, irow, frow."""
        return self.keys, self.irow, self.frow

    def load(self, rows: Mapping[tuple[int, ...], object]) -> None:
        """Fill from a row dict (key -> ``Entry``), e.g. an image's rows from earlier requests.
        The keys are not logged: the dict already holds them."""
        items = list(rows.items())
        self.reserve(len(items))
        if not items:
            return
        n = len(items[0][0])
        keys = np.full((len(items), 3), NONE, dtype=np.int64)
        keys[:, 3 - n:] = [key for key, _ in items]
        irow, frow = pack([e for _, e in items], self.k)
        self.count += _insert_rows(self.keys, self.irow, self.frow, keys, irow, frow)

    def subset(self, keys: Iterable[tuple[int, ...]], n: int, count: int) -> ContextTable | None:
        """A new table holding this one's rows under ``count`` of its keys (each of ``n`` tokens),
        e.g. what an image scope kept of them (a pruned copy of the dict this table mirrors);
        None when one of the keys is not here. Not logged."""
        flat = np.fromiter(chain.from_iterable(keys), dtype=np.int64, count=count * n).reshape(count, n)
        want = np.full((count, 3), NONE, dtype=np.int64)
        want[:, 3 - n:] = flat
        out = ContextTable(self.k, 2 * count)
        if _copy_keys(self.keys, self.irow, self.frow, want, out.keys, out.irow, out.frow) < count:
            return None
        out.count = count
        return out

    def pending(self) -> np.ndarray:
        """The slots of the keys written since the last call, in first-write order (then forgets them)."""
        slots = np.empty(self.meta[0], dtype=np.int64)
        _pending(self.keys, self.irow, self.log, self.meta, slots)
        return slots


def pack(entries: list, k: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001 (Entry: the store's)
    """Entries as (irow, frow) rows (the ``ContextTable`` layout)."""
    n = len(entries)
    irow = np.zeros((n, k + 5), dtype=np.int64)
    frow = np.zeros((n, 2 * k + 2), dtype=np.float64)
    irow[:, 0] = [e.uid for e in entries]
    irow[:, 1: k + 1] = [e.ids for e in entries]
    irow[:, k + 1: k + 4] = [(e.request, e.step, e.depth) for e in entries]
    irow[:, k + 4] = [HASQ if e.q is not None else 0 for e in entries]
    frow[:, :k] = [e.normalised() for e in entries]
    frow[:, k: 2 * k] = [e.probs for e in entries]
    frow[:, 2 * k] = [e.entropy for e in entries]
    frow[:, 2 * k + 1] = [e.concentration for e in entries]
    return irow, frow


def unpack(entry: type, irow: np.ndarray, frow: np.ndarray) -> list:
    """The Entries of packed rows (``entry``: ``recap.memory.store.Entry``), built by C-level maps
    over the columns (one ``tolist`` per array; each Entry's tuples zipped from column lists)."""
    n = irow.shape[0]
    if n == 0:
        return []
    k = irow.shape[1] - 5
    icol, fcol = irow.T.tolist(), frow.T.tolist()
    hasq = (irow[:, k + 4] & HASQ) != 0
    qs = zip(*fcol[:k]) if hasq.all() else map(lambda has, *q: q if has else None, hasq.tolist(), *fcol[:k])
    return list(map(
        tuple.__new__, repeat(entry, n),
        zip(zip(*icol[1: k + 1]), zip(*fcol[k: 2 * k]), fcol[2 * k], fcol[2 * k + 1], icol[k + 1], icol[k + 2],
            icol[k + 3], qs, icol[0]),
    ))


@njit
def _copy_keys(keys, irow, frow, want, new_keys, new_irow, new_frow) -> int:  # noqa: ANN001
    """Copy the rows under the keys ``want`` into the new table; returns how many were found."""
    found = 0
    for j in range(want.shape[0]):
        a, b, c = want[j, 0], want[j, 1], want[j, 2]
        s = _slot(keys, a, b, c)
        if keys[s, 2] == NONE:
            continue
        found += 1
        i = _slot(new_keys, a, b, c)
        new_keys[i, 0], new_keys[i, 1], new_keys[i, 2] = a, b, c
        new_irow[i, :] = irow[s, :]
        new_irow[i, -1] &= ~LOGGED
        new_frow[i, :] = frow[s, :]
    return found


@njit
def _insert_rows(keys, irow, frow, new_keys, new_irow, new_frow) -> int:  # noqa: ANN001
    added = 0
    for j in range(new_keys.shape[0]):
        i = _slot(keys, new_keys[j, 0], new_keys[j, 1], new_keys[j, 2])
        if keys[i, 2] == NONE:
            added += 1
            keys[i, :] = new_keys[j, :]
        irow[i, :] = new_irow[j, :]
        frow[i, :] = new_frow[j, :]
    return added


@njit
def _blocked(tok: int, img: np.ndarray) -> bool:
    for t in img:
        if t == tok:
            return True
    return False


@njit
def concentration(h: np.ndarray, k: int, out: np.ndarray) -> None:
    """out = clamp(1 - h / log k, 0, 1) in float32 (what ``record``'s tensor ops give; 1 for k = 1)."""
    if k <= 1:
        out[:] = 1.0
        return
    logk = np.float32(np.log(k))
    one, zero = np.float32(1.0), np.float32(0.0)
    for i in range(h.shape[0]):
        x = one - h[i] / logk
        out[i] = zero if x < zero else (one if x > one else x)


@njit
def file_rows(
    a, b, c, order, img, vocab,  # noqa: ANN001  (numba kernel: types are the arrays' dtypes)
    ids, probs, q, h, depths, request, step, uid0,
    m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq,
    context, t2_keys, t2_irow, t2_frow, t2_log, t2_meta, t3_keys, t3_irow, t3_frow, t3_log, t3_meta,
) -> tuple[int, int]:
    """File predictions ``order[j]`` (j ascending) into M1 / M2 / M3; returns the new M2 and M3 keys.

    Row i is the prediction after key (a[i], b[i], c[i]) (``NONE``: no token there): ids (N, k)
    int64, probs (N, k) float32, q (N, k) float32 (renormalised), h (N,) float32 (its
    concentration computed here, as ``concentration``), depths (N,) int64; its uid is uid0 + i.
    M1 gets every row whose c is a vocabulary token and no image placeholder; with ``context``,
    M2 every such row whose b is a token too, M3 every one whose a is as well. The tables must
    have room for every row (``ContextTable.reserve``).
    """
    new2 = new3 = 0
    n, k = ids.shape[0], ids.shape[1]
    conc = np.empty(n, dtype=np.float32)
    concentration(h, k, conc)
    src_i = np.empty(k + 5, dtype=np.int64)
    src_f = np.empty(2 * k + 2, dtype=np.float64)
    for j in range(order.shape[0]):
        i = order[j]
        ci = c[i]
        if _blocked(ci, img):
            continue
        uid = uid0 + i
        if 0 <= ci < vocab:
            for t in range(k):
                m1_ids[ci, t] = ids[i, t]
                m1_probs[ci, t] = probs[i, t]
                m1_q[ci, t] = q[i, t]
            m1_stats[ci, 0] = h[i]
            m1_stats[ci, 1] = conc[i]
            m1_prov[ci, 0] = request
            m1_prov[ci, 1] = step
            m1_prov[ci, 2] = depths[i]
            m1_uid[ci] = uid
            m1_hasq[ci] = True
        bi = b[i]
        if not context or bi == NONE or _blocked(bi, img):
            continue
        src_i[0] = uid
        for t in range(k):
            src_i[1 + t] = ids[i, t]
            src_f[t] = q[i, t]
            src_f[k + t] = probs[i, t]
        src_i[k + 1], src_i[k + 2], src_i[k + 3], src_i[k + 4] = request, step, depths[i], HASQ
        src_f[2 * k], src_f[2 * k + 1] = h[i], conc[i]
        if _put(t2_keys, t2_irow, t2_frow, t2_log, t2_meta, NONE, bi, ci, src_i, src_f):
            new2 += 1
        ai = a[i]
        if ai == NONE or _blocked(ai, img):
            continue
        if _put(t3_keys, t3_irow, t3_frow, t3_log, t3_meta, ai, bi, ci, src_i, src_f):
            new3 += 1
    return new2, new3


@njit
def record_rows(
    a, b, c, order, img, vocab,  # noqa: ANN001
    ids, probs, q, h, depths, request, step, uid0,
    m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq,
    context, t2_keys, t2_irow, t2_frow, t2_log, t2_meta, t3_keys, t3_irow, t3_frow, t3_log, t3_meta,
) -> tuple[int, int]:
    """``file_rows`` called from Python (the write path's one kernel call per block)."""
    return file_rows(a, b, c, order, img, vocab, ids, probs, q, h, depths, request, step, uid0,
                     m1_ids, m1_probs, m1_stats, m1_prov, m1_q, m1_uid, m1_hasq,
                     context, t2_keys, t2_irow, t2_frow, t2_log, t2_meta, t3_keys, t3_irow, t3_frow, t3_log, t3_meta)


def read_back_q(probs: np.ndarray) -> np.ndarray:
    """(V, k) float64: each row's float32 probs over their plain left-to-right sum, as
    ``Entry.normalised()`` computes it for a row read back from the tensors (mass 0 -> 1)."""
    p = probs.astype(np.float64)
    mass = np.zeros(p.shape[0], dtype=np.float64)
    for t in range(p.shape[1]):  # column by column: the same order as a left-to-right sum per row
        mass += p[:, t]
    mass[mass == 0.0] = 1.0
    return p / mass[:, None]


def as_keys(values: Iterable[int | None]) -> np.ndarray:
    """Key tokens (None: no token) as an int64 array with ``NONE`` for None."""
    return np.array([NONE if v is None else v for v in values], dtype=np.int64)
