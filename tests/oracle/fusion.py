"""Entropy-confidence fusion of memory entries over ``Entry`` objects (DESIGN.md section 3;
``recap.memory.fusion``'s reference).

The entries after one context, most specific first (M3, M2, M1), are weighted (``fusion_weights``)
and mixed: each token's fused probability is the weighted sum of its renormalised probabilities,
the tokens sorted by it, highest first, ties in the order first seen. One entry alone, or one
prediction filed under every key, is its own distribution.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from recap.core.config import FUSION_MODES
from recap.memory.rows import Entry

KEY_LENGTH = {"m1": 1, "m2": 2, "m3": 3}
FIXED_WEIGHTS = (0.70, 0.20, 0.10)


def plain_sum(values: Iterable[float]) -> float:
    """``sum`` added left to right (from Python 3.12 ``sum`` of floats compensates; the kernels do not)."""
    total = 0.0
    for v in values:
        total += v
    return total


class Fused(NamedTuple):
    """A fused next-token distribution and how it was made."""

    tokens: tuple[int, ...]
    probs: tuple[float, ...]
    sources: tuple[tuple[str, float, Entry], ...]
    contextual: bool = False


def _same(e: Entry, first: Entry) -> bool:
    """The same prediction (one write filed under several keys)."""
    return e is first or (first.uid >= 0 and e.uid == first.uid)


def single(kind: str, entry: Entry) -> Fused:
    return Fused(entry.ids, entry.normalised(), ((kind, 1.0, entry),), contextual=kind != "m1")


def fusion_weights(
    entries: Sequence[tuple[str, Entry]],
    specificity: Sequence[float] = (1.0, 2.0, 4.0),
    eps: float = 0.05,
    mode: str = "entropy",
) -> list[float]:
    if not entries:
        return []
    if mode == "entropy":
        raw = [specificity[KEY_LENGTH[kind] - 1] * (e.concentration + eps) for kind, e in entries]
    elif mode == "fixed":
        raw = [FIXED_WEIGHTS[min(i, len(FIXED_WEIGHTS) - 1)] for i in range(len(entries))]
    elif mode == "backoff":
        raw = [1.0] + [0.0] * (len(entries) - 1)
    else:
        raise ValueError(f"fusion mode must be one of {FUSION_MODES}, got {mode!r}")
    total = plain_sum(raw)
    if total <= 0:
        return [1.0 / len(entries)] * len(entries)
    return [r / total for r in raw]


def fuse(
    entries: Sequence[tuple[str, Entry]],
    specificity: Sequence[float] = (1.0, 2.0, 4.0),
    eps: float = 0.05,
    mode: str = "entropy",
) -> Fused:
    if len(entries) == 1:
        return single(*entries[0])
    weights = fusion_weights(entries, specificity, eps, mode)
    contextual = any(kind != "m1" for kind, _ in entries)
    sources = tuple((kind, w, e) for w, (kind, e) in zip(weights, entries))
    first = entries[0][1]
    if all(_same(e, first) for _, e in entries[1:]):  # one prediction under every key
        return Fused(first.ids, first.normalised(), sources, contextual)
    mixed: dict[int, float] = {}  # token -> fused probability, in the order first seen
    for w, (_, e) in zip(weights, entries):
        if w == 0.0:  # an entry of no weight proposes nothing
            continue
        for t, p in zip(e.ids, e.normalised()):
            mixed[t] = mixed.get(t, 0.0) + w * p
    tokens = sorted(mixed, key=lambda t: mixed[t], reverse=True)  # stable: ties in the order first seen
    return Fused(tuple(tokens), tuple(mixed[t] for t in tokens), sources, contextual)
