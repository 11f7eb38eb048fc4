"""Why a cost-aware step's tree has its size (``TraceStep.sizing``, ``StepRecord.sizing``).

A tree grown under a measured pass cost (``recap.drafting.treecost``, the default trees) takes
its next candidate node only while the node's expected gain s pays for itself: s * T(b) >
dT(b) * M (``recap.drafting.tree.best_first``). ``tree_sizing`` reads that rule back from the
grown tree (its nodes' gains are their scores) and the ``PassCost`` it grew under, so the trace
and the app can say what the size was, why it stopped, and at what measured cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from recap.core.schema import OneOf
from recap.drafting.search import STOPS
from recap.drafting.tree import DraftTree
from recap.drafting.treecost import PassCost
from recap.trace.fields import Count, NonNegative, Seconds


@dataclass
class TreeSizing:
    """Why a cost-aware step's tree has its size: growth takes the next candidate node only while
    its expected gain (the chance it is accepted, calibrated) exceeds ``needed_gain``, the tokens
    per second it would cost: node_s * expected_tokens / pass_s (``recap.drafting.treecost``)."""

    stop: Annotated[str, OneOf(STOPS)]  # "cost": the next node did not pay; "budget": the cap
    expected_tokens: NonNegative  # tokens this pass expects: 1 (the bonus) + every node's gain
    last_gain: NonNegative  # the expected gain of the last node taken (0: none taken)
    needed_gain: NonNegative  # what the next node's gain had to exceed to be taken
    pass_s: Seconds  # the pass's measured cost at this size and context (verify + host)
    node_s: Seconds  # what one more node costs at this size (the curve's slope here)
    # the size loop's view (``recap.engine.controller``; traces before it, or a fixed budget: zeros)
    limit: Count = 0  # the node limit the tree grew under (the loop's; 0 with the others zero: none)
    predicted_s: Seconds = 0.0  # the step's seconds the loop's cost model predicted at this size (0: unknown)
    realised_s: Seconds = 0.0  # the step's measured seconds: draft + verify + update (0: unknown)
    one_token_s: Seconds = 0.0  # what a plain one-token pass costs, as measured (0: unknown)
    tokens: Count = 0  # the tokens the step emitted (0: unknown)

    @property
    def realised_tokens_per_s(self) -> float:
        """The step's realised speed (0.0: not measured)."""
        return self.tokens / self.realised_s if self.realised_s > 0 else 0.0

    @property
    def plain_tokens_per_s(self) -> float:
        """What one-token passes earn here, as the size loop measured them (0.0: unknown)."""
        return 1.0 / self.one_token_s if self.one_token_s > 0 else 0.0

    def summary(self) -> str:
        """One line for a step's title, e.g. ``stopped by cost (last gain 0.052, next needed > 0.045,
        1.20 ms/node)``."""
        why = {"cost": "stopped by cost", "budget": "at the cap", "exhausted": "no candidate left"}[self.stop]
        line = (f"{why} (last gain {self.last_gain:.3f}, next needed > {self.needed_gain:.3f}, "
                f"{self.node_s * 1e3:.2f} ms/node)")
        if self.realised_tokens_per_s and self.plain_tokens_per_s:  # the size loop's view of the step
            line += (f"; limit {self.limit}: {self.realised_tokens_per_s:.1f} tokens/s against "
                     f"{self.plain_tokens_per_s:.1f} one token at a time")
        return line


def tree_sizing(
    tree: DraftTree, cost: PassCost | None, stop: str, *, realised: Any = None
) -> TreeSizing | None:
    """Why a cost-aware tree has its size, from its node gains (scores) and the pass cost it grew
    under; None for a tree grown without a cost (fixed trees, other drafters). ``realised``: the size
    loop's record of the step (``recap.engine.controller.Realised``: limit, predicted_s,
    realised_s, one_token_s), when a loop sized it."""
    if cost is None or stop not in STOPS:
        return None
    b = min(len(tree) - 1, cost.cap)
    gains = tree.scores[1:]
    m = 1.0 + sum(gains)
    pass_s, node_s = cost.seconds[b], cost.marginal[b]
    return TreeSizing(stop=stop, expected_tokens=round(m, 6), last_gain=round(min(gains, default=0.0), 6),
                      needed_gain=round(node_s * m / pass_s, 6) if pass_s > 0 else 0.0,
                      pass_s=pass_s, node_s=node_s, **_loop_fields(realised))


def _loop_fields(realised: Any) -> dict[str, Any]:
    if realised is None:
        return {}
    return {"limit": int(realised.limit), "predicted_s": float(realised.predicted_s),
            "realised_s": float(realised.realised_s), "one_token_s": float(realised.one_token_s),
            "tokens": int(realised.tokens)}
