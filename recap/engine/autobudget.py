"""The measured cost of a tree pass on this model and device, and ``RecapConfig(budget="auto")``.

``pass_cost(target, cap, context_tokens)`` is what the default trees grow under
(``RecapConfig()``: ``budget="auto"``, ``cost_aware=True``; ``recap.drafting.treecost``): each
step takes its next node only while the node's expected gain, its acceptance probability
calibrated on this memory's own drafts, pays for what it adds to the pass. The cap is then
``AUTO_CAP`` (``recap.drafting.recap_drafter.make_recap``), the measured cost decides the size.

* ``verify(b)``: measured at first use for (model name, device, dtype, context bucket). After
  the engine's own prefill of a text-only prompt as long as the bucket (``context_bucket``: the
  largest ``PROMPT_TOKENS * 2**k`` not above the request's length; a context twice as long gets
  a curve of its own), the engine's own verify step (``recap.engine.steps.verify``: the tree
  forward with the tree mask and explicit positions, the logits processing the model's
  generation config asks for, the argmax, and the top-k the memories take) is timed for trees
  of ``b + 1`` tokens, b in ``BUDGETS`` smallest first, up to the first size (from the
  ``MIN_SIZES``-th) that costs ``STOP_RATIO`` one-token passes; the minimum of a few repeats is
  kept, and a smooth curve (a + c1 b + c2 b^2, least squares) is fitted through them and
  extrapolated. Cached in memory, so later requests are free; ``prepare`` measures at load. On
  the shapes model on a 2-core CPU the measurement takes ~0.1-0.3 s; a wall-clock cap
  (``MAX_SECONDS``) cuts repeats short on slow machines.
* ``draft_per_node``, ``draft_per_pass``: host seconds spent drafting and updating the
  memories, per drafted node and per pass (pure Python and small tensor ops, about the same
  on every accelerator): ``recap.drafting.treecost.HOST_S_PER_NODE`` / ``HOST_S_PER_PASS``.

``budget="auto"`` for fixed-size trees (TR; RECAP with ``cost_aware=False``) drafts one budget,
the b maximising expected tokens per second ``MAT(b) / (verify(b) + draft_per_pass + draft_per_node * b)``
(``choose_budget``), with ``MAT(b)`` a prior acceptance curve (``AcceptancePrior``): the MAT
that RECAP reached at budgets 8-128 in the node-budget ablation of the embedded shapes model
(``python -m recap bench --ablation``, docs/benchmark.md), interpolated in log(1 + b), held
flat past 128 and capped at ``max_depth + 1``: fitted to that model, so the default does not
use it. The expected tokens/s is flat near its maximum; the largest budget within
``TOLERANCE`` (2%) of the best is chosen, so the choice is stable from one measurement to
the next.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from recap.core.config import RecapConfig
from recap.drafting.treecost import AUTO_CAP as AUTO_CAP  # the default trees' cap, named here too
from recap.drafting.treecost import HOST_S_PER_NODE, HOST_S_PER_PASS, PassCost
from recap.engine.costfit import fit_verify
from recap.engine.steps import prefill, verify
from recap.verification.acceptance import AcceptanceRule, GreedyRule
from recap.verification.generation_config import acceptance_rule
from recap.verification.hostcopy import HostPredictions
from recap.verification.verify import keep_accepted

#: Drafted-node counts whose verification is timed (the tree has b + 1 tokens: root + b), in this
#: order; the measurement stops early (``STOP_RATIO``) where larger trees cannot pay.
BUDGETS: tuple[int, ...] = (0, 8, 16, 32, 64, 128, 256)
#: Sizes always timed (the fit needs three points for its quadratic term).
MIN_SIZES = 3
#: Stop timing larger trees once a pass costs this many one-token passes: it would have to emit
#: as many tokens to break even, about what the largest fixed tree of the shapes model's ablation
#: reaches (docs/benchmark.md, "The ablation"); the fit extrapolates beyond the last size timed.
STOP_RATIO = 4.0
PROMPT_TOKENS = 64
#: The longest context measured at (a longer one reuses this curve: attention is a small part
#: of a pass's cost next to the weights at these lengths).
MAX_CONTEXT = 4096
REPEATS = 3
#: Stop repeating measurements once this much wall time is spent (each size keeps >= 1 timing).
MAX_SECONDS = 0.6
#: choose_budget returns the largest budget within this fraction of the best expected tokens/s.
TOLERANCE = 0.02

#: (model name, device, dtype, context bucket) -> {drafted nodes: seconds of a verify step}
_CURVES: dict[tuple[str, str, str, int], dict[int, float]] = {}


#: MAT of RECAP against the node budget (depth 8), from the node-budget ablation on the
#: embedded shapes model (docs/bench/ablation.md, 2026-12-02, the conversing model; 24 is the
#: ``recap`` row); budget 0 is plain autoregressive decoding.
SHAPES_MAT_CURVE: tuple[tuple[int, float], ...] = (
    (0, 1.0), (4, 2.01), (8, 2.45), (12, 2.75), (16, 2.96), (24, 3.28), (32, 3.46), (64, 3.81), (128, 4.21),
)


@dataclass(frozen=True)
class AcceptancePrior:
    """Expected tokens per target pass as a function of the node budget.

    ``points``: (budget, MAT) pairs, interpolated linearly in log(1 + budget) and held
    flat past the last point (no extrapolated gains); capped at ``max_depth + 1``.
    """

    points: tuple[tuple[int, float], ...] = SHAPES_MAT_CURVE

    def __post_init__(self) -> None:
        pts = sorted(self.points)
        if len(pts) < 2 or pts[0][0] < 0 or any(m < 1.0 for _, m in pts):
            raise ValueError(
                f"an acceptance prior needs >= 2 points (budget >= 0, MAT >= 1), got {self.points!r}")
        object.__setattr__(self, "points", tuple(pts))

    def mat(self, budget: float, max_depth: int) -> float:
        pts = self.points
        x = math.log1p(max(budget, 0.0))
        value = pts[-1][1]
        if budget <= pts[0][0]:
            value = pts[0][1]
        else:
            for (b0, m0), (b1, m1) in zip(pts, pts[1:]):
                if budget <= b1:
                    x0, x1 = math.log1p(b0), math.log1p(b1)
                    value = m0 + (m1 - m0) * (x - x0) / (x1 - x0)
                    break
        return min(value, max_depth + 1.0)


DEFAULT_PRIOR = AcceptancePrior()


def context_bucket(target: Any, context_tokens: int | None) -> int:
    """The context length a curve is measured at for a request of ``context_tokens`` tokens: the
    largest ``PROMPT_TOKENS * 2**k`` not above it (at least ``PROMPT_TOKENS``, at most
    ``MAX_CONTEXT``, room left for the largest tree): a context that grows past twice the one
    measured gets a curve of its own, one within a factor 2 reuses it."""
    bucket = PROMPT_TOKENS
    n = PROMPT_TOKENS if context_tokens is None else int(context_tokens)
    while bucket * 2 <= min(n, MAX_CONTEXT):
        bucket *= 2
    limit = target.max_positions
    if limit is not None:
        while bucket > PROMPT_TOKENS and bucket + max(BUDGETS) + 2 > limit:
            bucket //= 2
    return bucket


def curve_key(target: Any, context: int) -> tuple[str, str, str, int]:
    """What a cost is kept per: (model name, device, dtype, context bucket)."""
    return (str(target.name), str(target.device), str(target.dtype), context)


def cached_curve(target: Any, bucket: int) -> dict[int, float] | None:
    """The curve measured for this target at this context bucket (``prepare``), or None: never measures."""
    return _CURVES.get(curve_key(target, bucket))


def _tree_parents(n_nodes: int) -> list[int]:
    """Parents of a plausible tree of ``n_nodes`` tokens (root first): each node gets up to 3 children."""
    return [-1] + [(i - 1) // 3 for i in range(1, n_nodes)]


def _prompt_ids(target: Any, n: int) -> list[int]:
    blocked = set(target.image_token_ids) | set(target.eos_token_ids)
    vocab = target.vocab_size
    ids = []
    i = 0
    while len(ids) < n and i < 10 * n + vocab:
        tok = (7 * i + 3) % vocab
        if tok not in blocked:
            ids.append(tok)
        i += 1
    return ids


class _Shape(NamedTuple):
    """A timed tree: what verify reads of a ``DraftTree`` (tokens, parents, depths). Its tokens
    do not matter to the cost and may repeat among siblings, which a ``DraftTree`` refuses."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]


def _rule(target: Any, prompt_tokens: int) -> AcceptanceRule:
    """The target's own acceptance rule (its processors, and its draws when it samples, cost
    verify time too); a plain greedy one when its generation config is one the engine refuses
    anyway. A sampling rule draws from a private generator: measuring never moves torch's
    default one, which a caller may have seeded for the decode that asked for the budget."""
    try:
        return acceptance_rule(
            target.model, None, prompt_len=prompt_tokens, max_new_tokens=1024,
            vocab_size=target.vocab_size, device=target.device, seed=0,
        )
    except ValueError:
        return GreedyRule(eos=frozenset(target.eos_token_ids), prompt_len=prompt_tokens,
                          max_length=prompt_tokens + 1024)


@torch.inference_mode()
def measure_verify_curve(
    target: Any,
    budgets: Sequence[int] = BUDGETS,
    *,
    prompt_tokens: int = PROMPT_TOKENS,
    repeats: int = REPEATS,
    max_seconds: float = MAX_SECONDS,
    top_k: int = 8,
) -> dict[int, float]:
    """Seconds of one verify step (``recap.engine.steps.verify``: tree forward, logits processing,
    argmax, plus the top-k the memories take) for ``b`` drafted nodes, b in ``budgets`` (smallest
    first; sizes past the first that costs ``STOP_RATIO`` one-token passes are not timed), after a
    prefix of ``prompt_tokens`` tokens."""
    budgets = sorted(set(budgets))
    prompt = _prompt_ids(target, prompt_tokens)
    request = [*prompt, prompt[0]]  # the prompt, then a root: the engine's prefill feeds all but the root
    rule = _rule(target, len(request))
    k = min(top_k, target.vocab_size)
    # the prefill's predictions are not timed: none asked for (no lm_head over the prompt), the
    # verify steps then take the top-k a recording drafter takes
    state, predictions = prefill(target, {"input_ids": torch.tensor([request], device=target.device)}, rule,
                                 HostPredictions(target.device, k, need_topk=False))
    del predictions
    host = state.host = HostPredictions(target.device, k, need_topk=True)
    prefix = state.prefix_len
    trees = {}
    for b in budgets:
        parents = _tree_parents(b + 1)
        depths = [0] * len(parents)
        for i in range(1, len(parents)):
            depths[i] = depths[parents[i]] + 1
        tokens = prompt[: b + 1] if b + 1 <= prefix else [prompt[0]] * (b + 1)
        trees[b] = _Shape(tokens, parents, depths)

    def once(b: int) -> float:
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)
        t0 = time.perf_counter()
        verified = verify(state, trees[b])  # ends in the engine's host sync (the picks)
        host.topk(verified.logits)
        dt = time.perf_counter() - t0
        del verified
        keep_accepted(state.cache, prefix, [])  # drop the tree again
        return dt

    # warm-up: each shape's first call allocates and, on CUDA, picks kernels; on a CPU the first
    # call alone (allocator, lazy paths), as warming every size would double a slow model's cost
    for b in budgets if target.device.type == "cuda" else budgets[:1]:
        once(b)
    best: dict[int, float] = {}
    for b in budgets:  # smallest first: stop where a pass costs STOP_RATIO one-token passes
        best[b] = once(b)
        if len(best) >= MIN_SIZES and best[b] >= STOP_RATIO * best[budgets[0]]:
            break
    spent = 0.0
    for _ in range(repeats - 1):
        if spent + sum(best.values()) > max_seconds:  # a round would pass the cap (a slow model: none)
            break
        start = time.perf_counter()
        for b in best:
            best[b] = min(best[b], once(b))
        spent += time.perf_counter() - start
    return best


def verify_curve(target: Any, context_tokens: int | None = None) -> dict[int, float]:
    """The cached verify-time curve of this (model, device, dtype) at the context bucket of
    ``context_tokens`` (``context_bucket``; None: the shortest); measured on first use."""
    context = context_bucket(target, context_tokens)
    key = curve_key(target, context)
    curve = _CURVES.get(key)
    if curve is None:
        curve = measure_verify_curve(target, prompt_tokens=context)
        _CURVES[key] = curve
    return curve


def prepare(target: Any, context_tokens: int | None = None) -> dict[int, float]:
    """Measure now (at load, say, with the context length requests will have) what a first
    request would otherwise measure: later requests of that context bucket find it cached."""
    return verify_curve(target, context_tokens)


def describe(target: Any) -> list[dict[str, Any]]:
    """Every curve measured for ``target`` (its context, seconds per size and the fit), for reports."""
    rows = []
    for (name, device, dtype, context), curve in sorted(_CURVES.items()):
        if (name, device, dtype) == curve_key(target, context)[:3]:
            a, c1, c2 = fit_verify(curve)
            rows.append({"context": context, "verify_s": {str(b): t for b, t in sorted(curve.items())},
                         "fit": [a, c1, c2]})
    return rows


def expected_tokens_per_second(
    curve: dict[int, float] | tuple[float, float, float],
    budget: int,
    *,
    max_depth: int,
    prior: AcceptancePrior = DEFAULT_PRIOR,
    draft_s_per_node: float = HOST_S_PER_NODE,
    draft_s_per_pass: float = HOST_S_PER_PASS,
) -> float:
    """MAT(b) / seconds per pass, from a measured curve or its ``fit_verify`` coefficients."""
    a, c1, c2 = fit_verify(curve) if isinstance(curve, dict) else curve
    seconds = a + c1 * budget + c2 * budget * budget + draft_s_per_pass + draft_s_per_node * budget
    return prior.mat(budget, max_depth) / seconds if seconds > 0 else 0.0


def choose_budget(
    curve: dict[int, float],
    *,
    max_depth: int = 8,
    prior: AcceptancePrior = DEFAULT_PRIOR,
    draft_s_per_node: float = HOST_S_PER_NODE,
    draft_s_per_pass: float = HOST_S_PER_PASS,
    tolerance: float = TOLERANCE,
    lo: int = 1,
    hi: int | None = None,
) -> int:
    """The budget in [lo, hi] (hi: the largest measured one) for the best expected tokens/s.

    Near the optimum the curve is flat; the largest budget within ``tolerance`` of the
    best is returned (more nodes: more tokens per pass at the same speed, and a choice
    that does not jump between measurements).
    """
    hi = min(hi if hi is not None else max(curve), RecapConfig.MAX_BUDGET)
    hi = max(hi, lo)
    fit = fit_verify(curve)
    values = {
        b: expected_tokens_per_second(
            fit,
            b,
            max_depth=max_depth,
            prior=prior,
            draft_s_per_node=draft_s_per_node,
            draft_s_per_pass=draft_s_per_pass,
        )
        for b in range(lo, hi + 1)
    }
    best = max(values.values())
    return max(b for b, v in values.items() if v >= best * (1.0 - tolerance))


def auto_budget(target: Any, config: RecapConfig, context_tokens: int | None = None) -> int:
    """The fixed node budget for ``target`` on its device under ``budget="auto"``, from the measured
    curve and ``DEFAULT_PRIOR`` (``choose_budget``), at most ``config.budget_cap``: what a drafter of
    fixed-size trees drafts (TR, RECAP with ``cost_aware=False``). RECAP's cost-aware trees (the
    default) take ``config.auto_cap`` (``AUTO_CAP`` unless capped) as their cap instead
    (``recap.drafting.recap_drafter.make_recap``) and size each step by cost."""
    curve = verify_curve(target, context_tokens)
    return choose_budget(curve, max_depth=config.max_depth, hi=min(max(curve), config.auto_cap))


def resolve_budget(target: Any, config: RecapConfig, context_tokens: int | None = None) -> int:
    """The node budget for this target: the configured one, or measured when 'auto'."""
    if config.budget != "auto":
        return int(config.budget)
    return auto_budget(target, config, context_tokens)


def clear_cache() -> None:
    """Forget every measured curve (tests, or after moving a model to another device)."""
    _CURVES.clear()


def pass_cost(target: Any, cap: int, context_tokens: int | None = None) -> PassCost:
    """The pass cost of ``target`` on its device at this context (measured on first use)."""
    return _cost_of_curve(tuple(sorted(verify_curve(target, context_tokens).items())), cap)


@functools.lru_cache(maxsize=64)
def _cost_of_curve(curve: tuple[tuple[int, float], ...], cap: int) -> PassCost:
    """A pure function of the measured curve, memoised: the least-squares fit costs milliseconds."""
    return PassCost.from_fit(fit_verify(dict(curve)), cap)
