"""``recap``: M1 + M2 + M3 fused by entropy confidence, a best-first tree, suffix-matched chains."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import eq
from typing import Any

from recap.core.config import RecapConfig
from recap.drafting.fastglue import FlatRecap
from recap.drafting.protocol import DraftSetup, DraftState
from recap.drafting.recycling import RecyclingDrafter, persistent_memory, request_memory
from recap.drafting.suffix import add_chain, suffix_continuation
from recap.drafting.tree import DraftTree, best_first
from recap.drafting.treecost import AUTO_CAP, PassCost
from recap.memory.calibration import Calibration
from recap.memory.fusion import Fused, fuse, single
from recap.memory.store import Entry, RequestMemory

_UNREAD: Any = object()  # sentinel: M1 has no Python view of the row yet
#: Nominal probability of a suffix-match proposal (its calibration bin).
SUFFIX_PRIOR = 0.5


class RecapDrafter(RecyclingDrafter):
    """RECAP: fused M1/M2/M3 predictions, best-first search, suffix-matched chains."""

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int, cost: PassCost | None = None) -> None:
        super().__init__(memory, budget)
        self.config = config
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
        # the compiled path (``recap.drafting.fastglue``) where the memory is on it
        self._flat = FlatRecap(memory, config, budget, cost, self._use_m2, self._use_m3, SUFFIX_PRIOR) \
            if memory.fast else None

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

    def learn(self, tree: DraftTree, picked: Sequence[int]) -> None:
        """Every drafted node is a calibration sample: was its token the target's pick at its parent?"""
        if not self.config.calibrate:
            return
        sources = tree.sources[1:]  # most specific first: contextual unless the first is M1
        token, context, suffix = Calibration.TOKEN, Calibration.CONTEXT, Calibration.SUFFIX
        self.calibration.update(
            [(token if src[0][0] == "m1" else context) if src else suffix for src in sources],
            # a suffix-chain node the memories did not propose counts at the suffix prior
            [p if src else SUFFIX_PRIOR for src, p in zip(sources, tree.fused[1:])],
            map(eq, map(picked.__getitem__, tree.parents[1:]), tree.tokens[1:]),
        )

    def draft(self, state: DraftState) -> DraftTree:
        if self._flat is not None:
            tree = self._flat.draft(*self.seq.sync(state.seq))
            self.last_stop = self._flat.last_stop
            return tree
        cfg = self.config
        seq = state.seq
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


def make_recap(setup: DraftSetup) -> RecapDrafter:
    cfg = setup.config
    memory = persistent_memory(setup)
    # cost-aware under "auto" (the default): the measured cost sizes each tree, the cap is the ceiling
    budget = AUTO_CAP if cfg.budget == "auto" and cfg.cost_aware else setup.node_budget()
    # the image's M2 / M3 from earlier requests: only where this drafter keeps contextual rows at all
    req = request_memory(memory, setup, scoped=cfg.scoped_memory and (cfg.use_m2 or cfg.use_m3))
    cost = setup.measured_cost(budget) if cfg.cost_aware else None  # a cost-aware tree: budget is a cap
    return RecapDrafter(req, cfg, budget, cost)
