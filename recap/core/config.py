"""``RecapConfig``: the drafters' settings, validated at construction (one concept, one module)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: How the memories' rows are mixed (``recap.memory.fusion``).
FUSION_MODES = ("entropy", "fixed", "backoff")


@dataclass
class RecapConfig:
    """Settings of the drafters (RECAP's, and the shared ones TR and PLD use).

    The default tree is sized by measurement (``budget="auto"`` with ``cost_aware`` and
    ``size_loop``): each step grows while the next node's expected gain (its acceptance
    probability, calibrated on this memory's own verified drafts) pays for its cost, the pass
    seconds learnt from the decode's own passes on this model, device, dtype and context length
    (``recap.engine.controller``), below a node limit that the same loop shrinks, down to plain
    one-token passes, wherever trees earn fewer tokens per second than those would: a few
    nodes, a chain or none where a tree pass is expensive (a 2B model on a CPU), large trees
    where it is flat (a GPU). Nothing is measured on a request's clock. A fixed ``budget=N`` with
    ``cost_aware=False`` gives paper-style trees of exactly N nodes (the benchmark's ``recap``
    and ``tr`` rows: 24, Token Recycling's budget, so the two compare at equal tree size). How
    fixed and cost-aware trees compare on the embedded shapes model (``python -m recap bench
    --ablation``), and what entropy fusion, the suffix chains and each memory add:
    docs/benchmark.md, "The ablation" (the figures are read from docs/bench/ablation.json).
    Depth 8, top-8 rows, specificity (1, 2, 4), at most 4 children per node and 4 suffix-chain
    tokens (with 8 and 8, a suffix chain's unlikely tail and low-ranked siblings took nodes that
    deeper paths earn).

    budget          drafted nodes per step (the root excluded), or "auto"
    budget_cap      under "auto", the most nodes a step may draft (None: ``MAX_BUDGET``): a
                    cost-aware tree's cap, and the largest budget "auto" picks for fixed-size
                    trees (TR; ``cost_aware=False``). A deployment's ceiling (the app's public
                    mode); with a number budget it must stay None
    max_depth       depth limit of the tree
    top_k           predictions kept per memory row (k)
    max_children    children pushed per expanded node
    specificity     weights s(n) for key lengths 1, 2, 3
    fusion          "entropy" (RECAP), "fixed" (0.7/0.2/0.1 by rank) or "backoff" (longest key only)
    eps             added to each entry's concentration before weighting
    use_m2, use_m3  use the 2- / 3-token request-local memories (ablations)
    suffix          propose suffix-matched continuations
    suffix_min_len  shortest context suffix that counts as a match
    suffix_max_tokens  tokens proposed after a match (also the nodes reserved for it)
    depth_discount  multiplies the path score once per level (1 = none)
    calibrate       rank paths by learned acceptance rates of proposals instead of raw
                    memory probabilities (see ``recap.memory.calibration.Calibration``)
    cost_aware      RECAP stops growing a step's tree at the first node whose expected gain
                    (its calibrated acceptance probability) does not pay for its marginal
                    verify cost on this model and device (``recap.drafting.treecost``); ``budget``
                    is then a cap (``"auto"``: ``MAX_BUDGET``). On by default; against fixed
                    budgets on the shapes model: docs/benchmark.md, "Trees sized by
                    measurement". Off: every step drafts ``budget`` nodes (``"auto"``: the
                    size loop's limit; with ``size_loop`` off, one budget chosen from the
                    measured curve and an acceptance prior)
    scoped_memory   RECAP's M2 / M3 rows written under an image stay available to later
                    requests on the same image that share the persistent ``TokenMemory``
                    and the same ``owner`` (``recap.generate(..., owner=...)``), never to
                    another image, another owner or a text-only request; bounded in rows,
                    age and images (``recap.memory.scoped``). Off by default, for privacy:
                    the rows are predictions made while reading a request's image and
                    prompt, and their provenance names that prompt, so a server that shares
                    one ``TokenMemory`` between users would let one user's rows, and through
                    them their prompt, reach another user's drafts. Turn it on where one
                    person owns the memory (the app, where each session has its own), or
                    pass each user's ``owner``. When the follow-up suite asked a scene's
                    questions as separate requests it raised MAT on the second and later
                    ones (docs/bench/HISTORY.md). The turns of a conversation
                    (``recap.converse``) hold the history in their prompt and carry the
                    conversation's contextual rows by default (its ``carry`` option sets
                    this field per turn; ``carry="none"`` carries none)
    size_loop       under ``budget="auto"``, size each step's tree by the closed loop
                    (``recap.engine.controller``): the pass cost learnt from the decode's own
                    step times per (model, device, dtype, context bucket), a node limit that
                    shrinks, down to plain one-token passes, while trees earn fewer tokens per
                    second than those would and grows while they earn more; nothing measured on
                    a request's clock, the same loop for every resizable drafter (TR too). On by
                    default. Its trees follow wall-clock time, so two runs may draft different
                    trees (never different tokens); off, ``"auto"`` uses one verify curve
                    measured per (model, device, dtype, context bucket) at load
                    (``recap.engine.autobudget.prepare``) or else at first use, trees that
                    repeat exactly on one machine
    """

    budget: int | str = "auto"
    budget_cap: int | None = None
    max_depth: int = 8
    top_k: int = 8
    max_children: int = 4
    specificity: tuple[float, float, float] = (1.0, 2.0, 4.0)
    fusion: str = "entropy"
    eps: float = 0.05
    use_m2: bool = True
    use_m3: bool = True
    suffix: bool = True
    suffix_min_len: int = 2
    suffix_max_tokens: int = 4
    depth_discount: float = 1.0
    calibrate: bool = True
    cost_aware: bool = True
    scoped_memory: bool = False
    size_loop: bool = True

    MAX_BUDGET = 256
    MAX_DEPTH = 32
    MAX_TOP_K = 64

    def __post_init__(self) -> None:
        if isinstance(self.budget, str):
            if self.budget != "auto":
                raise ValueError(f"budget must be a positive integer or 'auto', got {self.budget!r}")
        else:
            _check_int("budget", self.budget, 1, self.MAX_BUDGET)
        if self.budget_cap is not None:
            if self.budget != "auto":
                raise ValueError(f"budget_cap bounds budget='auto'; with budget={self.budget} leave it None")
            _check_int("budget_cap", self.budget_cap, 1, self.MAX_BUDGET)
        _check_int("max_depth", self.max_depth, 1, self.MAX_DEPTH)
        _check_int("top_k", self.top_k, 1, self.MAX_TOP_K)
        _check_int("max_children", self.max_children, 1, self.MAX_TOP_K)
        _check_int("suffix_min_len", self.suffix_min_len, 1, 16)
        _check_int("suffix_max_tokens", self.suffix_max_tokens, 1, 64)
        spec = tuple(self.specificity)
        if len(spec) != 3 or not all(
            isinstance(s, (int, float)) and math.isfinite(s) and s > 0 for s in spec
        ):
            raise ValueError(f"specificity must be three positive numbers, got {self.specificity!r}")
        self.specificity = tuple(float(s) for s in spec)  # type: ignore[assignment]
        if self.fusion not in FUSION_MODES:
            raise ValueError(f"fusion must be one of {FUSION_MODES}, got {self.fusion!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and 0 <= self.eps <= 1):
            raise ValueError(f"eps must be in [0, 1], got {self.eps!r}")
        if not (isinstance(self.depth_discount, (int, float)) and 0 < self.depth_discount <= 1):
            raise ValueError(f"depth_discount must be in (0, 1], got {self.depth_discount!r}")
        for name in ("use_m2", "use_m3", "suffix", "calibrate", "cost_aware", "scoped_memory", "size_loop"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def auto_cap(self) -> int:
        """The most nodes a tree takes under ``budget="auto"``: ``budget_cap``, else ``MAX_BUDGET``."""
        return self.MAX_BUDGET if self.budget_cap is None else self.budget_cap

    @property
    def sized_by_loop(self) -> bool:
        """Whether the closed size loop sizes the trees: ``size_loop`` under ``budget="auto"``."""
        return self.budget == "auto" and self.size_loop

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
