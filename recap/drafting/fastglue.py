"""The memory drafters on the compiled kernels: one call to draft, one to update, per step.

Where a request's memory is on the compiled path (``RequestMemory.fast``, ``recap.memory.fastpath``),
``RecapDrafter`` drafts through ``FlatRecap`` (``recap.drafting.fastdraft.draft_tree`` over the
flat tables) and ``TRDrafter`` through ``FlatTR`` (``recap.drafting.fasttr.tr_fill``); each
updates the tree it drafted with one ``recap.drafting.fastupdate.update_tree`` call (its rows,
the accepted path last, and RECAP's calibration samples), and the prefill's rows, or a tree the
drafter did not make, go through ``record_prompt`` / ``record_tree`` (``RequestMemory.record_block``).
What comes out is what the reference path makes: the same ``DraftTree`` (its ``sources`` the
same Entries, by value, as the reference's ``Fused.sources``) and the same rows.

Per step, the Python here is a constant handful of operations plus C-level maps over the
nodes: the kernels' outputs become the tree's lists by one ``tolist`` per array, the tree's
``sources`` are made only when read (``FlatTree``: the trace reads them, the benchmark does not)
from a copy of the rows its fusions read, and the update passes arrays through. ``warm`` runs
every kernel once when this module is imported.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from recap.core.config import RecapConfig
from recap.drafting.fastdraft import (
    DEP,
    FUSED,
    NF,
    NI,
    ORD,
    ORI,
    ORIGINS,
    PAR,
    POOL,
    SCORE,
    STOPS,
    SUF,
    TOK,
    draft_tree,
)
from recap.drafting.fasttr import tr_fill
from recap.drafting.fastupdate import path_last, tree_keys, update_tree
from recap.drafting.tree import DraftTree, Source
from recap.drafting.treecost import PassCost
from recap.memory import fastpath
from recap.memory.flatfuse import MODES, NPF, NPI, PMASK
from recap.memory.flatwrite import NO_TABLES, block
from recap.memory.rows import NONE, unpack
from recap.memory.store import Entry, RequestMemory, TokenMemory

#: ``suffix_continuation``'s longest match (its default, what RECAP uses)
SUFFIX_MAX_LEN = 8


class SeqBuffer:
    """The request's tokens as an int64 array, grown by what ``state.seq`` gained since the last call."""

    def __init__(self) -> None:
        self.array = np.empty(256, dtype=np.int64)
        self.n = 0

    def sync(self, seq: Sequence[int]) -> tuple[np.ndarray, int]:
        m, n = len(seq), self.n
        if m < n or (n and self.array[n - 1] != seq[n - 1]):  # not a continuation of what it holds
            n = 0
        if m > self.array.shape[0]:
            grown = np.empty(max(m, 2 * self.array.shape[0]), dtype=np.int64)
            grown[:n] = self.array[:n]
            self.array = grown
        if m > n:
            self.array[n:m] = seq[n:m]
        self.n = m
        return self.array, m


def record_prompt(memory: RequestMemory, seq: np.ndarray, n: int, top_ids: torch.Tensor, top_probs: torch.Tensor) -> None:
    """The prefill's predictions, after each of seq[:n - 1] (``recycling.prompt_keys``)."""
    m = n - 1
    if m <= 0:
        return
    a = np.full(m, NONE, dtype=np.int64)
    b = np.full(m, NONE, dtype=np.int64)
    if m > 2:
        a[2:] = seq[: m - 2]
    if m > 1:
        b[1:] = seq[: m - 1]
    memory.record_block(a, b, seq[:m].copy(), top_ids, top_probs, step=0, depths=np.zeros(m, dtype=np.int64))


def record_tree(memory: RequestMemory, tree: DraftTree, seq: np.ndarray, n: int, path: Sequence[int], step: int,
                top_ids: torch.Tensor, top_probs: torch.Tensor) -> None:
    """A verified tree's predictions (``recycling.node_keys``), the accepted path written last."""
    tokens = np.array(tree.tokens, dtype=np.int64)
    size = tokens.shape[0]
    a, b, c = (np.empty(size, dtype=np.int64) for _ in range(3))
    tree_keys(tokens, np.array(tree.parents, dtype=np.int64), seq[n - 3] if n >= 3 else NONE,
              seq[n - 2] if n >= 2 else NONE, a, b, c)
    memory.record_block(a, b, c, top_ids, top_probs, step=step, depths=tree.depths,
                        order=path_last(size, np.array(path, dtype=np.int64)))


class FlatTree(DraftTree):
    """A ``DraftTree`` whose ``sources`` are made when first read, from a snapshot of the rows its
    fusions read (``fastdraft.snapshot``, taken by the draft), so a step nobody inspects makes no Entry."""

    @property  # type: ignore[override]
    def sources(self) -> list[tuple[Source, ...]]:
        made = self.__dict__.get("_sources")
        if made is None:
            made = self.__dict__["_sources"] = self._make_sources()
        return made  # type: ignore[no-any-return]

    @sources.setter
    def sources(self, value: list[tuple[Source, ...]] | None) -> None:
        self.__dict__["_sources"] = value

    def _make_sources(self) -> list[tuple[Source, ...]]:
        pool, masks, weights, irow, frow, cache = self.__dict__.pop("_snapshot")
        made: list[tuple[Source, ...]] = []
        for j, (mask, w) in enumerate(zip(masks.tolist(), weights.tolist())):
            parts: list[Source] = []
            for slot, kind in enumerate(KINDS):
                if mask & (4 >> slot):
                    r = 3 * j + slot
                    uid = int(irow[r, 0])
                    e = cache.get(uid)
                    if e is None:
                        e = cache[uid] = unpack(Entry, irow[r: r + 1], frow[r: r + 1])[0]
                    parts.append((kind, w[slot], e))
            made.append(tuple(parts))
        made.append(())  # for the nodes no fusion proposed (pool row -1)
        return list(map(made.__getitem__, pool))


KINDS = ("m3", "m2", "m1")


def flat_tree(out_i: np.ndarray, out_f: np.ndarray, size: int, pool_i: np.ndarray, pool_f: np.ndarray,
              npool: int, snap_i: np.ndarray, snap_f: np.ndarray, cache: dict[int, Entry], *,
              template: bool) -> FlatTree:
    """The ``FlatTree`` of a compiled draft: ``size`` nodes in out_i / out_f, ``npool`` fusions, the
    rows they read in snap_i / snap_f (copied: the buffers serve the next draft). ``template``: a
    Token Recycling tree (in the order its nodes were added, no suffix chain, every node from M1);
    else RECAP's, laid out in ``reordered()``'s order."""
    cols = out_i[: POOL + 1, :size].tolist()  # the rows a tree is made of (its keys stay here for the update)
    floats = out_f[: FUSED + 1, :size].tolist()
    if template:
        suffix, origins = [False] * size, ["root"] + ["m1"] * (size - 1)
    else:
        suffix, origins = list(map(bool, cols[SUF])), list(map(ORIGINS.__getitem__, cols[ORI]))
    tree = FlatTree.from_lists(
        cols[TOK], cols[PAR], cols[DEP], floats[SCORE], floats[FUSED], None, suffix, origins,  # type: ignore[arg-type]
        cols[ORD], in_order=not template,
    )
    tree.__dict__["_snapshot"] = (cols[POOL], pool_i[:npool, PMASK].copy(), pool_f[:npool].copy(),
                                  snap_i[: 3 * npool].copy(), snap_f[: 3 * npool].copy(), cache)
    return tree  # type: ignore[return-value]


class FlatTR:
    """Token Recycling's draft and update for one request on the kernels (what ``TRDrafter`` delegates to)."""

    def __init__(self, memory: RequestMemory, template: Sequence[tuple[int, int]]) -> None:
        self.memory = memory
        self.t_parent = np.array([p for p, _ in template], dtype=np.int64)
        self.t_rank = np.array([r for _, r in template], dtype=np.int64)
        cap = len(template) + 1
        self.out_i = np.empty((NI, cap), dtype=np.int64)
        self.out_f = np.empty((NF, cap), dtype=np.float64)
        self.pool_i = np.zeros((cap, NPI), dtype=np.int64)
        self.pool_f = np.empty((cap, NPF), dtype=np.float64)
        k = memory.k
        self.snap_i = np.empty((3 * cap, k + 5), dtype=np.int64)
        self.snap_f = np.empty((3 * cap, 2 * k + 2), dtype=np.float64)
        self._entries: dict[int, Entry] = {}
        self.tree: DraftTree | None = None  # the last tree drafted (its keys in out_i)
        self.size = 0

    def draft(self, seq: np.ndarray, n: int) -> DraftTree:
        """The template filled below seq[n - 1] (``TRDrafter.draft``)."""
        m1 = self.memory.m1
        m1._flush()
        size, npool = tr_fill(seq[n - 3] if n >= 3 else NONE, seq[n - 2] if n >= 2 else NONE, seq[n - 1],
                              self.t_parent, self.t_rank, *m1._np, m1._q, m1._uid, m1._hasq, self.out_i, self.out_f,
                              self.pool_i, self.pool_f, self.snap_i, self.snap_f)
        tree = flat_tree(self.out_i, self.out_f, size, self.pool_i, self.pool_f, npool, self.snap_i, self.snap_f,
                         self._entries, template=True)
        self.tree, self.size = tree, size
        return tree

    def update(self, path: Sequence[int], picked: Sequence[int], step: int, top_ids: torch.Tensor,
               top_probs: torch.Tensor) -> None:
        """Record the rows of the tree drafted last, the accepted path last: one kernel call
        (``picked`` is unread: Token Recycling keeps no calibration)."""
        update_flat(self.memory, self.out_i, self.out_f, self.size, path, [], None, step, top_ids, top_probs)


def update_flat(memory: RequestMemory, out_i: np.ndarray, out_f: np.ndarray, size: int, path: Sequence[int],
                picked: Sequence[int], calibration: np.ndarray | None, step: int, top_ids: torch.Tensor,
                top_probs: torch.Tensor) -> None:
    """``fastupdate.update_tree`` for a compiled draft's tree (its keys in out_i): its rows, then
    with a ``calibration`` table (Calibration.cells) its samples."""
    args, (t2, t3) = block(memory, top_ids, top_probs)
    ids, probs, q, h, uid0, *rest = args
    calibrate = calibration is not None
    new2, new3 = update_tree(
        out_i, out_f, size, np.array(path, dtype=np.int64), np.array(picked if calibrate else path, dtype=np.int64),
        calibration if calibrate else _NO_CALIBRATION, calibrate, memory._img, memory.m1.vocab_size, ids, probs, q, h,
        memory.request, step, uid0, *rest,
    )
    t2.count += new2
    t3.count += new3


_NO_CALIBRATION = np.zeros((3, 10, 2), dtype=np.float64)  # a stand-in, never written (calibrate off)


class FlatRecap:
    """RECAP's draft and update for one request on the kernels (what ``RecapDrafter`` delegates to)."""

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int, cost: PassCost | None,
                 use_m2: bool, use_m3: bool, suffix_prior: float) -> None:
        self.memory = memory
        self.calibration = memory.m1.calibration
        cap, k = budget + 1, memory.k
        self.out_i = np.empty((NI, cap), dtype=np.int64)
        self.out_f = np.empty((NF, cap), dtype=np.float64)
        self.pool_i = np.empty((cap, NPI), dtype=np.int64)
        self.pool_f = np.empty((cap, NPF), dtype=np.float64)
        self.pool_tok = np.empty((cap, 3 * k), dtype=np.int64)
        self.pool_p = np.empty((cap, 3 * k), dtype=np.float64)
        self.snap_i = np.empty((3 * cap, k + 5), dtype=np.int64)
        self.snap_f = np.empty((3 * cap, 2 * k + 2), dtype=np.float64)
        cfg = config
        self.ip = np.array([
            budget, cfg.max_depth, cfg.max_children, use_m2, use_m3, MODES.index(cfg.fusion), cfg.calibrate,
            cfg.suffix, cfg.suffix_min_len, SUFFIX_MAX_LEN, cfg.suffix_max_tokens, cost is not None,
        ], dtype=np.int64)
        self.fp = np.array([cfg.depth_discount, cfg.eps, *cfg.specificity, self.calibration.prior, suffix_prior],
                           dtype=np.float64)
        none = np.zeros(1, dtype=np.float64)
        self.seconds = np.array(cost.seconds, dtype=np.float64) if cost is not None else none
        self.marginal = np.array(cost.marginal, dtype=np.float64) if cost is not None else none
        self.calibrate = cfg.calibrate
        self._entries: dict[int, Entry] = {}  # uid -> Entry, for the trees' sources (rows never change)
        self.tree: DraftTree | None = None  # the last tree drafted (its rows in out_i / out_f)
        self.size = 0
        self.last_stop = ""

    def draft(self, seq: np.ndarray, n: int) -> DraftTree:
        """The tree below seq[n - 1] (``RecapDrafter.draft``)."""
        memory = self.memory
        m1 = memory.m1
        m1._flush()  # rows a reference-path request left unflushed (none on this path)
        t2, t3 = memory.context_tables() if memory.use_context else NO_TABLES
        size, why, npool = draft_tree(
            seq, n, memory._img, *m1._np, m1._q, m1._uid, m1._hasq, *t2.rows(), *t3.rows(),
            self.calibration.cells, self.ip, self.fp, self.seconds, self.marginal,
            self.out_i, self.out_f, self.pool_i, self.pool_f, self.pool_tok, self.pool_p, self.snap_i, self.snap_f,
        )
        self.last_stop = STOPS[why]
        tree = flat_tree(self.out_i, self.out_f, size, self.pool_i, self.pool_f, npool, self.snap_i, self.snap_f,
                         self._entries, template=False)
        self.tree, self.size = tree, size
        return tree

    def update(self, path: Sequence[int], picked: Sequence[int], step: int, top_ids: torch.Tensor,
               top_probs: torch.Tensor) -> None:
        """Record the rows of the tree drafted last (its keys from the draft) and count its
        calibration samples (``RecapDrafter.learn``): one kernel call (``fastupdate.update_tree``)."""
        update_flat(self.memory, self.out_i, self.out_f, self.size, path, picked,
                    self.calibration.cells if self.calibrate else None, step, top_ids, top_probs)

def warm() -> None:
    """Run every kernel once on a tiny memory, through the production code, so that numba compiles
    (first run on a machine) or loads (from its cache) each now: where the engine is imported,
    i.e. when a model is loaded, not at a visitor's first step. A no-op without the kernels."""
    if not fastpath.enabled():
        return
    memory = TokenMemory(8, 2)
    for scoped in (False, True):
        req = RequestMemory(memory, image_token_ids=[7], image_key="warm", scoped=scoped)
        seq = SeqBuffer()
        arr, n = seq.sync([1, 2, 3, 1, 2])
        probs = torch.tensor([[0.6, 0.4]] * 4)
        record_prompt(req, arr, n, torch.tensor([[2, 3], [3, 1], [1, 2], [2, 3]]), probs)
        flat = FlatRecap(req, RecapConfig(budget=4, top_k=2), 4, PassCost.from_fit((1e-3, 1e-5, 0.0), 4), True, True,
                         0.5)
        tree = flat.draft(arr, n)
        size = len(tree)
        flat.update([0], [0] * size, 1, torch.zeros(size, 2, dtype=torch.int64), torch.full((size, 2), 0.5))
        record_tree(req, tree, arr, n, [0], 2, torch.zeros(size, 2, dtype=torch.int64), torch.full((size, 2), 0.5))
        tr = FlatTR(req, [(0, 0), (1, 1)])
        tr_tree = tr.draft(arr, n)
        tr_tree.sources  # noqa: B018
        tr.update([0], [], 3, torch.zeros(len(tr_tree), 2, dtype=torch.int64), torch.full((len(tr_tree), 2), 0.5))
        req.m2.rows  # noqa: B018  (the views filled from the tables)
    memory.scoped.clear()
    memory.entries  # noqa: B018


warm()
