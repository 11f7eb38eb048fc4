"""Aliasing inspector logic (pure): where the 1-token memory's prediction was wrong.

A *decoding state* is a tree node the drafter expanded: it looked up the node's context
(its token and the ones before it) in the memories and proposed children. A node's
``sources`` are the memory entries used to PROPOSE it, looked up at its parent's context,
so for an expanded node ``p`` with children ``C``:

* what memory ``k`` (M1, M2, M3) predicted at ``p``: the ``k`` entry's own top-1 token
  (``SourceInfo.top_token``, recorded whether or not that token made it into the tree), with
  the entry's provenance (request, step, depth, same image);
* the fused top choice: the child with the highest fused probability;
* what the target wanted: ``p.target_token`` (its argmax at ``p``).

Traces written before ``top_token`` was recorded (it reads -1) fall back to the child in
``C`` to which the entry gave the highest probability: there, a memory's top-1 that lost the
best-first search is not seen.

A state is an *aliasing state* when M1's prediction differs from the target's token.
Each is classified:

* ``RECAP fixed it``: the fused choice (with contextual memories) was the target's token;
* ``both wrong``: contextual memories were there, but the fused choice was still wrong;
* ``contextual memory missing``: no M2 / M3 entry existed for that context (always so
  for Token Recycling, which has no contextual memories), so M1's guess stood.

Of the fixed states, those the *image-scoped* memories fixed (``RecapConfig.scoped_memory``)
are counted apart (``AliasingState.scoped_fix``, the summary's ``SCOPED_FIX``): a contextual
row that an earlier request on the same image wrote predicted the target's token, so without
the scoped rows the context could have had no M2 / M3 entry at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from recap.trace.aliasing_stats import strongest_entry
from recap.trace.format import DecodeTrace, TraceNode, TraceStep

FIXED = "RECAP fixed it"
BOTH_WRONG = "both wrong"
MISSING = "contextual memory missing"
VERDICTS = (FIXED, BOTH_WRONG, MISSING)
SCOPED_FIX = "fixed by this image's earlier requests"


@dataclass(frozen=True)
class Prediction:
    """What one memory predicted at a state: its best child, with the entry's provenance."""

    kind: str
    token: int
    text: str
    prob: float
    request: int
    step: int
    depth: int
    same_image: bool | None
    in_tree: bool = True  # the predicted token was drafted as a child of the state


@dataclass(frozen=True)
class AliasingState:
    step: int
    node: int  # the expanded node (the context's last token)
    key_token: int
    key_text: str
    depth: int
    on_path: bool  # the node is on the accepted path (a real decoding state, not a rejected branch)
    target_token: int
    target_text: str
    m1: Prediction
    m2: Prediction | None
    m3: Prediction | None
    fused_token: int
    fused_text: str
    verdict: str
    # fixed, and an earlier request on this image wrote a contextual row that was right
    scoped_fix: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def children_of(step: TraceStep) -> dict[int, list[TraceNode]]:
    kids: dict[int, list[TraceNode]] = {}
    for n in step.nodes[1:]:
        kids.setdefault(n.parent, []).append(n)
    return kids


def memory_prediction(children: Iterable[TraceNode], kind: str) -> Prediction | None:
    """What the ``kind`` entry at these children's context predicted (None: no such entry).

    Its recorded top-1 token when the trace has one; else (older traces) the child to which
    it gave the highest probability.
    """
    children = list(children)
    found = strongest_entry(children, kind)
    if found is None:
        return None
    child, src = found
    prob = src.prob
    if src.top_token >= 0:
        drafted = any(c.token == src.top_token for c in children)
        return Prediction(kind, src.top_token, src.top_text, src.top_prob, src.request, src.step, src.depth,
                          src.same_image, drafted)  # fmt: skip
    return Prediction(kind, child.token, child.text, prob, src.request, src.step, src.depth, src.same_image)


def classify(
    m1: Prediction, m2: Prediction | None, m3: Prediction | None, fused_token: int, target: int
) -> str:
    if m2 is None and m3 is None:
        return MISSING
    return FIXED if fused_token == target else BOTH_WRONG


def scoped_fix(verdict: str, target: int, request: int | None, *contextual: Prediction | None) -> bool:
    """A fixed state where a contextual prediction of the target came from an earlier request on
    this image (``request``: the run's own number; None: unknown, never counted)."""
    return (
        verdict == FIXED
        and request is not None
        and any(
            p is not None and p.token == target and p.request != request and p.same_image is True
            for p in contextual
        )
    )


def step_states(step: TraceStep, request: int | None = None) -> list[AliasingState]:
    """Every aliasing state of one step (expanded nodes where M1's prediction was wrong).

    ``request``: the run's request number (``DecodeTrace.request``), which tells the rows earlier
    requests wrote from the run's own (``AliasingState.scoped_fix``).
    """
    out: list[AliasingState] = []
    on_path = set(step.accepted)
    for parent, kids in sorted(children_of(step).items()):
        proposed = [k for k in kids if k.sources]
        m1 = memory_prediction(proposed, "m1")
        if m1 is None:
            continue
        p = step.nodes[parent]
        if m1.token == p.target_token:
            continue
        m2 = memory_prediction(proposed, "m2")
        m3 = memory_prediction(proposed, "m3")
        fused = max(proposed, key=lambda n: (n.fused, -n.index))
        verdict = classify(m1, m2, m3, fused.token, p.target_token)
        out.append(
            AliasingState(
                step=step.step,
                node=parent,
                key_token=p.token,
                key_text=p.text,
                depth=p.depth,
                on_path=parent in on_path,
                target_token=p.target_token,
                target_text=p.target_text,
                m1=m1,
                m2=m2,
                m3=m3,
                fused_token=fused.token,
                fused_text=fused.text,
                verdict=verdict,
                scoped_fix=scoped_fix(verdict, p.target_token, request, m3, m2),
            )
        )
    return out


def trace_states(
    trace: DecodeTrace, *, on_path_only: bool = False, from_request: int | None = None
) -> list[AliasingState]:
    """All aliasing states of a run, optionally only on accepted paths / with M1 from one request."""
    states = [s for step in trace.steps for s in step_states(step, trace.request)]
    if on_path_only:
        states = [s for s in states if s.on_path]
    if from_request is not None:
        states = [s for s in states if s.m1.request == from_request]
    return states


def expanded_states(trace: DecodeTrace) -> int:
    """How many states (expanded nodes with an M1 entry) the run had, aliasing or not."""
    n = 0
    for step in trace.steps:
        for kids in children_of(step).values():
            if any(src.kind == "m1" for k in kids for src in k.sources):
                n += 1
    return n


def summary(states: list[AliasingState], total: int | None = None) -> dict[str, int]:
    """Counts per verdict (every verdict present, zero when none), plus totals."""
    counts = Counter(s.verdict for s in states)
    out = {v: counts.get(v, 0) for v in VERDICTS}
    out["aliasing states"] = len(states)
    out["on accepted path"] = sum(s.on_path for s in states)
    out["M1 from another image"] = sum(s.m1.same_image is False for s in states)
    out[SCOPED_FIX] = sum(s.scoped_fix for s in states)
    if total is not None:
        out["expanded states"] = total
    return out
