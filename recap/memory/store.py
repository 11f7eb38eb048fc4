"""Prediction memories (DESIGN.md section 2), stored as flat arrays (``recap.memory.rows``).

At every position the target evaluates, its top-k next-token prediction is recorded under keys
ending at that position's input token: in ``TokenMemory`` (M1) under ``(x_t)``, persistent across
requests; in ``ContextMemory`` (M2, M3; ``recap.memory.context``) under ``(x_{t-1}, x_t)`` and
``(x_{t-2}, x_{t-1}, x_t)``, request-local (or image-scoped: ``recap.memory.scoped``), so implicitly
conditioned on that request's image. ``RequestMemory`` bundles the three for one request.

Rules: latest write wins; image placeholder tokens are never part of a key (a position
whose input is one is not recorded; a key that would reach back into one is dropped);
every entry keeps its provenance (request number, decode step, tree depth).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recap.memory.calibration import Calibration
from recap.memory.context import ContextMemory
from recap.memory.file import TABLES, MemoryTables, load_tables, save_tables
from recap.memory.rows import Entry, Keys, M1Rows, Predictions, Writer, plain_memory, read_back_q, record_rows
from recap.memory.scoped import ScopedMemory, scope_name

__all__ = ["ContextMemory", "Entry", "RequestInfo", "RequestMemory", "TokenMemory"]


@dataclass(frozen=True)
class RequestInfo:
    """What the memory knows about a request that wrote into it (for provenance)."""

    image_key: str | None
    prompt: str


def _view(array: str, column: int | None = None, doc: str = "") -> property:
    """A read-only torch view of one of M1's arrays (or of one column of it)."""
    if column is None:
        return property(lambda self: torch.from_numpy(getattr(self.table, array)), doc=doc)
    return property(lambda self: torch.from_numpy(getattr(self.table, array))[:, column], doc=doc)


class TokenMemory:
    """M1: persistent 1-token memory, one top-k row per vocabulary token.

    Pass the same instance to successive ``recap.generate`` calls to keep it warm. ``table``
    holds the rows (``recap.memory.rows.M1Rows``: what the kernels read and write); ``ids``,
    ``probs`` ... are torch views of it, ``lookup`` (one row) and ``entries`` (every filled row)
    build ``Entry`` views. ``scoped`` holds the image-scoped M2 / M3 rows of this memory's
    requests (``recap.memory.scoped``); ``clone`` copies them, ``save`` / ``load`` do not keep
    them (a loaded memory starts with none: they are conditioned on images the file does not hold),
    nor ``size_loop_state`` (where the size loop left this memory's trees: a measure of this machine).
    """

    def __init__(self, vocab_size: int, k: int = 8) -> None:
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        self.vocab_size, self.k, v = vocab_size, k, vocab_size
        self.table = M1Rows(
            ids=np.zeros((v, k), dtype=np.int64), probs=np.zeros((v, k), dtype=np.float32),
            stats=np.zeros((v, 2), dtype=np.float32), prov=np.zeros((v, 3), dtype=np.int32),
            q=np.zeros((v, k), dtype=np.float64), uid=np.zeros(v, dtype=np.int64),
        )
        self.scoped = ScopedMemory(k)  # M2 / M3 rows per image, across requests
        self.reset()

    def reset(self) -> None:
        """Forget every row, every request, the calibration and the image scopes."""
        t = self.table
        for array in (t.ids, t.probs, t.stats, t.prov, t.q):
            array.fill(0)
        t.prov[:, 0] = -1  # -1 = empty row
        t.uid.fill(-1)
        self.next_uid = 0  # the next recorded prediction's uid
        self.requests: list[RequestInfo] = []
        self.calibration = Calibration()  # how often proposals are accepted: persists with the memory
        # where the size loop (``recap.engine.controller``) left this memory's last decode, per (model,
        # device, dtype, context bucket): (node limit, probe wait, passes idle); how well its trees earn
        # is the memory's to keep
        self.size_loop_state: dict[tuple[str, str, str, int], tuple[int, int, int]] = {}
        self.scoped.clear()

    @classmethod
    def for_target(cls, target: object, k: int = 8) -> TokenMemory:
        """An empty memory sized for a target's vocabulary (a ``recap.Target``)."""
        return cls(int(target.vocab_size), k)  # type: ignore[attr-defined]

    def clone(self) -> TokenMemory:
        """An independent copy of everything a drafter reads: rows, provenance, requests, calibration,
        image scopes (the benchmark's repeats decode on clones)."""
        out = type(self)(self.vocab_size, self.k)
        for mine, theirs in zip(self.table, out.table):
            np.copyto(theirs, mine)
        out.next_uid = self.next_uid
        out.requests = list(self.requests)
        out.calibration = self.calibration.clone()
        out.size_loop_state = dict(self.size_loop_state)
        out.scoped = self.scoped.clone()
        return out

    # Read-only views of the dense table (rows are written by ``RequestMemory.file``).
    ids = _view("ids", doc="(V, k) int64 top-k token ids per row")
    probs = _view("probs", doc="(V, k) float32 their probabilities")
    entropy = _view("stats", 0, doc="(V,) float32 entropy (nats)")
    concentration = _view("stats", 1, doc="(V,) float32 1 - entropy / log k")
    request = _view("prov", 0, doc="(V,) int32 request that wrote the row (-1: empty)")
    step = _view("prov", 1, doc="(V,) int32 decode step that wrote the row")
    depth = _view("prov", 2, doc="(V,) int32 tree depth of the writing node")

    # ------------------------------------------------------------------ requests
    def request_info(self, request: int) -> RequestInfo | None:
        """The request numbered ``request`` (None for -1, "unknown", or a number never given)."""
        return self.requests[request] if 0 <= request < len(self.requests) else None

    # ------------------------------------------------------------------ access
    @property
    def filled(self) -> int:
        """Number of rows that hold a prediction."""
        return int((self.table.prov[:, 0] >= 0).sum())

    def __len__(self) -> int:
        return self.filled

    def lookup(self, token: int) -> Entry | None:
        """The row of ``token`` as an ``Entry`` (built now), or None when empty or outside the vocabulary."""
        t = self.table
        if not 0 <= token < self.vocab_size or t.prov[token, 0] < 0:
            return None
        h, c = t.stats[token].tolist()
        r, s, d = t.prov[token].tolist()
        return Entry(
            ids=tuple(t.ids[token].tolist()), probs=tuple(t.probs[token].tolist()), entropy=h,
            concentration=c, request=r, step=s, depth=d, q=tuple(t.q[token].tolist()), uid=int(t.uid[token]),
        )

    def entries(self) -> dict[int, Entry]:
        """Every filled row: token -> its ``Entry`` (built now), tokens ascending."""
        return {tok: self.lookup(tok) for tok in np.flatnonzero(self.table.prov[:, 0] >= 0).tolist()}  # type: ignore[misc]

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
        for name in TABLES:
            getattr(memory, name).copy_(tables.tensors[name])
        if "calibration" in tables.tensors:  # (3, BINS, 2), checked by load_tables; older files: starts fresh
            memory.calibration.cells = tables.tensors["calibration"].to(torch.float64).numpy().copy()
        memory.requests = [RequestInfo(image_key, prompt) for image_key, prompt in tables.requests]
        t = memory.table  # each row's q as Entry.normalised() gives it, a fresh uid per filled row
        filled = np.flatnonzero(t.prov[:, 0] >= 0)
        t.q[:] = read_back_q(t.probs)
        t.uid[filled] = np.arange(filled.size)
        memory.next_uid = int(filled.size)
        return memory


class RequestMemory:
    """The memories one request drafts from: the persistent M1 and fresh M2 / M3.

    Creating one registers the request with M1 (``request`` is its number, the provenance
    of every row it writes). ``file`` writes a block of target predictions into all
    three; with ``use_context`` False (made so for a drafter that keeps M1 only) M2 / M3 stay
    empty. ``image_token_ids`` are never part of a key. ``image_key`` (the request's images' fingerprint,
    None: text only) is the provenance M1 records; ``scope`` is where its image-scoped rows are filed
    (its images' fingerprint, or a conversation's key). With ``scoped`` (and a ``scope`` and ``use_context``),
    M2 / M3 are the live rows of ``scope`` for ``owner`` in ``token_memory.scoped``: they start with what
    that owner's earlier requests in the scope wrote, and keep what this one writes.
    """

    def __init__(
        self, token_memory: TokenMemory, *, image_token_ids: Iterable[int] = (), image_key: str | None = None,
        scope: str | None = None, prompt: str = "", use_context: bool = True, scoped: bool = False,
        owner: str | None = None,  # whose request (the scope's; ``recap.memory.scoped.scope_name``)
    ) -> None:
        self.m1 = token_memory
        self.use_context = use_context
        self.image_token_ids = frozenset(int(t) for t in image_token_ids)
        self.img = np.array(sorted(self.image_token_ids), dtype=np.int64)  # the kernels' copy
        self.image_key, self.scope = image_key, None if scope is None else scope_name(scope, owner)
        token_memory.requests.append(RequestInfo(image_key, prompt))  # registered: its number is provenance
        self.request = len(token_memory.requests) - 1
        self.scoped = scoped and use_context and scope is not None
        if self.scoped and self.scope is not None:  # never without a scope
            self.m2, self.m3 = token_memory.scoped.open(self.scope, self.request)
        else:
            self.m2, self.m3 = ContextMemory(2, token_memory.k), ContextMemory(3, token_memory.k)

    @property
    def k(self) -> int:
        """Predictions per row (M1's ``k``)."""
        return self.m1.k

    def arrays(self) -> tuple:
        """M1, M2 and M3 as a kernel call takes them: a ``MemoryArrays`` in plain form (current: a
        table that grew has new arrays)."""
        return plain_memory(m1=self.m1.table, t2=self.m2.arrays, t3=self.m3.arrays)

    def writer(self, n: int, step: int) -> Writer:
        """Who files the next ``n`` predictions (at decode ``step``): takes their uids and makes room."""
        if self.use_context:
            self.m2.reserve(n)
            self.m3.reserve(n)
        uid0 = self.m1.next_uid  # the uids of the next ``n`` recorded predictions: taken
        self.m1.next_uid = uid0 + n
        return Writer(img=self.img, vocab=self.m1.vocab_size, request=self.request, step=step, uid0=uid0,
                      context=self.use_context)

    def file(self, keys: Keys, rows: Predictions, step: int) -> None:
        """File a block of target predictions at decode ``step`` (``Keys``: ``rows.NONE`` where a key
        has no token; rows written in ``keys.order``, so later rows win): one kernel call."""
        writer = self.writer(rows.ids.shape[0], step)
        record_rows(tuple(keys), tuple(rows), tuple(writer), self.arrays())
