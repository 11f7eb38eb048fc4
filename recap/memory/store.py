"""Prediction memories (DESIGN.md section 2).

At every position the target evaluates, its top-k next-token prediction is recorded
under keys ending at that position's input token:

* ``TokenMemory`` (M1): key ``(x_t)``; persistent across requests, one top-k row per
  vocabulary token (like Token Recycling's adjacency matrix): a dense ``(V, k)`` table,
  saved to / loaded from safetensors (``recap.memory.file``); ``lookup`` / ``entries`` give
  its rows as immutable ``Entry`` objects.
* ``ContextMemory`` (M2, M3): keys ``(x_{t-1}, x_t)`` and ``(x_{t-2}, x_{t-1}, x_t)``;
  request-local hash maps, so they are implicitly conditioned on that request's image:
  created empty for every request, or (``scoped``) holding what the same session's earlier
  requests on the same image wrote (``TokenMemory.scoped``, ``recap.memory.scoped``).
* ``RequestMemory`` bundles the three for one request; ``record`` writes a batch of the
  target's predictions into them, on the reference path (``recap.memory.refwrite``: Python
  over Entries) or the compiled one (``recap.memory.flatwrite``: flat tables, the dict views
  filled when read). Both write the same rows (``recap.memory.fastpath``).

Rules: latest write wins; image placeholder tokens are never part of a key (a position
whose input is one is not recorded; a key that would reach back into one is dropped);
every entry keeps its provenance (request number, decode step, tree depth).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from recap.memory import fastpath, flatwrite, refwrite
from recap.memory.calibration import Calibration
from recap.memory.file import TABLES, MemoryTables, load_tables, save_tables
from recap.memory.rows import ContextTable, as_keys
from recap.memory.scoped import ScopedMemory, scope_name

__all__ = [
    "ContextMemory",
    "Entry",
    "RequestInfo",
    "RequestMemory",
    "TokenMemory",
]

_UNREAD = object()  # TokenMemory.lookup: a token the row view has not seen


class Entry(NamedTuple):
    """One recorded prediction: the target's top-k after a key, with provenance.

    A NamedTuple: immutable and cheap to build (thousands are written per request).
    """

    ids: tuple[int, ...]  # top-k token ids, most probable first
    probs: tuple[float, ...]  # their softmax probabilities under the full vocabulary
    entropy: float  # entropy (nats) of probs renormalised over the k tokens
    concentration: float  # 1 - entropy / log k, in [0, 1]
    request: int
    step: int
    depth: int
    # probs renormalised over the k tokens (what fusion mixes): set by record(); None for a row
    # read back from the tensors, where normalised() computes it
    q: tuple[float, ...] | None = None
    # the row's identity: unique per recorded prediction of a memory (one prediction filed under
    # several keys is one Entry, one uid); what the compiled kernels compare where fusion
    # compares entries by identity (``recap.memory.rows``). -1: made by hand
    uid: int = -1

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


@dataclass(frozen=True)
class RequestInfo:
    """What the memory knows about a request that wrote into it (for provenance)."""

    image_key: str | None
    prompt: str


class TokenMemory:
    """M1: persistent 1-token memory, one top-k row per vocabulary token.

    Pass the same instance to successive ``recap.generate`` calls to keep it warm. Rows are read
    through ``lookup`` (one row) and ``entries`` (token -> ``Entry``; None: empty); written by ``record``.
    ``scoped`` holds the image-scoped M2 / M3 rows of this memory's requests (the session's:
    ``recap.memory.scoped``); ``clone`` copies them, ``save`` / ``load`` do not keep them (a
    loaded memory starts with none: they are conditioned on images the file does not hold).
    """

    def __init__(self, vocab_size: int, k: int = 8) -> None:
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        self.vocab_size = vocab_size
        self.k = k
        # The dense table (what is saved, and what the memory view shows). Per-row statistics
        # and provenance live in two packed tensors; the named properties are views of them.
        self._ids = torch.zeros(vocab_size, k, dtype=torch.int64)  # (V, k)
        self._probs = torch.zeros(vocab_size, k, dtype=torch.float32)  # (V, k)
        self._stats = torch.zeros(vocab_size, 2, dtype=torch.float32)  # (V, 2): entropy, concentration
        self._prov = torch.zeros(vocab_size, 3, dtype=torch.int32)  # (V, 3): request, step, depth
        self._prov[:, 0] = -1  # -1 = empty row
        # The compiled path's (``recap.memory.rows``): numpy views of the four tensors (its kernels
        # write them in place), each row's q, uid (-1: empty) and whether its Entry carries q.
        self._np = (self._ids.numpy(), self._probs.numpy(), self._stats.numpy(), self._prov.numpy())
        self._q = np.zeros((vocab_size, k), dtype=np.float64)
        self._uid = np.full(vocab_size, -1, dtype=np.int64)
        self._hasq = np.zeros(vocab_size, dtype=np.bool_)
        self._next_uid = 0  # the next prediction's uid
        self._kernel_writes = False  # the compiled path wrote rows: the row view is a cache
        self._unsynced: list[ContextMemory] = []  # M2 / M3 views the compiled path wrote behind
        self._context_tables: dict[str, tuple[ContextTable, ContextTable]] = {}  # per image scope
        self.requests: list[RequestInfo] = []
        self.calibration = Calibration()  # how often proposals are accepted: persists with the memory
        self.scoped: ScopedMemory[Entry] = ScopedMemory()  # M2 / M3 rows per image, across requests
        # The reference path works on Python objects: ``_entries`` is its row view (an Entry, or
        # None for an empty row); rows it wrote since the last flush are ``_dirty`` and reach the
        # tensors when someone reads them. On the compiled path the tensors are current and
        # ``_entries`` is a cache, checked against ``_uid`` (``lookup``, ``entries``).
        self._entries: dict[int, Entry | None] = {}
        self._dirty: set[int] = set()

    @property
    def entries(self) -> dict[int, Entry | None]:
        """The row view, current: token -> ``Entry`` (None: empty) of every row read or written."""
        if self._kernel_writes:
            flatwrite.sync_entries(self, Entry)
        return self._entries

    @entries.setter
    def entries(self, rows: dict[int, Entry | None]) -> None:
        self._entries = rows

    @property
    def scoped(self) -> ScopedMemory[Entry]:
        """The image scopes, their row dicts current (rows the compiled path wrote are filed first)."""
        if self._unsynced:
            flatwrite.sync_all(self, Entry)
        return self._scoped

    @scoped.setter
    def scoped(self, value: ScopedMemory[Entry]) -> None:
        self._scoped = value

    @classmethod
    def for_target(cls, target: object, k: int = 8) -> TokenMemory:
        """An empty memory sized for a target's vocabulary (a ``recap.Target``)."""
        return cls(int(target.vocab_size), k)  # type: ignore[attr-defined]

    def clone(self) -> TokenMemory:
        """An independent copy of everything a drafter reads: rows, provenance, requests, calibration.

        Entries are immutable and shared; every mutable container is copied, so writes to
        either memory never reach the other (the benchmark's repeats decode on clones).
        """
        self._flush()
        scoped = self.scoped.clone()  # first: files the rows the compiled path wrote behind the views
        out = type(self)(self.vocab_size, self.k)
        for name in ("_ids", "_probs", "_stats", "_prov"):
            getattr(out, name).copy_(getattr(self, name))
        out._q[:], out._uid[:], out._hasq[:], out._next_uid = self._q, self._uid, self._hasq, self._next_uid
        out._kernel_writes = self._kernel_writes
        out._context_tables = {key: (t2.copy(), t3.copy()) for key, (t2, t3) in self._context_tables.items()}
        out.requests = list(self.requests)
        out.calibration = self.calibration.clone()
        out.scoped = scoped
        out._entries = dict(self._entries)  # a cache on the compiled path, checked against _uid as here
        return out

    # ------------------------------------------------------------------ the dense table
    def _flush(self) -> None:
        """Write the rows the reference path changed since the last flush into the tensors (one batch)."""
        if self._dirty:
            refwrite.flush(self)

    def _table(self, name: str) -> torch.Tensor:
        self._flush()
        return getattr(self, name)

    # Read-only views of the dense table, current when read (they flush first). Rows are
    # written by ``RequestMemory.record``; an in-place edit of a view would bypass the row view.
    ids = property(lambda self: self._table("_ids"), doc="(V, k) int64 top-k token ids per row")
    probs = property(lambda self: self._table("_probs"), doc="(V, k) float32 their probabilities")
    entropy = property(lambda self: self._table("_stats")[:, 0], doc="(V,) float32 entropy (nats)")
    concentration = property(lambda self: self._table("_stats")[:, 1], doc="(V,) float32 1 - entropy / log k")
    request = property(lambda self: self._table("_prov")[:, 0],
                       doc="(V,) int32 request that wrote the row (-1: empty)")
    step = property(lambda self: self._table("_prov")[:, 1], doc="(V,) int32 decode step that wrote the row")
    depth = property(lambda self: self._table("_prov")[:, 2], doc="(V,) int32 tree depth of the writing node")

    # ------------------------------------------------------------------ requests
    def begin_request(self, image_key: str | None, prompt: str) -> int:
        """Register a new request; returns its number (used as provenance)."""
        self.requests.append(RequestInfo(image_key, prompt))
        return len(self.requests) - 1

    def request_info(self, request: int) -> RequestInfo | None:
        """The request numbered ``request`` (None for -1, "unknown", or a number never given)."""
        return self.requests[request] if 0 <= request < len(self.requests) else None

    # ------------------------------------------------------------------ access
    @property
    def filled(self) -> int:
        """Number of rows that hold a prediction."""
        return int((self.request >= 0).sum())

    def __len__(self) -> int:
        return self.filled

    def lookup(self, token: int) -> Entry | None:
        """The row of ``token``: its ``Entry``, or None when empty or outside the vocabulary.

        A row is read from the tensors once, then served from the row view (on the compiled
        path while its uid is the row's).
        """
        entry = self._entries.get(token, _UNREAD)
        if self._kernel_writes:
            self._flush()
            uid = int(self._uid[token]) if 0 <= token < self.vocab_size else -1
            if entry is _UNREAD or (-1 if entry is None else entry.uid) != uid:
                entry = self._entries[token] = self._read(token)
        elif entry is _UNREAD:
            entry = self._entries[token] = self._read(token)
        return entry

    def _read(self, token: int) -> Entry | None:
        # The tensors are current for this row: it is not dirty (the reference path's dirty rows
        # are in the row view; the compiled path flushed).
        ids, probs, stats, prov = self._np  # numpy views of the tensors: cheaper to index
        if not 0 <= token < self.vocab_size or prov[token, 0] < 0:
            return None
        h, c = stats[token].tolist()
        r, s, d = prov[token].tolist()
        q = tuple(self._q[token].tolist()) if self._hasq[token] else None
        return Entry(tuple(ids[token].tolist()), tuple(probs[token].tolist()), h, c, r, s, d, q, int(self._uid[token]))

    def reset(self) -> None:
        """Forget every row, every request and the calibration (an empty memory of the same size)."""
        self.__init__(self.vocab_size, self.k)  # type: ignore[misc]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write to ``path`` as safetensors (tensors + JSON metadata), atomically. Never pickle.

        Raises ``MemoryFileError`` for a memory too large to save (k over ``MAX_MEMORY_K``).
        """
        tensors = {name: getattr(self, name) for name in TABLES}
        tensors["calibration"] = self.calibration.counts
        requests = [(r.image_key, r.prompt) for r in self.requests]
        save_tables(MemoryTables(self.vocab_size, self.k, tensors, requests), path)

    @classmethod
    def load(cls, path: str | Path, *, vocab_size: int | None = None) -> TokenMemory:
        """Read a memory written by ``save``, checking every value first (``recap.memory.file``).

        A new memory, or ``MemoryFileError`` naming the file and the field; with
        ``vocab_size`` given, a memory made for another vocabulary is refused naming both sizes.
        """
        tables = load_tables(path, vocab_size=vocab_size)
        memory = cls(tables.vocab_size, tables.k)
        for name in TABLES:  # a fresh memory: its row view is empty, so the tables are all there is
            getattr(memory, name).copy_(tables.tensors[name])
        if "calibration" in tables.tensors:  # older files: calibration starts fresh
            memory.calibration.load_counts(tables.tensors["calibration"])
        memory.requests = [RequestInfo(image_key, prompt) for image_key, prompt in tables.requests]
        flatwrite.read_back(memory)  # the kernels' view of rows read back from the file
        return memory


class ContextMemory:
    """M2 / M3: request-local memory keyed by the last ``n`` tokens.

    ``rows`` maps a key (a tuple of ``n`` token ids) to its latest ``Entry``: drafters read
    it directly, ``RequestMemory.record`` writes it.
    """

    def __init__(self, n: int) -> None:
        if n < 2:
            raise ValueError(f"a contextual memory has keys of 2 or more tokens, got {n}")
        self.n = n
        self._rows: dict[tuple[int, ...], Entry] = {}
        self._table: ContextTable | None = None  # the compiled path's flat copy (the truth there),
        self._logged = False  # and whether M1 knows it wrote behind this view (``flatwrite.sync_all``)

    @property
    def rows(self) -> dict[tuple[int, ...], Entry]:
        """The row dict, current (keys the compiled path wrote since it was last read are filed first)."""
        if self._table is not None and self._table.meta[0]:
            flatwrite.sync_rows(self, Entry)
        return self._rows

    @rows.setter
    def rows(self, rows: dict[tuple[int, ...], Entry]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self.rows)


class RequestMemory:
    """The memories one request drafts from: the persistent M1 and fresh M2 / M3.

    Creating one registers the request with M1 (``request`` is its number, the provenance
    of every row it writes). ``record`` writes a batch of target predictions into all
    three; with ``use_context`` False (a drafter that keeps M1 only sets it) M2 / M3 stay
    empty. ``image_token_ids`` are never part of a key. With ``scoped`` (and an image and ``use_context``),
    M2 / M3 are the live rows of the image's ``scope`` for ``owner`` in ``token_memory.scoped``: they start
    with what that owner's earlier requests on the image wrote, and keep what this one writes.
    """

    def __init__(
        self,
        token_memory: TokenMemory,
        *,
        image_token_ids: Iterable[int] = (),
        image_key: str | None = None,
        prompt: str = "",
        use_context: bool = True,
        scoped: bool = False,
        owner: str | None = None,  # whose request (the scope's; ``recap.memory.scoped.scope_name``)
    ) -> None:
        self.m1 = token_memory
        self.m2, self.m3 = ContextMemory(2), ContextMemory(3)
        self.use_context = use_context
        self.image_token_ids = frozenset(int(t) for t in image_token_ids)
        self.image_key, self.scope = image_key, None if image_key is None else scope_name(image_key, owner)
        self.request = token_memory.begin_request(image_key, prompt)
        self.scoped = scoped and use_context and image_key is not None
        if self.scoped and self.scope is not None:  # never for a text-only request: no image, no scope
            self.m2.rows, self.m3.rows = token_memory.scoped.open(self.scope, self.request)
        self.fast = fastpath.enabled()  # the compiled path (``recap.memory.fastpath``), fixed for the request
        self._img = np.array(sorted(self.image_token_ids), dtype=np.int64)
        self._tables: tuple[ContextTable, ContextTable] | None = None
        if not self.fast:  # the reference path reads current views and writes behind the flat copies
            token_memory.entries  # noqa: B018 (files what the compiled path wrote)
            token_memory._context_tables.pop(self.scope, None)  # type: ignore[arg-type]

    @property
    def k(self) -> int:
        """Predictions per row (M1's ``k``)."""
        return self.m1.k

    def context_tables(self) -> tuple[ContextTable, ContextTable]:
        """M2 / M3 as flat tables (the compiled path's; ``recap.memory.flatwrite.context_tables``)."""
        if self._tables is None:
            self._tables = flatwrite.context_tables(self)
        return self._tables

    def record(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
        order: Sequence[int] | None = None,
    ) -> None:
        """Record N target predictions.

        keys[i] = (x_{t-2}, x_{t-1}, x_t) for prediction i (None where the context is
        shorter); top_ids / top_probs: (N, k) on the host. Rows are written in ``order``
        (default: 0..N-1), so later rows win: callers put the accepted path last.

        Cost: a handful of tensor ops over the (N, k) block, then one Python ``Entry`` per row
        (``refwrite``), or one kernel call (``record_block``).
        """
        if len(keys) == 0:
            return
        if self.fast:
            a, b, c = zip(*keys)
            self.record_block(as_keys(a), as_keys(b), as_keys(c), top_ids, top_probs, step=step, depths=depths,
                              order=None if order is None else np.asarray(order, dtype=np.int64))
            return
        refwrite.record(self, Entry, keys, top_ids, top_probs, step=step, depths=depths, order=order)

    def record_block(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, top_ids: torch.Tensor, top_probs: torch.Tensor,
                     *, step: int, depths: Sequence[int], order: np.ndarray | None = None) -> None:
        """``record`` on the compiled path, keys as (N,) int64 arrays (``rows.NONE``: no token): ``flatwrite``."""
        flatwrite.record_block(self, a, b, c, top_ids, top_probs, step=step, depths=depths, order=order)
