"""Suffix-matched continuations (DESIGN.md section 4): find, and merge into a tree as a chain.

``suffix_continuation`` finds the longest suffix of the request's tokens (prompt and
generated) that occurred earlier in them and returns what followed it; ``add_chain``
merges such a chain below a tree's root, sharing existing prefixes. Prompt lookup (``pld``)
proposes the chain alone; RECAP adds it before its best-first search. Pure functions
over token lists and a ``recap.drafting.tree.DraftTree``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from recap.drafting.treecost import PassCost
from recap.memory.fastpath import plain_sum

if TYPE_CHECKING:  # the tree module re-exports these functions: no import at run time
    from recap.drafting.tree import DraftTree


def add_chain(
    tree: DraftTree,
    chain: Sequence[int],
    *,
    max_new: int,
    max_depth: int,
    confidence: float = 0.5,
    origin: str = "suffix",
    cost: PassCost | None = None,
) -> int:
    """Merge a chain below the root, sharing existing prefixes. Returns nodes added.

    cost: stop at the first new node that does not pay for itself (as in ``best_first``).
    """
    node, added = 0, 0
    mat = 1.0 + plain_sum(tree.scores[1:]) if cost is not None else 0.0
    for tok in chain:
        if tree.depths[node] >= max_depth:
            break
        nxt = tree.child(node, tok)
        if nxt is None:
            if added >= max_new:
                break
            score = tree.scores[node] * confidence
            if cost is not None:
                b = len(tree) - 1
                if b >= cost.cap or score * cost.seconds[b] <= cost.marginal[b] * mat:
                    break
                mat += score
            nxt = tree.add(node, tok, score=score, suffix=True, origin=origin)
            added += 1
        else:
            tree.suffix[nxt] = True
        node = nxt
    return added


def suffix_continuation(
    seq: Sequence[int],
    *,
    min_len: int = 2,
    max_len: int = 8,
    max_tokens: int = 8,
    blocked: frozenset[int] = frozenset(),
) -> list[int]:
    """Tokens that followed the longest earlier occurrence of ``seq``'s suffix.

    Finds the longest suffix of ``seq`` (length between min_len and max_len) that also
    ends at an earlier position, latest occurrence on ties, and returns up to
    ``max_tokens`` tokens that followed it. ``blocked`` tokens (image placeholders) never
    match and end a continuation.
    """
    n = len(seq)
    if n < min_len + 1:
        return []
    last = seq[-1]
    best_len, best_end = 0, -1
    for end in range(n - 2, -1, -1):  # candidate earlier end positions, latest first
        if seq[end] != last or last in blocked:
            continue
        length = 1
        while (
            length < max_len
            and end - length >= 0
            and seq[end - length] == seq[n - 1 - length]
            and seq[end - length] not in blocked
        ):
            length += 1
        if length > best_len:
            best_len, best_end = length, end
            if length == max_len:
                break
    if best_len < min_len:
        return []
    out: list[int] = []
    for tok in seq[best_end + 1 : best_end + 1 + max_tokens]:
        if tok in blocked:
            break
        out.append(tok)
    return out
