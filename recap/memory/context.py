"""M2 / M3: a contextual memory keyed by the last ``n`` tokens, stored as one flat table.

``ContextMemory`` owns a ``recap.memory.rows.TableArrays`` (what the kernels read and write) and
reads as a mapping from a key (a tuple of ``n`` token ids) to its latest ``Entry``, iterated in
first-write order (as a dict the rows were filed into would be). The Entries are built when
read; nothing is kept beside the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from recap.memory.rows import NONE, Entry, TableArrays, find, insert, row_layout, unpack

__all__ = ["ContextMemory"]

Key = tuple[int, ...]


def _arrays(k: int, cap: int, next_seq: int = 0) -> TableArrays:
    col = row_layout(k)
    return TableArrays(
        keys=np.full((cap, 3), NONE, dtype=np.int64), irow=np.zeros((cap, col.iwidth), dtype=np.int64),
        frow=np.zeros((cap, col.fwidth), dtype=np.float64), meta=np.array([0, next_seq], dtype=np.int64),
    )


class ContextMemory(Mapping[Key, Entry]):
    """M2 (``n`` = 2) or M3 (``n`` = 3) rows of top-k ``k`` (see the module docstring)."""

    def __init__(self, n: int, k: int = 8, capacity: int = 256) -> None:
        if n < 2:
            raise ValueError(f"a contextual memory has keys of 2 or more tokens, got {n}")
        self.n, self.k = n, k
        self.arrays = _arrays(k, max(16, 1 << (int(capacity) - 1).bit_length()))

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return int(self.arrays.meta[0])

    def _slots(self) -> np.ndarray:
        """The occupied slots in first-write order."""
        t = self.arrays
        slots = np.flatnonzero(t.keys[:, 2] != NONE)
        return slots[np.argsort(t.irow[slots, -1], kind="stable")]

    def _key(self, key: Key) -> tuple[np.int64, np.int64, np.int64]:
        if len(key) != self.n:
            raise KeyError(key)
        a = NONE if self.n == 2 else np.int64(key[0])
        return a, np.int64(key[-2]), np.int64(key[-1])

    def __iter__(self) -> Iterator[Key]:
        return iter(map(tuple, self.arrays.keys[self._slots(), 3 - self.n :].tolist()))

    def __getitem__(self, key: Key) -> Entry:
        s = find(self.arrays.keys, *self._key(key))
        if s < 0:
            raise KeyError(key)
        return unpack(self.arrays.irow[s : s + 1], self.arrays.frow[s : s + 1])[0]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == self.n and find(self.arrays.keys, *self._key(key)) >= 0

    def items(self) -> list[tuple[Key, Entry]]:  # type: ignore[override]
        """(key, Entry) pairs in first-write order (built now)."""
        return list(zip(self, self.values()))

    def values(self) -> list[Entry]:  # type: ignore[override]
        slots = self._slots()
        return unpack(self.arrays.irow[slots], self.arrays.frow[slots])

    # ------------------------------------------------------------------ writing
    def reserve(self, more: int) -> None:
        """Room for ``more`` new keys while staying at most half full (a bigger table when needed)."""
        t = self.arrays
        need, cap = 2 * (len(self) + more), t.keys.shape[0]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        used = np.flatnonzero(t.keys[:, 2] != NONE)
        self.arrays = _arrays(self.k, cap, int(t.meta[1]))
        insert(self.arrays, t.keys[used], t.irow[used], t.frow[used])

    def copy(self) -> ContextMemory:
        out = ContextMemory.__new__(ContextMemory)
        out.n, out.k = self.n, self.k
        out.arrays = TableArrays(*(x.copy() for x in self.arrays))
        return out

    def pruned(self, oldest: int, max_rows: int) -> ContextMemory:
        """These rows without those written before request ``oldest``, then the newest ``max_rows``
        by (request, step), ties to the later-written; first-write order kept. Nothing to drop: self."""
        t, k = self.arrays, self.k
        request, step = row_layout(k).prov, row_layout(k).prov + 1
        slots = self._slots()
        keep = slots[t.irow[slots, request] >= oldest]
        if keep.size == slots.size and keep.size <= max_rows:
            return self
        if keep.size > max_rows:
            rank = np.lexsort((np.arange(keep.size), t.irow[keep, step], t.irow[keep, request]))
            keep = keep[np.sort(rank[-max_rows:])]
        out = ContextMemory(self.n, k, 2 * keep.size)
        out.arrays.meta[1] = t.meta[1]
        insert(out.arrays, t.keys[keep], t.irow[keep], t.frow[keep])
        return out
