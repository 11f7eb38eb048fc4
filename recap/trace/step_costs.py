"""What a step's tree was worth and where a run's time went, computed from the trace alone (no model).

Two questions a speculative decoder must answer with numbers:

- **Why this size** (``step_size``): for one step, the expected gain of each node the drafter took, in
  the order it took them (the tree's node scores: a node's chance of being accepted, calibrated for a
  cost-aware tree), against the gain a node needed to pay for itself at the measured cost
  (``TreeSizing.needed_gain``), and where growth stopped; then the step's predicted tokens per second
  (``TreeSizing.expected_tokens / TreeSizing.pass_s``) against the realised ones (the tokens the step
  emitted over its measured seconds: ``TreeSizing.realised_s`` when the trace records it, else the
  step's draft + verify + update timings). A fixed tree (no ``sizing``) has gains but no needed gain
  and no prediction: those read None ("unknown"), never 0.
- **Where the time goes** (``time_split``): a run's cumulative draft / verify / update seconds step
  by step, against what one-token decoding takes for the same tokens (the one-token pass time times
  the tokens), and the break-even: the tokens per pass a tree of this run's size must reach to pay,
  pass time at that size over the one-token pass time. The one-token pass time comes from an ``ar``
  run of the same request when there is one (``one_token_seconds``), else from the trace's sizing
  (``TreeSizing.one_token_s``, the pass cost at 0 nodes, when recorded), else it is not measured.

The ``TreeSizing`` fields ``realised_s`` and ``one_token_s`` are 0.0 (unknown) in traces that predate
them or whose tree no size loop chose: such a step reads "unknown".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from recap.trace.format import DecodeTrace, TraceStep


@dataclass(frozen=True)
class NodeGain:
    """One node the drafter took: its place in the order taken (1, 2, ...), its index, its gain."""

    taken: int
    node: int
    gain: float  # the node's score: its expected contribution to the step's tokens
    text: str
    accepted: bool


@dataclass(frozen=True)
class StepSize:
    """One step's tree size, node by node, and its predicted against realised speed (None: unknown)."""

    step: int
    gains: tuple[NodeGain, ...]  # the nodes in the order they were taken (root excluded)
    expected_tokens: float  # 1 (the bonus) + every node's gain: the tokens the tree expected
    emitted: int  # the tokens the step produced
    seconds: float  # the step's measured seconds (0: not measured)
    stop: str  # "cost", "budget", "exhausted"; "" for a tree grown without a measured cost
    needed_gain: float | None  # what the next node's gain had to exceed (None: no cost recorded)
    pass_s: float | None  # the pass cost the sizing measured at this size (None: not recorded)

    @property
    def predicted_tps(self) -> float | None:
        """Expected tokens over the measured pass cost; None without a recorded cost."""
        return self.expected_tokens / self.pass_s if self.pass_s else None

    @property
    def realised_tps(self) -> float | None:
        """Tokens emitted over the step's measured seconds; None when not measured."""
        return self.emitted / self.seconds if self.seconds > 0 else None

    @property
    def stop_at(self) -> int:
        """How many nodes were taken before growth stopped (the stop point on the gain chart)."""
        return len(self.gains)


def pass_seconds(step: TraceStep) -> float:
    """The step's draft + verify + update seconds, as its trace timed them."""
    return step.draft_s + step.verify_s + step.update_s


def step_seconds(step: TraceStep) -> float:
    """A step's measured seconds: ``TreeSizing.realised_s`` when recorded, else ``pass_seconds``."""
    recorded = step.sizing.realised_s if step.sizing is not None else 0.0
    return recorded or pass_seconds(step)


def step_size(step: TraceStep) -> StepSize:
    """Why this step's tree has its size (see the module's definitions)."""
    order = [i for i in step.insertion_order() if i != 0]
    on_path = set(step.accepted)
    gains = tuple(
        NodeGain(taken=k, node=i, gain=step.nodes[i].score, text=step.nodes[i].text, accepted=i in on_path)
        for k, i in enumerate(order, start=1)
    )
    sizing = step.sizing
    expected = sizing.expected_tokens if sizing is not None else 1.0 + sum(g.gain for g in gains)
    return StepSize(
        step=step.step, gains=gains, expected_tokens=round(float(expected), 6), emitted=len(step.emitted),
        seconds=step_seconds(step), stop=sizing.stop if sizing is not None else "",
        needed_gain=sizing.needed_gain if sizing is not None else None,
        pass_s=sizing.pass_s if sizing is not None and sizing.pass_s > 0 else None,
    )


@dataclass(frozen=True)
class TimeSplit:
    """A run's time, step by step, against one-token decoding of the same tokens."""

    steps: tuple[int, ...]
    draft_s: tuple[float, ...]  # cumulative after each step
    verify_s: tuple[float, ...]
    update_s: tuple[float, ...]
    tokens: tuple[int, ...]  # cumulative tokens emitted after each step
    one_token_s: float  # one one-token pass (0: not measured)
    one_token_source: str  # "ar run", "sizing" or "" (not measured)
    mean_pass_s: float  # this run's mean step seconds (draft + verify + update): the pass at its size

    @property
    def total_s(self) -> float:
        return (self.draft_s[-1] + self.verify_s[-1] + self.update_s[-1]) if self.steps else 0.0

    @property
    def one_token_total_s(self) -> float | None:
        """What one-token decoding takes for this run's tokens (None: not measured)."""
        return self.one_token_s * self.tokens[-1] if self.one_token_s > 0 and self.steps else None

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens[-1] / len(self.steps) if self.steps else 0.0

    @property
    def break_even(self) -> float | None:
        """Tokens per pass a tree of this size must reach to pay: its pass time over one token's."""
        return self.mean_pass_s / self.one_token_s if self.one_token_s > 0 and self.mean_pass_s > 0 else None

    @property
    def speedup(self) -> float | None:
        """One-token decoding's time for the same tokens over this run's (None: not measured)."""
        one = self.one_token_total_s
        return one / self.total_s if one is not None and self.total_s > 0 else None


def one_token_seconds(ar: DecodeTrace | None) -> float:
    """One one-token pass of an ``ar`` run: its draft + verify + update seconds over its steps (0: none)."""
    if ar is None or not ar.steps:
        return 0.0
    return sum(map(pass_seconds, ar.steps)) / len(ar.steps)


def sizing_one_token_s(trace: DecodeTrace) -> float:
    """The pass cost at 0 nodes the trace's sizing recorded (``TreeSizing.one_token_s``; median over the
    steps that have one); 0.0 when none did."""
    got = [s.sizing.one_token_s for s in trace.steps if s.sizing is not None and s.sizing.one_token_s > 0]
    return statistics.median(got) if got else 0.0


def time_split(trace: DecodeTrace, ar: DecodeTrace | None = None) -> TimeSplit:
    """A run's cumulative draft / verify / update seconds and its one-token baseline (see the module).
    ``ar``: an ``ar`` run of the same request (Compare has one); its pass time is the baseline."""
    draft = verify = update = 0.0
    tokens = 0
    cd, cv, cu, ct = [], [], [], []
    for s in trace.steps:
        draft, verify, update = draft + s.draft_s, verify + s.verify_s, update + s.update_s
        tokens += len(s.emitted)
        cd.append(draft)
        cv.append(verify)
        cu.append(update)
        ct.append(tokens)
    one, source = one_token_seconds(ar), "ar run"
    if one <= 0:
        one, source = sizing_one_token_s(trace), "sizing"
    if one <= 0:
        source = ""
    n = len(trace.steps)
    return TimeSplit(
        steps=tuple(s.step for s in trace.steps), draft_s=tuple(cd), verify_s=tuple(cv), update_s=tuple(cu),
        tokens=tuple(ct), one_token_s=one, one_token_source=source,
        mean_pass_s=(draft + verify + update) / n if n else 0.0,
    )
