"""Prediction recycling: what the memory drafters (``tr``, ``recap``) share.

Both draft from the target's own earlier predictions. Every position the target evaluates
(each prompt token in the prefill, each tree node in a verification) yields its top-k
prediction, recorded under the keys (x_{t-2}, x_{t-1}, x_t) ending at that position's input
token: this module makes the per-request memory, turns a drafting kernel's output into a
``DraftTree`` and updates the memories, so the engine never knows the key scheme.

The prefill's rows are filed from the prompt's tokens (``record_prompt``); a verified tree, which
is always the one the drafter drafted last, by one kernel call from what its draft left
(``recap.drafting.update.update_tree``: keys, rows with the accepted path last, so that where two
nodes share a key the path's prediction wins, and RECAP's calibration samples).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from recap.drafting.protocol import DraftSetup, DraftState, Verification
from recap.drafting.search import DEP, FUSED, ORD, ORI, ORIGINS, PAR, POOL, SCORE, SUF, TOK, draft_buffers
from recap.drafting.tree import DraftTree, Source
from recap.drafting.update import plain_samples, plain_tree_rows, prompt_keys, update_tree
from recap.memory.fusion import KINDS, M3_BIT, PMASK
from recap.memory.rows import UID, Entry, Keys, predictions, unpack
from recap.memory.store import RequestMemory, TokenMemory


class SeqBuffer:
    """The request's tokens as an int64 array, for the kernels.

    Contract: the list a drafter is handed (the engine's ``state.seq``) is one request's and only
    grows by appends, so ``sync`` copies what it gained since the last call. Any other list (another
    object, or the same one shorter than what is held) is copied whole.
    """

    def __init__(self) -> None:
        self.array = np.empty(256, dtype=np.int64)
        self.n = 0
        self.source: Sequence[int] | None = None  # the list the array copies

    def sync(self, seq: Sequence[int]) -> tuple[np.ndarray, int]:
        m, n = len(seq), self.n
        if seq is not self.source or m < n:
            self.source, n = seq, 0
        if m > self.array.shape[0]:
            grown = np.empty(max(m, 2 * self.array.shape[0]), dtype=np.int64)
            grown[:n] = self.array[:n]
            self.array = grown
        if m > n:
            self.array[n:m] = seq[n:m]
        self.n = m
        return self.array, m


def record_prompt(
    memory: RequestMemory, seq: np.ndarray, n: int, top_ids: torch.Tensor, top_probs: torch.Tensor
) -> None:
    """The prefill's predictions, after each of seq[:n - 1] (every prompt token but the root)."""
    m = n - 1
    if m <= 0:
        return
    a, b, c = prompt_keys(seq, m)
    memory.file(Keys(a=a, b=b, c=c, order=np.arange(m, dtype=np.int64)),
                predictions(top_ids, top_probs, np.zeros(m, dtype=np.int64)), 0)


def drawn_mask(size: int, drawn: Sequence[int] | None) -> np.ndarray:
    """(size,) bool: the nodes whose pick is a sample (all under greedy; the walk under sampling)."""
    mask = np.full(size, drawn is None, dtype=np.bool_)
    if drawn is not None:
        mask[np.asarray(drawn, dtype=np.int64)] = True
    return mask


class DraftedTree(DraftTree):
    """A ``DraftTree`` from a drafting kernel, whose ``sources`` are built when first read, from the
    copy of the rows its fusions read (``recap.memory.fusion.snapshot``): a step nobody inspects
    builds no Entry."""

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
        rows, masks, weights, irow, frow, cache = self.__dict__.pop("_snapshot")
        made: list[tuple[Source, ...]] = []
        for j, (mask, w) in enumerate(zip(masks.tolist(), weights.tolist())):
            parts: list[Source] = []
            for src, kind in enumerate(KINDS):
                if mask & (M3_BIT >> src):
                    r = 3 * j + src
                    uid = int(irow[r, UID])
                    e = cache.get(uid)
                    if e is None:
                        e = cache[uid] = unpack(irow[r : r + 1], frow[r : r + 1])[0]
                    parts.append((kind, w[src], e))
            made.append(tuple(parts))
        made.append(())  # for the nodes no fusion proposed (pool row -1)
        return list(map(made.__getitem__, rows))


class RecyclingDrafter:
    """What the memory drafters share: their buffers, the tree of a draft, and ``update``.

    A subclass's ``draft`` runs its kernel into ``self.buffers`` and returns ``self.tree_of``.
    """

    needs_predictions = True

    def __init__(self, memory: RequestMemory, budget: int, nodes: int) -> None:
        self.memory = memory
        self.budget = budget
        self.seq = SeqBuffer()  # the request's tokens as an array
        self.buffers = draft_buffers(nodes, memory.k)
        self._entries: dict[int, Entry] = {}  # uid -> Entry, for the trees' sources (never changes)
        self.tree: DraftTree | None = None  # the last tree drafted (its rows still in the buffers)
        self.size = 0
        self.calibration = memory.m1.calibration

    def tree_of(self, size: int, npool: int) -> DraftTree:
        """The ``DraftedTree`` of the draft in the buffers: ``size`` nodes, ``npool`` fusions."""
        buf = self.buffers
        cols = buf.out_i[: POOL + 1, :size].tolist()  # the rows a tree is made of (its keys stay here)
        floats = buf.out_f[: FUSED + 1, :size].tolist()
        tree = DraftedTree.from_lists(
            cols[TOK], cols[PAR], depths=cols[DEP], scores=floats[SCORE], fused=floats[FUSED], sources=None,
            suffix=list(map(bool, cols[SUF])), origins=list(map(ORIGINS.__getitem__, cols[ORI])),
            order=cols[ORD],
        )
        tree.__dict__["_snapshot"] = (
            cols[POOL], buf.pool.ints[:npool, PMASK].copy(), buf.pool.weights[:npool].copy(),
            buf.snap_i[: 3 * npool].copy(), buf.snap_f[: 3 * npool].copy(), self._entries,
        )
        self.tree, self.size = tree, size
        return tree

    def calibrates(self) -> bool:
        """Whether a verification's samples are counted into the calibration (RECAP's, when on)."""
        return False

    def update(self, state: DraftState, verified: Verification) -> None:
        """The prefill's rows, or one kernel call for the tree its last ``draft`` returned (the only
        tree a drafter is handed back: ``recap.drafting.protocol``)."""
        top_ids, top_probs = verified.top_ids, verified.top_probs
        if top_ids is None or top_probs is None:
            raise ValueError("a recycling drafter needs the target's predictions (needs_predictions)")
        tree, memory = verified.tree, self.memory
        if tree is None:
            record_prompt(memory, *self.seq.sync(state.seq), top_ids, top_probs)
            return
        if tree is not self.tree:
            raise ValueError("a drafter learns from the tree its last draft() returned, not another")
        size, buf = self.size, self.buffers
        rows = predictions(top_ids, top_probs, buf.out_i[DEP, :size])
        samples = plain_samples(  # the records in plain form (``update_tree``)
            cells=self.calibration.cells, calibrate=self.calibrates(),
            path=np.array(verified.path, dtype=np.int64), picked=np.array(verified.picked, dtype=np.int64),
            drawn=drawn_mask(size, verified.drawn),
        )
        tree_rows = plain_tree_rows(out_i=buf.out_i, out_f=buf.out_f, size=size)
        writer = tuple(memory.writer(size, state.step))
        update_tree(tree_rows, samples, tuple(rows), writer, memory.arrays())


def persistent_memory(setup: DraftSetup) -> TokenMemory:
    """The caller's persistent M1, or a fresh one sized for the target; its k must be ``config.top_k``."""
    cfg = setup.config
    memory = setup.memory if setup.memory is not None else TokenMemory(setup.vocab_size, cfg.top_k)
    if memory.k != cfg.top_k:
        raise ValueError(f"the memory keeps top-{memory.k} rows but config.top_k is {cfg.top_k}")
    return memory


def request_memory(
    memory: TokenMemory, setup: DraftSetup, *, use_context: bool, scoped: bool = False
) -> RequestMemory:
    """This request's memories over ``memory`` (registers the request with it).

    ``use_context``: M2 / M3 are written (a drafter that keeps M1 only says no). ``scoped``: they are
    ``setup.scope``'s rows kept in ``memory.scoped`` for ``setup.owner`` (a drafter that reads them asks;
    nothing is scoped for a request without a scope).
    """
    return RequestMemory(
        memory, image_token_ids=setup.blocked, image_key=setup.image_key, scope=setup.scope,
        prompt=setup.prompt, use_context=use_context, scoped=scoped, owner=setup.owner,
    )
