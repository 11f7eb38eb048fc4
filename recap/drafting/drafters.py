"""Drafters: who proposes the candidate tree (DESIGN.md section 6).

Every method runs in the same engine; only the drafter differs. A drafter has two
methods (the contract the engine relies on):

    draft(seq)                           -> DraftTree   root = seq[-1]
    observe(keys, top_ids, top_probs, step=, depths=, order=, verified=)
                                         record target predictions in ``order`` (and,
                                         after a verification, the tree and the target's
                                         argmax)

``seq`` is the request's token sequence so far (prompt and generated), ending with
the root token: the last accepted token, not yet
fed to the target. Drafters that keep no memory ignore ``observe``; the engine asks
``needs_predictions`` before paying for the top-k.

    ar     no draft: the root alone, one token per step
    pld    prompt lookup: the tokens after the latest n-gram match, one chain
    tr     Token Recycling: persistent 1-token rows filling a static breadth-first template
    recap  M1 + M2 + M3 fused by entropy confidence, best-first tree + suffix chains

Each drafter has a factory (``make_ar`` ...) taking ``DraftInputs``; ``recap.methods``
registers them. A new drafter is a class with its factory plus one registry line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from recap.core.config import RecapConfig
from recap.drafting.suffix import add_chain, suffix_continuation
from recap.drafting.tree import DraftTree, best_first, static_template
from recap.drafting.treecost import PassCost
from recap.memory.calibration import Calibration
from recap.memory.fusion import Fused, fuse, single
from recap.memory.store import Entry, RequestMemory

__all__ = ["DraftInputs", "Drafter", "RecapConfig"]  # RecapConfig re-exported for old imports
_UNREAD: Any = object()  # sentinel: M1 has no Python view of the row yet
#: Nominal probability of a suffix-match proposal (its calibration bin).
SUFFIX_PRIOR = 0.5


class Drafter(Protocol):
    name: str
    needs_predictions: bool
    memory: RequestMemory | None

    def draft(self, seq: Sequence[int]) -> DraftTree: ...

    def observe(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
        order: Sequence[int] | None = None,
        verified: tuple[DraftTree, Sequence[int]] | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class DraftInputs:
    """What a drafter factory receives from the engine (``recap.methods.Method.build``)."""

    memory: RequestMemory | None  # None for methods that keep no memory
    config: RecapConfig
    budget: int  # node budget (a cap when ``cost`` is given)
    blocked: frozenset[int] = frozenset()  # image placeholders: never matched, never proposed
    cost: PassCost | None = None  # measured seconds per pass against tree size (cost-aware growth)


@dataclass
class _MemoryDrafter:
    """Shared ``observe`` for drafters that recycle target predictions."""

    memory: RequestMemory
    needs_predictions: bool = field(default=True, init=False)

    def observe(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
        order: Sequence[int] | None = None,
        verified: tuple[DraftTree, Sequence[int]] | None = None,
    ) -> None:
        self.memory.record(keys, top_ids, top_probs, step=step, depths=depths, order=order)
        if verified is not None:
            self.learn(*verified)

    def learn(self, tree: DraftTree, argmax: Sequence[int]) -> None:
        """After a verification: what the drafter learns beyond the memories (default: nothing)."""


class ARDrafter:
    """Autoregressive decoding: the tree is the root alone."""

    name = "ar"
    needs_predictions = False
    memory = None

    def draft(self, seq: Sequence[int]) -> DraftTree:
        return DraftTree.root(seq[-1])

    def observe(self, keys, top_ids, top_probs, *, step, depths, order=None, verified=None) -> None:  # noqa: ANN001
        return None


class PLDDrafter(ARDrafter):
    """Prompt lookup decoding: one chain after the latest matching n-gram (n = 3..1)."""

    name = "pld"

    def __init__(self, config: RecapConfig, blocked: frozenset[int] = frozenset(), max_ngram: int = 3) -> None:
        self.config = config
        self.blocked = blocked  # image placeholders: never matched, never proposed
        self.max_ngram = max_ngram

    def draft(self, seq: Sequence[int]) -> DraftTree:
        tree = DraftTree.root(seq[-1])
        chain = suffix_continuation(
            seq, min_len=1, max_len=self.max_ngram, max_tokens=self.config.max_depth, blocked=self.blocked
        )
        add_chain(tree, chain, max_new=len(chain), max_depth=self.config.max_depth, confidence=1.0, origin="lookup")
        return tree


class TRDrafter(_MemoryDrafter):
    """Token Recycling: fill a static template breadth-first from the 1-token rows."""

    name = "tr"

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int) -> None:
        super().__init__(memory)
        memory.use_context = False  # TR keeps the 1-token memory only
        self.config = config
        self.template = static_template(budget, config.max_depth, memory.k)

    def draft(self, seq: Sequence[int]) -> DraftTree:
        tree = DraftTree.root(seq[-1])
        where = {0: 0}  # template index -> tree index (absent: that subtree is dropped)
        lookups: dict[int, Any] = {}
        for t_idx, (t_parent, rank) in enumerate(self.template, start=1):
            parent = where.get(t_parent)
            if parent is None:
                continue
            ptok = tree.tokens[parent]
            if ptok not in lookups:
                lookups[ptok] = self.memory.m1.lookup(ptok)
            entry = lookups[ptok]
            if entry is None or rank >= len(entry.ids) or entry.probs[rank] <= 0:
                continue
            tok = entry.ids[rank]
            if tree.child(parent, tok) is not None:
                continue
            p = entry.normalised()[rank]
            where[t_idx] = tree.add(
                parent, tok, score=tree.scores[parent] * p, fused=p, sources=(("m1", 1.0, entry),), origin="m1"
            )
        return tree


class RecapDrafter(_MemoryDrafter):
    """RECAP: fused M1/M2/M3 predictions, best-first search, suffix-matched chains."""

    name = "recap"

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int, cost: PassCost | None = None) -> None:
        super().__init__(memory)
        self.config = config
        self.budget = budget
        self.cost = cost  # None: grow to the budget; else stop where a node no longer pays for itself
        self.last_stop = ""  # why the last draft stopped growing: "budget", "cost" or "exhausted"
        memory.use_context = config.use_m2 or config.use_m3
        # ctx -> (its M3, M2, M1 entries, the fused result) for this request.
        self._fused: dict[tuple[int, ...], tuple[Entry | None, Entry | None, Entry | None, Fused | None]] = {}
        # last token -> the fusion of its M1 row alone (for contexts no M2 / M3 entry knows)
        self._solo: dict[int, Fused] = {}
        self._use_m2 = memory.use_context and config.use_m2
        self._use_m3 = memory.use_context and config.use_m3
        self.calibration = memory.m1.calibration

    def _lookup(self, ctx: tuple[int, ...]) -> Fused | None:
        """The fused distribution after ``ctx`` (its last 1-3 tokens), or None when no memory knows it.

        The hot path of drafting (one call per expanded node): reads the three tables
        directly, reuses the last fusion of this context while its entries are the same
        objects (entries are immutable: a write replaces them), and skips the mixing
        when only one distinct entry takes part.
        """
        memory = self.memory
        last = ctx[-1]
        e1 = memory.m1.entries.get(last, _UNREAD)
        if e1 is _UNREAD:  # a row not read yet (or loaded from a file): one tensor read, then cached
            e1 = memory.m1.lookup(last)
        n = len(ctx)
        e2 = memory.m2.rows.get(ctx[-2:]) if self._use_m2 and n >= 2 else None
        e3 = memory.m3.rows.get(ctx) if self._use_m3 and n == 3 else None
        if e3 is None and e2 is None:  # M1 alone (most lookups): one fusion per row, whatever the context
            if e1 is None:
                return None
            solo = self._solo.get(last)
            if solo is not None and solo.sources[0][2] is e1:
                return solo
            solo = single("m1", e1)
            self._solo[last] = solo
            return solo
        hit = self._fused.get(ctx)
        if hit is not None and hit[0] is e3 and hit[1] is e2 and hit[2] is e1:
            return hit[3]
        entries = [(kind, e) for kind, e in (("m3", e3), ("m2", e2), ("m1", e1)) if e is not None]
        cfg = self.config
        fused = fuse(entries, cfg.specificity, cfg.eps, cfg.fusion)
        self._fused[ctx] = (e3, e2, e1, fused)
        return fused

    def _rater(self) -> Callable[[Fused, float], float]:
        """Calibration.rate for a fused proposal, as one closure over this step's table."""
        table, prior, bins = self.calibration.table, self.calibration.prior, Calibration.BINS
        context_rows, token_rows = table[Calibration.CONTEXT], table[Calibration.TOKEN]
        top = bins - 1
        # per bin (accepted, proposed + prior): the denominator does not depend on p
        by_class = (
            [(a, n + prior) for n, a in token_rows],  # fused[3] (contextual) False
            [(a, n + prior) for n, a in context_rows],
        )

        def rate(fused: Fused, p: float) -> float:
            b = int(p * bins)
            a, d = by_class[fused[3]][b if b < top else top]  # fused[3]: ``contextual``, read by index (hot)
            return (a + prior * p) / d

        return rate

    def learn(self, tree: DraftTree, argmax: Sequence[int]) -> None:
        if not self.config.calibrate:
            return
        # Every drafted node is a calibration sample: was it the target's choice at its parent?
        table, bins = self.calibration.table, Calibration.BINS
        top = bins - 1
        token_rows, context_rows = table[Calibration.TOKEN], table[Calibration.CONTEXT]
        suffix_cell = table[Calibration.SUFFIX][min(int(SUFFIX_PRIOR * bins), top)]
        for tok, parent, src, p in zip(tree.tokens[1:], tree.parents[1:], tree.sources[1:], tree.fused[1:]):
            if src:  # sources come most specific first: contextual unless the first is M1
                b = int(p * bins)
                cell = (token_rows if src[0][0] == "m1" else context_rows)[b if b < top else top]
            else:  # a suffix-chain node the memories did not propose
                cell = suffix_cell
            cell[0] += 1.0
            if argmax[parent] == tok:
                cell[1] += 1.0

    def draft(self, seq: Sequence[int]) -> DraftTree:
        cfg = self.config
        tree = DraftTree.root(seq[-1])
        if cfg.suffix:
            chain = suffix_continuation(
                seq,
                min_len=cfg.suffix_min_len,
                max_tokens=cfg.suffix_max_tokens,
                blocked=self.memory.image_token_ids,
            )
            if chain:
                confidence = self.calibration.rate(Calibration.SUFFIX, SUFFIX_PRIOR) if cfg.calibrate else SUFFIX_PRIOR
                add_chain(
                    tree,
                    chain,
                    max_new=min(cfg.suffix_max_tokens, self.budget),
                    max_depth=cfg.max_depth,
                    confidence=confidence,
                    cost=self.cost,
                )
        self.last_stop = best_first(
            tree,
            seq,
            self._lookup,
            budget=self.budget,
            max_depth=cfg.max_depth,
            max_children=cfg.max_children,
            depth_discount=cfg.depth_discount,
            rate=self._rater() if cfg.calibrate else None,
            cost=self.cost,
        )
        return tree.reordered()


def make_ar(inputs: DraftInputs) -> Drafter:
    return ARDrafter()


def make_pld(inputs: DraftInputs) -> Drafter:
    return PLDDrafter(inputs.config, inputs.blocked)


def make_tr(inputs: DraftInputs) -> Drafter:
    return TRDrafter(_needs_memory(inputs, "tr"), inputs.config, inputs.budget)


def make_recap(inputs: DraftInputs) -> Drafter:
    return RecapDrafter(_needs_memory(inputs, "recap"), inputs.config, inputs.budget, inputs.cost)


def _needs_memory(inputs: DraftInputs, name: str) -> RequestMemory:
    if inputs.memory is None:
        raise ValueError(f"method {name!r} needs a memory")
    return inputs.memory
