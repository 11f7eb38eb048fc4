"""Prediction memories (DESIGN.md section 2).

At every position the target evaluates, its top-k next-token prediction is recorded
under keys ending at that position's input token:

* ``TokenMemory`` (M1): key ``(x_t)``; persistent across requests, one top-k row per
  vocabulary token (like Token Recycling's adjacency matrix). Rows are immutable
  ``Entry`` objects in a dict (what drafting reads and ``record`` writes); the dense
  ``(V, k)`` tensors behind them catch up when read (saving, the app's memory view).
  Saved to / loaded from safetensors (``recap.memory.file``).
* ``ContextMemory`` (M2, M3): keys ``(x_{t-1}, x_t)`` and ``(x_{t-2}, x_{t-1}, x_t)``;
  request-local hash maps, created empty for every request, so they are implicitly
  conditioned on that request's image.
* ``RequestMemory`` bundles the three for one request: what drafters read, and what
  ``record`` writes a batch of the target's predictions into.

Rules: latest write wins; image placeholder tokens are never part of a key (a position
whose input is one is not recorded; a key that would reach back into one is dropped);
every entry keeps its provenance (request number, decode step, tree depth).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

import torch

from recap.memory.calibration import Calibration
from recap.memory.file import TABLES, MemoryTables, load_tables, save_tables

__all__ = [
    "ContextMemory",
    "Entry",
    "RequestInfo",
    "RequestMemory",
    "TokenMemory",
]

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

    def normalised(self) -> tuple[float, ...]:
        """probs renormalised to sum to 1 over the k tokens."""
        if self.q is not None:
            return self.q
        mass = sum(self.probs) or 1.0
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

    Pass the same instance to successive ``recap.generate`` calls to keep it warm. Drafters
    read rows through ``entries`` (the row view: token -> ``Entry``, or None for an empty
    row; a token not in it is unread) and ``lookup``; ``RequestMemory.record`` writes them.
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
        self.requests: list[RequestInfo] = []
        self.calibration = Calibration()  # how often proposals are accepted: persists with the memory
        # The hot path works on Python objects: drafting reads a few dozen rows per step and
        # every step writes one row per tree node, which as tensor ops costs more than the
        # verification of a small model. ``entries`` is the row view drafting reads (an
        # Entry, or None for an empty row); rows written since the last flush are ``_dirty``
        # and reach the tensors only when someone reads them (save, the memory view). Only
        # RequestMemory.record, below, writes either.
        self.entries: dict[int, Entry | None] = {}
        self._dirty: set[int] = set()

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
        out = type(self)(self.vocab_size, self.k)
        for name in ("_ids", "_probs", "_stats", "_prov"):
            getattr(out, name).copy_(getattr(self, name))
        out.requests = list(self.requests)
        out.calibration = self.calibration.clone()
        out.entries = dict(self.entries)
        return out

    # ------------------------------------------------------------------ the dense table
    def _flush(self) -> None:
        """Write the rows changed since the last flush into the tensors (one batch)."""
        if not self._dirty:
            return
        keys = sorted(self._dirty)
        rows = [self.entries[key] for key in keys]
        idx = torch.tensor(keys, dtype=torch.int64)
        self._ids[idx] = torch.tensor([e.ids for e in rows], dtype=torch.int64)  # type: ignore[union-attr]
        self._probs[idx] = torch.tensor([e.probs for e in rows], dtype=torch.float32)  # type: ignore[union-attr]
        self._stats[idx] = torch.tensor([(e.entropy, e.concentration) for e in rows], dtype=torch.float32)  # type: ignore[union-attr]
        self._prov[idx] = torch.tensor([(e.request, e.step, e.depth) for e in rows], dtype=torch.int32)  # type: ignore[union-attr]
        self._dirty.clear()

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

        A row is read from the tensors once, then served from the row view ``entries``.
        """
        try:
            return self.entries[token]
        except KeyError:
            pass
        entry = self._read(token)
        self.entries[token] = entry
        return entry

    def _read(self, token: int) -> Entry | None:
        # Only rows absent from the row view get here, and a dirty row is always in it:
        # the tensors are current for this row.
        if not 0 <= token < self.vocab_size or int(self._prov[token, 0]) < 0:
            return None
        probs = tuple(self._probs[token].tolist())
        stats = self._stats[token].tolist()
        prov = self._prov[token].tolist()
        return Entry(tuple(self._ids[token].tolist()), probs, stats[0], stats[1], prov[0], prov[1], prov[2])

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
        self.rows: dict[tuple[int, ...], Entry] = {}

    def __len__(self) -> int:
        return len(self.rows)


class RequestMemory:
    """The memories one request drafts from: the persistent M1 and fresh M2 / M3.

    Creating one registers the request with M1 (``request`` is its number, the provenance
    of every row it writes). ``record`` writes a batch of target predictions into all
    three; with ``use_context`` False (a drafter that keeps M1 only sets it) M2 / M3 stay
    empty. ``image_token_ids`` are never part of a key.
    """

    def __init__(
        self,
        token_memory: TokenMemory,
        *,
        image_token_ids: Iterable[int] = (),
        image_key: str | None = None,
        prompt: str = "",
        use_context: bool = True,
    ) -> None:
        self.m1 = token_memory
        self.m2 = ContextMemory(2)
        self.m3 = ContextMemory(3)
        self.use_context = use_context
        self.image_token_ids = frozenset(int(t) for t in image_token_ids)
        self.image_key = image_key
        self.request = token_memory.begin_request(image_key, prompt)

    @property
    def k(self) -> int:
        """Predictions per row (M1's ``k``)."""
        return self.m1.k

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

        Cost: a handful of tensor ops over the whole (N, k) block, then plain Python per
        row (one shared ``Entry`` per prediction; M1's tensors are updated lazily).
        """
        if len(keys) == 0:
            return
        k = top_probs.shape[-1]
        probs = top_probs.float()
        q = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)  # (N, k) renormalised over k
        h = torch.special.entr(q).sum(-1)  # (N,)
        conc = (1.0 - h / math.log(k)).clamp_(0.0, 1.0) if k > 1 else torch.ones_like(h)
        n = len(keys)
        # One Entry per prediction, built by C-level maps (Entry is a NamedTuple: tuple.__new__
        # skips its Python-level __new__); the loop below only files them.
        entries = list(map(
            tuple.__new__,
            repeat(Entry, n),
            zip(
                map(tuple, top_ids.tolist()), map(tuple, probs.tolist()), h.tolist(), conc.tolist(),
                repeat(self.request, n), repeat(step, n), depths, map(tuple, q.tolist()),
            ),
        ))
        img = self.image_token_ids
        m1_rows, m1_dirty = self.m1.entries, self.m1._dirty
        rows2, rows3 = self.m2.rows, self.m3.rows
        context = self.use_context
        for i in range(n) if order is None else order:
            a, b, c = keys[i]
            if c in img:
                continue
            e = entries[i]
            m1_rows[c] = e
            m1_dirty.add(c)
            if context and b is not None and b not in img:
                rows2[(b, c)] = e
                if a is not None and a not in img:
                    rows3[(a, b, c)] = e
