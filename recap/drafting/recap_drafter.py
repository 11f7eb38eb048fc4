"""``recap``: M1 + M2 + M3 fused by entropy confidence, a best-first tree, suffix-matched chains.

The draft is one kernel call (``recap.drafting.search.draft_tree``); the update one more
(``recap.drafting.recycling.RecyclingDrafter.update``), which also counts every drafted node as a
calibration sample: was its token the target's pick at its parent?
"""

from __future__ import annotations

import numpy as np

from recap.core.config import FUSION_MODES, RecapConfig
from recap.drafting import search
from recap.drafting.protocol import DraftSetup, DraftState
from recap.drafting.recycling import RecyclingDrafter, persistent_memory, request_memory
from recap.drafting.search import STOPS, Settings, draft_tree, plain_request, plain_scoring
from recap.drafting.suffix import SUFFIX_MAX_LEN
from recap.drafting.tree import DraftTree
from recap.drafting.treecost import PassCost
from recap.memory.fusion import Fusion
from recap.memory.store import RequestMemory

#: Nominal probability of a suffix-match proposal (its calibration bin).
SUFFIX_PRIOR = 0.5


def settings(
    config: RecapConfig, budget: int, *, cost_aware: bool, use_m2: bool, use_m3: bool, prior: float
) -> Settings:
    """The kernel's settings record for ``config`` (typed as the kernel was compiled for)."""
    s1, s2, s3 = (float(x) for x in config.specificity)
    fusion = Fusion(use_m2=bool(use_m2), use_m3=bool(use_m3), mode=FUSION_MODES.index(config.fusion),
                    eps=float(config.eps), s1=s1, s2=s2, s3=s3)
    return Settings(
        budget=int(budget), max_depth=int(config.max_depth), max_children=int(config.max_children),
        calibrate=bool(config.calibrate), suffix=bool(config.suffix),
        suffix_lengths=(int(config.suffix_min_len), SUFFIX_MAX_LEN, int(config.suffix_max_tokens)),
        cost_aware=bool(cost_aware), discount=float(config.depth_discount), prior=float(prior),
        suffix_prior=SUFFIX_PRIOR, fusion=fusion,
    )


class RecapDrafter(RecyclingDrafter):
    """RECAP: fused M1/M2/M3 predictions, best-first search, suffix-matched chains."""

    def __init__(
        self, memory: RequestMemory, config: RecapConfig, budget: int, cost: PassCost | None = None
    ) -> None:
        super().__init__(memory, budget, budget + 1)
        self.config = config
        self.last_stop = ""  # why the last draft stopped growing: "budget", "cost" or "exhausted"
        context = memory.use_context  # M2 / M3 are read only where this request keeps them
        self.settings = settings(
            config, budget, cost_aware=cost is not None, use_m2=context and config.use_m2,
            use_m3=context and config.use_m3, prior=self.calibration.prior,
        )
        self._settings = search.plain_settings(self.settings)
        self._buffers = search.plain_buffers(self.buffers)
        self._limit = budget  # the budget in ``_settings``
        self._set_cost(cost)

    def _set_cost(self, cost: PassCost | None) -> None:
        """None: grow to the budget; else stop where a node no longer pays for itself under ``cost``."""
        if cost is not None and cost.cap < self.budget:  # the kernel reads it at every size below the budget
            raise ValueError(f"the pass cost's cap {cost.cap} is below the node budget {self.budget}")
        self.cost = cost
        none = np.zeros(1, dtype=np.float64)  # read only when cost-aware
        self._seconds = np.array(cost.seconds, dtype=np.float64) if cost is not None else none
        self._marginal = np.array(cost.marginal, dtype=np.float64) if cost is not None else none

    def resize(self, limit: int, cost: PassCost | None) -> None:
        """``Resizable``: at most ``limit`` nodes next (the kernel's budget), grown under ``cost``
        when this drafter is cost-aware (a fixed-size one ignores it)."""
        if not 0 <= limit <= self.budget:
            raise ValueError(f"a tree limit must be in [0, {self.budget}], got {limit}")
        if limit != self._limit:
            self._settings = search.plain_settings(self.settings._replace(budget=int(limit)))
            self._limit = limit
        if self.settings.cost_aware and cost is not None and cost is not self.cost:
            self._set_cost(cost)

    def calibrates(self) -> bool:
        return self.config.calibrate

    def draft(self, state: DraftState) -> DraftTree:
        seq, n = self.seq.sync(state.seq)
        memory = self.memory
        request = plain_request(seq=seq, n=n, img=memory.img)  # the records in plain form (``draft_tree``)
        scoring = plain_scoring(calib=self.calibration.cells, seconds=self._seconds, marginal=self._marginal)
        size, why, npool = draft_tree(request, memory.arrays(), self._settings, scoring, self._buffers)
        self.last_stop = STOPS[why]
        return self.tree_of(size, npool)


def make_recap(setup: DraftSetup) -> RecapDrafter:
    cfg = setup.config
    memory = persistent_memory(setup)
    # cost-aware under "auto" (the default): the measured cost sizes each tree, the cap is the ceiling
    # (with the size loop every "auto" budget is the cap: the loop sizes each tree below it)
    budget = cfg.auto_cap if cfg.budget == "auto" and cfg.cost_aware else setup.node_budget()
    # M2 / M3 only where the config reads them; with scoped_memory, the image's rows from earlier requests
    req = request_memory(memory, setup, use_context=cfg.use_m2 or cfg.use_m3, scoped=cfg.scoped_memory)
    cost = setup.measured_cost(budget) if cfg.cost_aware else None  # a cost-aware tree: budget is a cap
    return RecapDrafter(req, cfg, budget, cost)
