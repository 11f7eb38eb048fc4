"""What a tree costs per target pass, for cost-aware tree growth (``RecapConfig.cost_aware``, the default).

A pass with b drafted nodes takes T(b) = verify(b) + host(b) seconds:

* ``verify(b) = a + c1 b + c2 b^2``: the smoothed fit (``recap.engine.costfit.fit_verify``) of
  the verify-time curve measured once per (model, device, dtype, context bucket) at first use
  or at load (``recap.engine.autobudget.verify_curve`` / ``prepare``);
* ``host(b) = HOST_S_PER_PASS + HOST_S_PER_NODE * b``: drafting and updating the
  memories, per pass and per drafted node (pure Python and small tensor ops, about the
  same on every accelerator), fitted on the shapes model after the hot-path work
  (docs/benchmark.md).

Best-first search adds its next candidate (score s = its calibrated probability of being
accepted = the tokens it adds per pass in expectation) only while it pays for itself:
s * T(b) > (T(b + 1) - T(b)) * M, M the tokens per pass the tree already expects
(``recap.drafting.search.draft_tree``). The node budget becomes a cap (``budget="auto"``:
``recap.engine.autobudget.AUTO_CAP``). ``recap.trace.record.tree_sizing`` reads the same rule
back from a grown tree for the trace (``TraceStep.sizing``).
"""

from __future__ import annotations

from dataclasses import dataclass

from recap.core.config import RecapConfig

#: The cap of a cost-aware tree under ``budget="auto"`` (the default): the largest budget the config
#: takes; the measured cost, not this number, decides the size.
AUTO_CAP = RecapConfig.MAX_BUDGET
#: Host seconds per drafted node (RECAP's drafting + memory update): the slope of draft +
#: update per pass over budgets 4-64 (``scripts/measure_overhead.py``, median of 5 runs),
#: shapes model, 2-core CPU, one thread, after the second hot-path round: 13.3 us (TR: 5.8).
#: Also what ``budget="auto"`` charges per node (``recap.engine.autobudget``).
HOST_S_PER_NODE = 13e-6
#: Host seconds per pass whatever the tree (set-up, top-k, KV compaction, bookkeeping): the
#: intercept of that fit, 0.15 ms (TR: 0.16).
HOST_S_PER_PASS = 0.15e-3


@dataclass(frozen=True)
class PassCost:
    """Seconds of one target pass against the drafted node count b = 0..cap."""

    seconds: tuple[float, ...]  # seconds[b]: a pass with b drafted nodes
    marginal: tuple[float, ...]  # marginal[b] = seconds[b + 1] - seconds[b]

    @classmethod
    def from_fit(
        cls, fit: tuple[float, float, float], cap: int, *, host_s_per_node: float = HOST_S_PER_NODE,
        host_s_per_pass: float = HOST_S_PER_PASS,
    ) -> PassCost:
        """From verify-fit coefficients (a, c1, c2) and the host costs, for trees up to ``cap`` nodes."""
        a, c1, c2 = fit
        if cap < 0 or min(a, c1, c2, host_s_per_node, host_s_per_pass) < 0:
            raise ValueError(
                f"a pass cost needs cap >= 0 and non-negative coefficients, got {fit}, cap {cap}"
            )
        secs = tuple(a + host_s_per_pass + (c1 + host_s_per_node) * b + c2 * b * b for b in range(cap + 2))
        return cls(secs, tuple(hi - lo for lo, hi in zip(secs, secs[1:])))

    @property
    def cap(self) -> int:
        return len(self.marginal) - 1
