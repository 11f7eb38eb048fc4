"""The closed loop over a decode's own passes: what its trees cost and earn, and the size they may take.

A cost-aware tree (``recap.drafting.treecost``) grows while a node's calibrated gain pays for what it
adds to the pass. Two things were open in that rule: the pass cost was one measurement, frozen for
the process (and taken on the first request's clock), and nothing checked that the trees earned
more than one-token decoding would. This module closes both, from the step times the engine
measures anyway (``state.step_timings``: draft + verify + update; verify ends in the host sync of
the picks, so on CUDA the time is the device's):

* ``CostModel``: what a step of b drafted nodes costs on one (model, device, dtype, context
  bucket), shared by every later request of that key (``cost_model``). It keeps each size's cost as
  the lower quartile of its last passes, host work included (so no host constant from another
  machine), and fits ``a + c1 b + c2 b^2`` through them (``recap.engine.costfit.fit_verify``)
  when a size's cost moved; a curve measured at load (``autobudget.prepare``), if any, only fills
  in sizes larger than any run yet. Nothing is measured on a request's clock: a cold key starts
  from no knowledge, trees of at most ``PROBE`` nodes, and learns from its passes.
* ``SizeController``: one decode's node limit (the drafter's budget for the next step,
  ``recap.drafting.protocol.Resizable``). Every ``WINDOW`` passes it compares the tokens per
  second its trees realised with ``1 / T(0)``, what one-token passes earn (``T(0)``: plain passes'
  cost; a plain pass is scheduled when none was seen for ``REMEASURE`` passes). A window earning
  less (by ``MARGIN``) halves the limit, down to 0: a plain one-token pass as ``generate()`` makes,
  with no drafter work at all (``learns``: only the ``WINDOW`` passes before the next probe teach
  the memory, so that the probe drafts from this request's recent rows). A failed probe, or a
  window whose trees the drafter's own cost rule left empty, drops to 0 at once. At 0 it waits,
  then probes the largest size up to ``PROBE`` that could pay at all (its known cost under
  ``1 + n`` plain passes; none: it waits longer); a probe stops at its first pass if even full
  acceptance could not pay for its size; each failed probe doubles the wait (at most
  ``MAX_WAIT``), so a model on which no tree pays spends few passes probing. A window earning more
  whose trees reached the limit doubles it, up to the cap, while larger trees earn more: a window
  that earns less (by ``MARGIN``) than the last window at half its limit halves the limit and
  holds it there (``FIRST_WAIT`` passes, doubled by each such step back, at most ``MAX_WAIT``).
  So on a flat curve (a GPU, where nodes cost almost nothing) the limit follows the measured
  marginal gain of larger trees, not the cap. A memory's first decode of a key starts at ``PROBE``
  nodes, a later one where its last one left the loop (``TokenMemory.size_loop_state``: limit,
  wait, passes idle): the cost is the machine's and shared, what trees earn is the memory's.

The size policy chooses which tree is verified, never what is accepted: the output stays generate()'s.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from recap.drafting.treecost import PassCost
from recap.engine.costfit import fit_verify

#: What a cost model is learnt for: (model name, device, dtype, context bucket).
Key = tuple[str, str, str, int]
#: Passes between two decisions (and two refits of the cost curve).
WINDOW = 4
#: A window must earn this fraction more (less) than one-token passes to grow (shrink) the limit.
MARGIN = 0.03
#: The node limit a probe (and a cold key's first trees) starts from.
PROBE = 4
#: Passes a decode at limit 0 waits before its first probe; doubled by each failed probe up to MAX_WAIT.
FIRST_WAIT = 8
MAX_WAIT = 128
#: Passes of each size kept; a size's cost is their lower quartile (``CostModel.observe``).
KEEP = 12
#: Decisions between two refits of a cost model that has a fit.
REFIT_EVERY = 4
#: A refitted cost within this fraction of the last one (at every size) keeps the last pass cost object.
COST_TOLERANCE = 0.02
#: Passes with trees after which a plain pass re-measures T(0) (the context grows, the machine drifts).
REMEASURE = 32


@dataclass
class CostModel:
    """Seconds of a whole step (draft + verify + update) against its drafted node count, as run.

    Shared by the concurrent decodes of one key (the app runs ``RECAP_CONCURRENCY`` at once): what
    writes or walks its tables holds ``_lock`` (a size first seen while another decode refits would
    change a dict under its iteration)."""

    prior: dict[int, float] = field(default_factory=dict)  # a load-time curve, host time included
    seen: dict[int, float] = field(default_factory=dict)  # size -> its cost: the lower quartile of ``runs``
    runs: dict[int, list[float]] = field(default_factory=dict)  # size -> its last ``KEEP`` passes' seconds
    _fit: tuple[float, float, float] | None = None
    _fitted: dict[int, float] | None = None  # ``seen`` as the last fit read it (None: never fitted)
    _windows: int = 0  # decisions since the last refit
    # cap -> (the fit, the pass cost built from it): the last one, kept while the fit holds
    _costs: dict[int, tuple[tuple[float, float, float], PassCost]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def observe(self, nodes: int, seconds: float) -> None:
        """Learn one step's seconds at its size. The size's cost is the lower quartile of its last
        ``KEEP`` passes: timing noise on a shared machine only ever adds time (a plain pass of 2 ms
        read 50 ms while other processes ran), and a first pass carries one-time costs (allocation,
        lazy paths) that later ones do not; a quantile follows a lasting change within ``KEEP`` passes."""
        with self._lock:
            kept = self.runs.setdefault(nodes, [])
            kept.append(seconds)
            del kept[:-KEEP]
            self.seen[nodes] = sorted(kept)[len(kept) // 4]

    def refresh(self) -> None:
        """At a decision: refit when the sizes' costs moved (``stale``), at most once every ``REFIT_EVERY``
        decisions once a fit exists (the trees' sizes vary from pass to pass, and a refit costs more than
        the rest of a decision); at once while no tree ran."""
        with self._lock:
            self._windows += 1
            # due while the last fit saw no tree size (any: a key other than 0), else every REFIT_EVERY
            due = self._fitted is None or not any(self._fitted) or self._windows >= REFIT_EVERY
            if due and self.stale():
                self.refit()

    def stale(self) -> bool:
        """Whether a size's cost moved (by ``COST_TOLERANCE``) or a new size ran since the last fit: a
        refit costs ~20-150 us (a least-squares solve; more with the caches cold after a forward)."""
        with self._lock:
            was = self._fitted
            if was is None:
                return True
            moved = (n not in was or abs(t - was[n]) > COST_TOLERANCE * t for n, t in self.seen.items() if n)
            return any(moved)

    def cost_of(self, nodes: int) -> float:
        """The seconds a step of ``nodes`` drafted nodes costs: as run, else the fit's (0.0: unknown)."""
        return self.seen[nodes] if nodes in self.seen else self.seconds(nodes)

    def refit(self) -> tuple[float, float, float] | None:
        """The fit through the tree sizes run (and the prior's larger ones); None: no tree ran yet.

        Through trees only (b >= 1): a one-token pass can be another kernel altogether (on a CPU a
        matrix-vector product; at Qwen2-VL-2B sizes a 2-token pass already costs twice a 1-token one,
        and 5 tokens hardly more than 2), so T(0) is its own measurement (``one_token_s``) and the fit
        says what one more node costs in a tree. Whether to draft at all is the limit's decision."""
        with self._lock:
            top = max(self.seen, default=0)
            trees = {b: t for b, t in self.seen.items() if b > 0}
            points = {**{b: t for b, t in self.prior.items() if b > top}, **trees}
            self._fit = fit_verify(points) if points else None
            self._fitted, self._windows = dict(self.seen), 0
            return self._fit

    @property
    def fit(self) -> tuple[float, float, float] | None:
        if self._fitted is None:  # (no tree ran yet is an answer too: not refitted every call)
            self.refit()
        return self._fit

    def pass_cost(self, cap: int) -> PassCost:
        """The pass cost trees of at most ``cap`` nodes grow under (``recap.drafting.treecost``), from the
        fit (host work is in the step times: no host constant). The last one is kept while the fit stays
        within ``COST_TOLERANCE`` of the one it was built from: building it is ~45 us, and an unchanged
        cost object saves the drafter its copy too."""
        fit = self.fit
        if fit is None or fit[0] <= 0:  # nothing known: a tiny positive cost keeps the growth rule defined
            fit = (1e-3, 1e-6, 0.0)
        kept = self._costs.get(cap)
        if kept is not None and _close(kept[0], fit, cap):
            return kept[1]
        cost = PassCost.from_fit(fit, cap, host_s_per_node=0.0, host_s_per_pass=0.0)
        self._costs[cap] = (fit, cost)
        return cost

    def one_token_s(self) -> float:
        """What a plain pass costs: the lower quartile of the plain passes run (0.0: none ran yet;
        a fit's intercept through tree sizes alone is no measurement of it; a load-time curve's size 0 is)."""
        return self.seen.get(0, self.prior.get(0, 0.0))

    def seconds(self, nodes: int) -> float:
        """The policy's prediction for a step of ``nodes`` drafted nodes (0.0: nothing known)."""
        fit = self.fit
        if fit is None:
            return 0.0
        a, c1, c2 = fit
        return a + c1 * nodes + c2 * nodes * nodes


def _close(a: tuple[float, float, float], b: tuple[float, float, float], cap: int) -> bool:
    """Whether two fits predict the same seconds, within ``COST_TOLERANCE``, at every size up to ``cap``
    (their difference is a quadratic in the size: checked at 0, ``cap`` and in between)."""
    for n in {0, min(8, cap), cap // 2, cap}:
        ta, tb = (f[0] + f[1] * n + f[2] * n * n for f in (a, b))
        if abs(ta - tb) > COST_TOLERANCE * max(abs(tb), 1e-12):
            return False
    return True


_MODELS: dict[Key, CostModel] = {}


def cost_model(key: Key, prior: dict[int, float] | None = None) -> CostModel:
    """The shared cost model of (model name, device, dtype, context bucket); ``prior``: a measured
    curve (seconds by size, host included) to start a new one from."""
    model = _MODELS.get(key)
    if model is None:  # setdefault: two first decodes of a key at once get one model
        model = _MODELS.setdefault(key, CostModel(prior=dict(prior or {})))
    return model


def clear() -> None:
    """Forget every cost model (tests)."""
    _MODELS.clear()


class Realised(NamedTuple):
    """One step as the controller saw it: what the policy predicted and what it got."""

    limit: int  # the node limit the tree grew under (0: a plain one-token pass)
    nodes: int  # the nodes it drafted
    predicted_s: float  # the step's seconds predicted by the cost model at its size (0: unknown)
    realised_s: float  # the step's measured seconds (draft + verify + update)
    tokens: int  # tokens the step emitted
    one_token_s: float  # the cost model's seconds of a plain one-token pass (0: unknown)


class SizeController:
    """One decode's tree-size loop over a shared ``CostModel`` (see the module docstring).

    ``limit``: the node budget of the next step; ``cost()``: the pass cost its tree grows under.
    ``gate=False`` (an explicit budget): the limit stays at the cap, the cost is still learnt.
    ``states``: where this memory's decodes left the loop, per cost-model key
    (``TokenMemory.size_loop_state``: (limit, probe wait, passes idle); how well trees earn is the
    memory's, not the machine's): the decode starts from ``states[key]`` and writes it back at each
    decision. Without one (a first decode on this memory), a ``PROBE``-node limit.
    """

    def __init__(
        self, model: CostModel, cap: int, *, gate: bool = True,
        states: dict[Key, tuple[int, int, int]] | None = None, key: Key | None = None,
    ) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise ValueError(f"a size controller needs an integer cap >= 0, got {cap!r}")
        self.model, self.cap, self.gate = model, cap, gate
        self.states, self.key = ({} if states is None else states), key
        state = self.states.get(key) if key is not None else None
        self.wait = FIRST_WAIT
        self._idle = 0  # passes spent at limit 0 since the last probe
        if not gate:
            self.limit = cap
        elif state is not None:  # where this memory's last decode of this key left the loop
            self.limit, self.wait, self._idle = min(cap, state[0]), state[1], state[2]
        else:  # a first decode (a curve measured at load, if any, says what a size costs, not what it earns)
            self.limit = min(PROBE, cap)
        # passes since T(0) was measured; unknown: the first pass is plain (T(0); and the first token as
        # soon as generate()'s), the trees after it
        self._since_plain = REMEASURE if 0 not in model.seen else 0
        self._win: list[tuple[int, float, int]] = []  # (nodes, seconds, tokens) since the last decision
        self._probing = self.gate and self.limit <= PROBE  # a cold start is a probe
        self._plain_next = False
        self._refused = 0  # passes in a row whose tree the drafter's cost rule left empty
        self._rate_at: dict[int, float] = {}  # limit -> tokens per second its last window earned
        self._hold = 0  # passes left during which the limit may not grow (after a doubling that lost)
        self._hold_wait = FIRST_WAIT  # the next such hold's length, doubled by each doubling that lost
        self._grew = False  # the last decision doubled the limit (the next window judges that doubling)
        self.last: Realised | None = None
        self._cost = model.pass_cost(cap)

    def cost(self) -> PassCost:
        """The pass cost the next tree grows under: the fitted step time, host work included."""
        return self._cost

    def next_limit(self) -> int:
        """The node budget of the next step: 0 when a plain pass re-measures T(0), else ``limit``."""
        self._plain_next = self.limit > 0 and self._since_plain >= REMEASURE
        return 0 if self._plain_next else self.limit

    def learns(self) -> bool:
        """Whether the next pass teaches the drafter's memory. Always with trees; at limit 0 only in the
        ``WINDOW`` passes before the next probe, so that the probe drafts from this request's recent rows:
        elsewhere a plain pass does no drafter work at all and costs what ``generate()``'s does (on a
        small model the memory's update is a tenth of a pass). A scheduled plain pass (``REMEASURE``) does
        none either: T(0) is what a pass with no drafter work costs, what ``generate()``'s does."""
        if self._plain_next:
            return False
        if self.limit > 0 or not self.gate:
            return True
        return self._idle + len(self._win) + WINDOW >= self.wait

    def observe(self, nodes: int, seconds: float, tokens: int, *, refused: bool = False) -> bool:
        """Learn one step; True when the limit or the cost changed. ``refused``: the drafter's own cost rule
        took no node (a cost-aware tree stopped by cost at its root): a window of nothing else means no
        node pays here, so the drafter's work buys nothing and the limit drops to 0 as after a failed
        probe."""
        self.last = Realised(self.limit, nodes, self.model.seconds(nodes), seconds, tokens,
                             self.model.one_token_s())
        self.model.observe(nodes, seconds)
        self._since_plain = 0 if nodes == 0 else self._since_plain + 1
        if self._plain_next:  # a scheduled measurement, not the policy's choice: no window entry
            self._plain_next = False
            return False
        self._win.append((nodes, seconds, tokens))
        self._refused = self._refused + 1 if refused and nodes == 0 else 0
        if self.gate and self.limit > 0 and self._refused >= WINDOW:
            self._failed_probe()
        elif self.gate and self._probing and nodes > 0 and not self._could_pay(nodes):
            self._failed_probe()  # this probe's trees cannot pay even if every node is accepted: stop now
        elif len(self._win) < WINDOW:
            return False
        else:
            self.model.refresh()
            if self.gate:
                self._decide()
        self._win = []
        if self.key is not None:
            self.states[self.key] = (self.limit, self.wait, self._idle)
        self._cost = self.model.pass_cost(self.cap)
        return True

    def _could_pay(self, nodes: int) -> bool:
        """Whether a tree of ``nodes`` nodes could earn more than one-token passes at all: its pass, as the
        cost model knows it, costs less than ``1 + nodes`` plain ones (every node accepted). True while
        T(0) or the size's cost is unknown."""
        one, cost = self.model.one_token_s(), self.model.cost_of(nodes)
        return one <= 0 or cost <= 0 or cost < (1 + nodes) * one

    def _failed_probe(self) -> None:
        """Back to plain passes, and a longer wait before the next probe."""
        self.limit, self.wait, self._probing = 0, min(2 * self.wait, MAX_WAIT), False

    def _probe(self) -> None:
        """At limit 0 once the wait is over: probe the largest size up to ``PROBE`` that could pay at all;
        where none could, wait longer instead (until ``MAX_WAIT``, when one node probes anyway: a probe is
        how the cost of a size is learnt again)."""
        sizes = [n for n in range(min(PROBE, self.cap), 0, -1) if self._could_pay(n)]
        if not sizes and self.wait < MAX_WAIT:
            self.wait, self._idle = min(2 * self.wait, MAX_WAIT), 0
            return
        self.limit, self._idle, self._probing = (sizes[0] if sizes else min(1, self.cap)), 0, True

    def _decide(self) -> None:
        self._hold = max(0, self._hold - len(self._win))
        if self.limit == 0:
            self._idle += len(self._win)
            if self._idle >= self.wait:
                self._probe()
            return
        one = self.model.one_token_s()
        if one <= 0:  # T(0) unknown yet: nothing to compare with (a plain pass is scheduled)
            self._since_plain = REMEASURE
            return
        # the window's tokens against what its sizes cost as the model knows them (robust to a noisy
        # pass), so that a plain pass and a tree are judged by the same estimator
        spent = sum(self.model.cost_of(n) for n, _, _ in self._win)
        rate = sum(t for _, _, t in self._win) / spent if spent > 0 else 0.0
        limit, half, grew = self.limit, self._rate_at.get(self.limit // 2), self._grew
        self._rate_at[limit] = rate
        if rate < (1.0 - MARGIN) / one:
            if self._probing:  # a failed probe: plain passes, and a longer wait before the next
                self._failed_probe()
            else:  # far below (under half the plain rate): a quarter, else half
                self.limit //= 4 if rate < 0.5 / one else 2
            self._probing = self._probing and self.limit > 0
        elif rate > (1.0 + MARGIN) / one:
            self._probing, self.wait = False, FIRST_WAIT
            if half is not None and rate < (1.0 - MARGIN) * half:  # half the limit earned more: back, hold
                self.limit //= 2
                self._hold, self._hold_wait = self._hold_wait, min(2 * self._hold_wait, MAX_WAIT)
            else:
                if grew:  # the doubling paid: the next failed one holds briefly again
                    self._hold_wait = FIRST_WAIT
                # the limit, not the cost, bounded the trees: a larger one may earn more
                if self._hold == 0 and max(n for n, _, _ in self._win) >= limit:
                    self.limit = min(2 * limit, self.cap)
        self._grew = self.limit > limit
