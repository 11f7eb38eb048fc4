"""Entropy-confidence fusion of memory entries (DESIGN.md section 3).

For the entries found for a context (any of M3, M2, M1), each with key length n_j
and top-k distribution q_j (renormalised over its k tokens):

    specificity  s(n)  increasing in key length (default 1, 2, 4 for n = 1, 2, 3)
    concentration c_j = 1 - H(q_j) / log k           (low entropy = confident)
    weight        w_j = s(n_j) * (c_j + eps), normalised over the entries
    fused         p(x) = sum_j w_j * q_j(x)

Two ablation modes share the interface: ``"fixed"`` (weights by specificity rank,
0.70 / 0.20 / 0.10 as in the authors' development code) and ``"backoff"`` (only the
most specific entry). All functions are pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from recap.core.config import FUSION_MODES
from recap.memory.fastpath import plain_sum
from recap.memory.store import Entry

KEY_LENGTH = {"m1": 1, "m2": 2, "m3": 3}
FIXED_WEIGHTS = (0.70, 0.20, 0.10)


_new = tuple.__new__  # builds a Fused without its Python-level __new__ (one per expanded node)


class Fused(NamedTuple):
    """A fused next-token distribution and how it was made (a NamedTuple: one is built per expanded node)."""

    tokens: tuple[int, ...]  # candidate tokens, most probable first
    probs: tuple[float, ...]  # fused probabilities (sum to 1 over all candidates)
    sources: tuple[tuple[str, float, Entry], ...]  # (kind, weight, entry), most specific first
    contextual: bool = False  # a 2- or 3-token memory took part (its calibration class)


def _same(e: Entry, first: Entry) -> bool:
    """One prediction: the same Entry, or (one read back twice) the same uid (``Entry.uid``)."""
    return e is first or (first.uid >= 0 and e.uid == first.uid)


def single(kind: str, entry: Entry) -> Fused:
    """One source's own distribution, renormalised over its k tokens (no mixing to do)."""
    return _new(Fused, (entry.ids, entry.normalised(), ((kind, 1.0, entry),), kind != "m1"))


def fusion_weights(
    entries: Sequence[tuple[str, Entry]],
    specificity: Sequence[float] = (1.0, 2.0, 4.0),
    eps: float = 0.05,
    mode: str = "entropy",
) -> list[float]:
    """Normalised weights for entries given most specific first (kinds "m1" / "m2" / "m3").

    One weight per entry, in their order: non-negative, summing to 1 (uniform when every
    raw weight is 0); [] for no entries. A ValueError for a mode not in ``FUSION_MODES``.
    """
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
    """Fuse entries (most specific first, at least one) into one distribution over their tokens.

    The candidates are the union of the top-k of the entries with a positive weight, most
    probable first (ties keep the entries' order); their probabilities sum to 1. ``sources`` keeps each entry with its weight.
    """
    if len(entries) == 1:  # one source: its own distribution, renormalised over its k tokens
        return single(*entries[0])
    weights = fusion_weights(entries, specificity, eps, mode)
    contextual = any(kind != "m1" for kind, _ in entries)
    sources = tuple([(kind, w, e) for w, (kind, e) in zip(weights, entries)])
    first = entries[0][1]
    if _same(entries[1][1], first) and (len(entries) == 2 or all(_same(e, first) for _, e in entries[2:])):
        # All keys were last written at the same position (common): the mixture of one
        # distribution is that distribution, whatever the weights.
        return _new(Fused, (first.ids, first.normalised(), sources, contextual))
    acc: dict[int, float] = {}
    get = acc.get
    for w, (_, e) in zip(weights, entries):
        if w == 0.0:
            continue
        for t, p in zip(e.ids, e.normalised()):
            acc[t] = get(t, 0.0) + w * p
    prob_of = acc.__getitem__
    tokens = tuple(sorted(acc, key=prob_of, reverse=True))  # stable: ties keep source order
    return _new(Fused, (tokens, tuple(map(prob_of, tokens)), sources, contextual))
