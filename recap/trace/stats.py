"""A decode's acceptance figures, computed from its trace alone (no model).

The figures people ask of a speculative decoder, with their definitions:

- **drafted** per step: the nodes the draft proposed (the tree's size, root excluded);
- **accepted** per step: the drafted tokens the target accepted (the accepted path below the root);
  the step also emits one token of the target's own (the bonus), so it produces accepted + 1,
  fewer when a stop (EOS, ``max_new_tokens``) cut it;
- **tokens per pass**: the tokens emitted over the target's decode passes (one pass per step: MAT);
- **per-depth conditional acceptance**: for depth d >= 1, P(the draft's token at depth d is
  accepted | depth d - 1 was). A step *observes* depth d when depth d - 1 was accepted (the root is
  depth 0, always) and the draft proposed a token at depth d under that accepted node; it accepts
  it when the path reaches depth d. A position the draft did not reach (the accepted node has no
  child) is unobserved, not a rejection, and neither is one a stop cut off (a child holding the
  very token the target chose there). The rate of a depth never observed is None, not 0;
- **accepted-length histogram**: steps by their accepted drafted tokens (0, 1, 2, ...);
- **acceptance rate** of a request: accepted / drafted over its steps (None when nothing was
  drafted). Per request rather than pooled over tokens, so that long answers do not dominate
  (``rate_histogram``): a very low rate flags garbled output, a very high one a repetition loop.

``step_counts`` reads one step's four numbers (``StepCounts``) from a ``TraceStep`` or from the
tree's plain lists (``counts_of``: the benchmark reads the engine's step records with it);
``acceptance`` turns a sequence of them into ``AcceptanceStats``; ``run_stats`` does both for a
``DecodeTrace`` or a ``Generation`` (its trace); ``pooled`` aggregates several requests;
``AcceptanceStats.from_dict`` reads back ``to_dict`` (results.json); ``generation_line`` is the line
``python -m recap generate`` prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from recap.trace.format import DecodeTrace, TraceStep


@dataclass(frozen=True)
class StepCounts:
    """One step's acceptance, as four numbers."""

    drafted: int  # nodes the draft proposed (root excluded)
    accepted: int  # drafted tokens accepted (the accepted path's depth)
    rejected_next: bool  # the draft proposed a token after the accepted path and the target refused it
    emitted: int  # tokens the step produced (accepted + the bonus, or fewer at a stop)


@dataclass(frozen=True)
class DepthAcceptance:
    """Depth d's conditional acceptance: of the steps that observed depth d (depth d - 1 accepted and a
    token drafted at d under it), how many accepted it."""

    depth: int
    observed: int
    accepted: int

    @property
    def rate(self) -> float | None:
        """P(depth d accepted | depth d - 1 accepted); None when no step observed this depth."""
        return self.accepted / self.observed if self.observed else None


@dataclass(frozen=True)
class AcceptanceStats:
    """One request's (or several requests', pooled) acceptance figures; see the module's definitions."""

    steps: int
    tokens: int  # tokens emitted
    drafted: int
    accepted: int  # drafted tokens accepted
    per_depth: tuple[DepthAcceptance, ...]  # depths 1, 2, ...
    accepted_hist: dict[int, int]  # accepted drafted tokens in a step -> steps
    drafted_per_step: tuple[int, ...] = field(default=())
    accepted_per_step: tuple[int, ...] = field(default=())
    requests: int = 1

    @property
    def tokens_per_pass(self) -> float:
        """Tokens emitted per target decode pass (MAT); 0 without steps."""
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    def depth_rates(self) -> list[float | None]:
        """The per-depth conditional rates, depth 1 first (None: never observed)."""
        return [d.rate for d in self.per_depth]

    def to_dict(self, *, per_step: bool = False) -> dict[str, Any]:
        """Plain JSON values (results.json): the histogram's keys as strings, rates rounded to 6 places."""
        out: dict[str, Any] = {
            "requests": self.requests, "steps": self.steps, "tokens": self.tokens, "drafted": self.drafted,
            "accepted": self.accepted, "tokens_per_pass": round(self.tokens_per_pass, 6),
            "acceptance_rate": _round(self.acceptance_rate),
            "per_depth": [{"depth": d.depth, "observed": d.observed, "accepted": d.accepted,
                           "rate": _round(d.rate)} for d in self.per_depth],
            "accepted_hist": {str(k): v for k, v in sorted(self.accepted_hist.items())},
        }
        if per_step:
            out["drafted_per_step"] = list(self.drafted_per_step)
            out["accepted_per_step"] = list(self.accepted_per_step)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AcceptanceStats:
        """Read back ``to_dict``'s values (a results.json record's ``acceptance``); rates are recomputed
        from the counts, so they are the same numbers, not rounded twice."""
        return cls(
            steps=int(d["steps"]), tokens=int(d["tokens"]), drafted=int(d["drafted"]),
            accepted=int(d["accepted"]),
            per_depth=tuple(DepthAcceptance(int(x["depth"]), int(x["observed"]), int(x["accepted"]))
                            for x in d.get("per_depth", [])),
            accepted_hist={int(k): int(v) for k, v in d.get("accepted_hist", {}).items()},
            drafted_per_step=tuple(d.get("drafted_per_step", ())),
            accepted_per_step=tuple(d.get("accepted_per_step", ())),
            requests=int(d.get("requests", 1)),
        )

    def summary(self) -> str:
        """One line, e.g. ``3.10 tokens/pass; 41% of 820 drafted accepted; by depth 0.62 0.55 0.40 -``."""
        rate = self.acceptance_rate
        depths = " ".join("-" if r is None else f"{r:.2f}" for r in self.depth_rates()[:8])
        return (f"{self.tokens_per_pass:.2f} tokens/pass; "
                + (f"{rate:.0%} of {self.drafted} drafted accepted" if rate is not None
                   else "nothing drafted")
                + (f"; accepted by depth {depths}" if depths else ""))


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def counts_of(parents: Sequence[int], tokens: Sequence[int], chosen: Sequence[int],
              path: Sequence[int], emitted: int) -> StepCounts:
    """A step's counts from its tree's plain lists: node i's ``parents[i]`` and ``tokens[i]``, the token the
    target chose after it (``chosen[i]``: its argmax or draw) and the accepted ``path`` of node indices
    from the root (0). A child of the last accepted node holding the target's choice was cut by a stop,
    not refused: that position counts as unobserved."""
    if not path or path[0] != 0:
        raise ValueError(f"the accepted path must start at the root (node 0), got {list(path)[:4]}")
    last = path[-1]
    if not 0 <= last < len(tokens):
        raise ValueError(f"the accepted path names node {last}, but the tree has {len(tokens)} nodes")
    children = [i for i, p in enumerate(parents) if p == last]
    refused = bool(children) and all(tokens[i] != chosen[last] for i in children)
    return StepCounts(drafted=len(tokens) - 1, accepted=len(path) - 1, rejected_next=refused, emitted=emitted)


def step_counts(step: TraceStep) -> StepCounts:
    """One trace step's counts (see ``counts_of``)."""
    nodes = step.nodes
    return counts_of([n.parent for n in nodes], [n.token for n in nodes], [n.target_token for n in nodes],
                     step.accepted, len(step.emitted))


def acceptance(
    counts: Iterable[StepCounts], *, depths: int | None = None, requests: int = 1
) -> AcceptanceStats:
    """The figures of a sequence of steps. ``depths``: report depths 1..depths (e.g. the config's
    ``max_depth``, so that a depth never reached shows, with rate None); by default up to the deepest
    depth observed."""
    counts = list(counts)
    deepest = max((c.accepted + c.rejected_next for c in counts), default=0)
    n = deepest if depths is None else max(depths, 0)
    observed, accepted = [0] * (n + 1), [0] * (n + 1)
    hist: dict[int, int] = {}
    for c in counts:
        hist[c.accepted] = hist.get(c.accepted, 0) + 1
        for d in range(1, min(c.accepted, n) + 1):
            observed[d] += 1
            accepted[d] += 1
        if c.rejected_next and c.accepted + 1 <= n:
            observed[c.accepted + 1] += 1
    return AcceptanceStats(
        steps=len(counts), tokens=sum(c.emitted for c in counts), drafted=sum(c.drafted for c in counts),
        accepted=sum(c.accepted for c in counts),
        per_depth=tuple(DepthAcceptance(d, observed[d], accepted[d]) for d in range(1, n + 1)),
        accepted_hist=dict(sorted(hist.items())),
        drafted_per_step=tuple(c.drafted for c in counts),
        accepted_per_step=tuple(c.accepted for c in counts),
        requests=requests,
    )


def _trace(run: Any) -> DecodeTrace:
    trace = run if isinstance(run, DecodeTrace) else getattr(run, "trace", None)
    if not isinstance(trace, DecodeTrace):
        raise ValueError(
            f"acceptance figures need a DecodeTrace or a Generation with its trace "
            f"(recap.generate(..., trace=True)); got {type(run).__name__}"
            + (" without one" if hasattr(run, "trace") else "")
        )
    return trace


def run_stats(run: DecodeTrace | Any, *, depths: int | None = None) -> AcceptanceStats:
    """A request's figures from its ``DecodeTrace`` or a ``Generation`` holding one (``trace=True``)."""
    return acceptance((step_counts(s) for s in _trace(run).steps), depths=depths)


def pooled(stats: Sequence[AcceptanceStats]) -> AcceptanceStats:
    """Several requests' figures aggregated: counts summed (each depth's observed and accepted), so a rate
    is pooled over steps; the per-step lists concatenated in order."""
    n = max((len(s.per_depth) for s in stats), default=0)
    observed, accepted = [0] * (n + 1), [0] * (n + 1)
    hist: dict[int, int] = {}
    for s in stats:
        for d in s.per_depth:
            observed[d.depth] += d.observed
            accepted[d.depth] += d.accepted
        for k, v in s.accepted_hist.items():
            hist[k] = hist.get(k, 0) + v
    return AcceptanceStats(
        steps=sum(s.steps for s in stats), tokens=sum(s.tokens for s in stats),
        drafted=sum(s.drafted for s in stats), accepted=sum(s.accepted for s in stats),
        per_depth=tuple(DepthAcceptance(d, observed[d], accepted[d]) for d in range(1, n + 1)),
        accepted_hist=dict(sorted(hist.items())),
        drafted_per_step=tuple(x for s in stats for x in s.drafted_per_step),
        accepted_per_step=tuple(x for s in stats for x in s.accepted_per_step),
        requests=sum(s.requests for s in stats),
    )


def rate_histogram(stats: Sequence[AcceptanceStats], bins: int = 10) -> list[int]:
    """Requests by their own acceptance rate, in ``bins`` equal bins of [0, 1] (a rate of 1 in the last);
    requests that drafted nothing are left out."""
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    out = [0] * bins
    for s in stats:
        rate = s.acceptance_rate
        if rate is not None:
            out[min(int(rate * bins), bins - 1)] += 1
    return out


def generation_line(run: Any) -> str:
    """The acceptance line ``python -m recap generate`` prints under its summary: from the trace when
    the run kept one (``trace=True``: per-depth rates), else from its accepted lengths alone (tokens
    emitted per pass; what was drafted is not known without the trace)."""
    trace = getattr(run, "trace", None)
    if isinstance(run, DecodeTrace) or isinstance(trace, DecodeTrace):
        return "acceptance: " + run_stats(run).summary()
    lengths = list(getattr(run, "accepted_lengths", []) or [])
    if not lengths:
        return "acceptance: no decode steps"
    hist: dict[int, int] = {}
    for n in lengths:
        hist[n] = hist.get(n, 0) + 1
    shown = " ".join(f"{k}x{v}" for k, v in sorted(hist.items()))
    return (f"acceptance: {sum(lengths) / len(lengths):.2f} tokens/pass; passes by tokens emitted {shown} "
            "(--trace adds the per-depth rates)")
