"""What aliasing cost a run: its refused drafted tokens by source, computed from the trace alone.

A drafted token is **refused** when the target checked it and said no: its parent is on the step's
accepted path, it is not, and it is not the target's own token (a child holding the target's token
that is not on the path was cut by a stop, not refused). Tokens drafted below a refused or unreached
node were never checked; they are counted apart (``unchecked``).

Each refusal is put under its **source**, the node's origin, and an M1 refusal under where M1's row
was written (its ``SourceInfo``): ``M1 · prompt`` (a prefill position, ``step`` 0), ``M1 · this
image`` / ``M1 · another image`` (``same_image``), ``M1 · unknown`` (not recorded); then ``M2``,
``M3``, ``suffix``, ``mixed`` and any other origin by its own name.

A refusal **M2/M3 would have fixed**: at its context (its parent), the M2 or M3 entry's own top-1
prediction (``SourceInfo.top_token``, recorded whether or not it was drafted) was the target's
token. ``contextual`` counts the refusals whose context had an M2 or M3 entry at all; a run that
records none (Token Recycling) has ``fixable_share`` None, not 0.

The **contexts that alias most** group refusals by the context's last token (the key M1 reads),
worst first; each names the first state (step and node) where it happened, so a view can open it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from recap.trace.format import DecodeTrace, SourceInfo, TraceNode, TraceStep

#: The order sources are listed in (others follow by name).
SOURCE_ORDER = ("M1 · this image", "M1 · another image", "M1 · prompt", "M1 · unknown", "M2", "M3", "suffix",
                "mixed")
CONTEXTUAL = ("m2", "m3")


@dataclass(frozen=True)
class Refusal:
    """One refused drafted token."""

    step: int
    node: int
    parent: int  # the state (context) where it was refused
    token: int
    text: str
    target_text: str  # what the target wanted there
    source: str  # see SOURCE_ORDER
    contextual: bool  # an M2 or M3 entry existed at the context
    fixable: bool  # the M2 or M3 entry's own prediction there was the target's token


@dataclass(frozen=True)
class AliasingContext:
    """A context (its last token) and the refusals made there; ``step``/``node``: its first state."""

    token: int
    text: str
    refusals: int
    m1: int  # of them, M1's
    fixable: int
    step: int
    node: int


@dataclass(frozen=True)
class AliasingCost:
    """A run's refused drafted tokens (see the module's definitions)."""

    drafted: int
    accepted: int
    refused: int
    unchecked: int
    by_source: dict[str, int]
    contextual: int
    fixable: int
    contexts: tuple[AliasingContext, ...]
    refusals: tuple[Refusal, ...] = field(default=(), repr=False)

    @property
    def fixable_share(self) -> float | None:
        """The share of refusals M2/M3 would have fixed; None when no context had an M2/M3 entry."""
        return self.fixable / self.refused if self.refused and self.contextual else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (the export)."""
        out = asdict(self)
        del out["refusals"]
        out["fixable_share"] = None if self.fixable_share is None else round(self.fixable_share, 6)
        return out


def _m1_provenance(node: TraceNode) -> str:
    src = next((s for s in node.sources if s.kind == "m1"), None)
    if src is None:
        return "M1 · unknown"
    if src.step == 0:
        return "M1 · prompt"
    return {True: "M1 · this image", False: "M1 · another image"}.get(src.same_image, "M1 · unknown")  # type: ignore[arg-type]


def source_of(node: TraceNode) -> str:
    """A drafted node's source as this module names it."""
    if node.origin == "m1":
        return _m1_provenance(node)
    return {"m2": "M2", "m3": "M3"}.get(node.origin, node.origin)


def strongest_entry(children: Iterable[TraceNode], kind: str) -> tuple[TraceNode, SourceInfo] | None:
    """Among these siblings' sources, the ``kind`` memory entry that gave its child the most probability,
    with that child (None: no ``kind`` entry proposed any of them). The Aliasing tab reads it too."""
    best: tuple[float, TraceNode, SourceInfo] | None = None
    for child in children:
        for src in child.sources:
            if src.kind == kind and (best is None or src.prob > best[0]):
                best = (src.prob, child, src)
    return None if best is None else (best[1], best[2])


def _prediction(children: list[TraceNode], kind: str) -> int | None:
    """The ``kind`` entry's own top-1 token at these children's context (None: no such entry); traces
    that predate ``top_token`` fall back to the child the entry gave the most probability."""
    found = strongest_entry(children, kind)
    if found is None:
        return None
    child, src = found
    return src.top_token if src.top_token >= 0 else child.token


def step_refusals(step: TraceStep) -> tuple[list[Refusal], int]:
    """A step's refusals, and its drafted tokens that were never checked."""
    on_path = set(step.accepted)
    kids: dict[int, list[TraceNode]] = {}
    for n in step.nodes[1:]:
        kids.setdefault(n.parent, []).append(n)
    out: list[Refusal] = []
    checked = 0
    for parent in step.accepted:
        children = kids.get(parent, [])
        checked += len(children)
        want = step.nodes[parent].target_token
        contextual = [p for p in (_prediction(children, k) for k in CONTEXTUAL) if p is not None]
        for child in children:
            if child.index in on_path or child.token == want:  # accepted, or cut by a stop
                continue
            out.append(Refusal(
                step=step.step, node=child.index, parent=parent, token=child.token, text=child.text,
                target_text=step.nodes[parent].target_text, source=source_of(child),
                contextual=bool(contextual), fixable=want in contextual,
            ))
    return out, len(step.nodes) - 1 - checked


def aliasing_cost(trace: DecodeTrace, top: int = 10) -> AliasingCost:
    """A run's aliasing cost; ``top``: how many contexts to list, worst first."""
    refusals: list[Refusal] = []
    unchecked = 0
    for step in trace.steps:
        got, never = step_refusals(step)
        refusals += got
        unchecked += never
    counts = Counter(r.source for r in refusals)
    by_source = {s: counts[s] for s in SOURCE_ORDER if counts.get(s)}
    by_source.update({s: n for s, n in sorted(counts.items()) if s not in by_source})
    steps = {s.step: s for s in trace.steps}
    groups: dict[int, list[Refusal]] = {}
    for r in refusals:
        groups.setdefault(steps[r.step].nodes[r.parent].token, []).append(r)
    contexts = []
    for token, rs in groups.items():
        first = rs[0]
        contexts.append(AliasingContext(
            token=token, text=steps[first.step].nodes[first.parent].text, refusals=len(rs),
            m1=sum(r.source.startswith("M1") for r in rs), fixable=sum(r.fixable for r in rs),
            step=first.step, node=first.parent,
        ))
    contexts.sort(key=lambda c: (-c.refusals, c.step, c.node))
    return AliasingCost(
        drafted=sum(len(s.nodes) - 1 for s in trace.steps),
        accepted=sum(len(s.accepted) - 1 for s in trace.steps),
        refused=len(refusals), unchecked=unchecked, by_source=by_source,
        contextual=sum(r.contextual for r in refusals), fixable=sum(r.fixable for r in refusals),
        contexts=tuple(contexts[:top]), refusals=tuple(refusals),
    )
