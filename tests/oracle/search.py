"""RECAP's tree growth as its specification (DESIGN.md section 4): what ``recap.drafting.search``'s
kernel, ``recap.drafting.suffix.suffix_chain`` and ``recap.drafting.tree.layout`` must do, exactly.

A draft grows below the root (the request's last token, score 1):

1. The suffix continuation (``suffix_continuation``): the longest suffix of the request, min_len
   to max_len tokens and no image placeholder in it, that also ends at an earlier position (the
   latest such position); the tokens that followed it there, up to max_tokens and up to the first
   placeholder. ``add_chain`` puts them below the root as a chain: each node scored at its
   parent's score times the suffix proposal's (calibrated) rate, up to ``max_new`` nodes (the
   nodes reserved for it) and the depth limit.
2. Best-first search (``best_first``). The frontier holds entries, each with a score, in the
   order they entered it:
   - "the children of v", scored score(v) * depth_discount (an upper bound on their scores: a
     rate is at most 1). Taking it looks up v's context (the request's tokens, then the path
     down to v: the last three) and, if a memory knows it, lets v's best candidate enter;
   - "candidate r of v": the r-th token of v's fused distribution (most probable first), scored
     score(v) * depth_discount * rate(p_r). Taking it first lets candidate r + 1 enter (while
     r + 1 < max_children and p_{r+1} > 0), then adds the token below v (or adopts v's suffix-chain
     child with that token: it takes the fused probability and sources and keeps the higher
     score), and lets the new node's children enter while its depth < max_depth.
   The entry taken next is the highest-scored, the earliest to enter among equals. Growth stops
   at the budget of drafted nodes ("budget"), at the first new node that does not pay for itself
   ("cost", see ``pays``), or when the frontier is empty ("exhausted").
3. The layout (``laid_out``): depth-first, each node's children by score, highest first, ties
   by the order they were added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import count

from oracle.fusion import Fused, plain_sum
from recap.drafting.tree import FUSED, DraftTree
from recap.drafting.treecost import PassCost


def pays(cost: PassCost, drafted: int, score: float, expected: float) -> bool:
    """Whether a node of path score ``score`` (the tokens it adds per pass, in expectation) pays for
    itself on a tree of ``drafted`` nodes that expects ``expected`` tokens per pass: the tokens per
    second rise, (M + s) / T(b + 1) > M / T(b), i.e. s * T(b) > dT(b) * M. Never past the cost's cap.
    """
    return drafted < cost.cap and score * cost.seconds[drafted] > cost.marginal[drafted] * expected


def expected_tokens(tree: DraftTree) -> float:
    """The tokens a pass over ``tree`` emits in expectation: the bonus token plus every node's score."""
    return plain_sum([1.0, *tree.scores[1:]])


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
    """Merge ``chain`` below the root, sharing existing prefixes (marked as suffix nodes too), each
    new node scored at its parent's score times ``confidence``. Returns the nodes added: at most
    ``max_new``, none deeper than ``max_depth``, and (``cost``) none that does not pay for itself."""
    node, added = 0, 0
    expected = expected_tokens(tree)
    for tok in chain:
        if tree.depths[node] >= max_depth:
            break
        existing = tree.child(node, tok)
        if existing is not None:
            tree.suffix[existing] = True
            node = existing
            continue
        score = tree.scores[node] * confidence
        if added >= max_new or (cost is not None and not pays(cost, len(tree) - 1, score, expected)):
            break
        node = tree.add(node, tok, score=score, suffix=True, origin=origin)
        added += 1
        expected += score
    return added


def suffix_continuation(
    seq: Sequence[int],
    *,
    min_len: int = 2,
    max_len: int = 8,
    max_tokens: int = 8,
    blocked: frozenset[int] = frozenset(),
) -> list[int]:
    """The tokens that followed the latest earlier occurrence of the longest suffix of ``seq``
    (min_len to max_len tokens long); ``blocked`` tokens (image placeholders) never match and end
    the continuation."""
    seq = list(seq)
    n = len(seq)
    for length in range(max_len, min_len - 1, -1):  # the longest suffix first
        suffix = seq[n - length :]
        if length >= n or any(tok in blocked for tok in suffix):
            continue
        for end in range(n - 2, length - 2, -1):  # the positions it could end at earlier, latest first
            if seq[end - length + 1 : end + 1] == suffix:
                out: list[int] = []
                for tok in seq[end + 1 : end + 1 + max_tokens]:
                    if tok in blocked:
                        break
                    out.append(tok)
                return out
    return []


def best_first(
    tree: DraftTree,
    context: Sequence[int],
    lookup: Callable[[tuple[int, ...]], Fused | None],
    *,
    budget: int,
    max_depth: int,
    max_children: int,
    depth_discount: float = 1.0,
    rate: Callable[[Fused, float], float] | None = None,
    cost: PassCost | None = None,
) -> str:
    """Grow ``tree`` (its root, maybe a suffix chain) by best-first search: step 2 of the module's
    description. ``context``: the request's tokens, the root's last. ``lookup(ctx)``: the fused
    distribution after the last 1-3 tokens ``ctx`` (None when no memory knows them). ``rate(fused,
    p)``: the chance a proposal of fused probability p is accepted (default p). Returns why growth
    stopped: "budget", "cost" or "exhausted"."""
    rate = rate or (lambda fused, p: p)
    # when an entry entered -> (score, v, r, fused): candidate r of v's fused distribution, or
    # (score, v, -1, None): v's children, not looked up yet
    frontier: dict[int, tuple[float, int, int, Fused | None]] = {}
    entered = count()
    expanded: set[int] = set()  # nodes whose children have entered the frontier
    drafted = len(tree) - 1
    expected = expected_tokens(tree)

    def expand(node: int) -> None:
        expanded.add(node)
        if tree.depths[node] < max_depth:
            frontier[next(entered)] = (tree.scores[node] * depth_discount, node, -1, None)

    def offer(node: int, fused: Fused, rank: int) -> None:
        if rank < max_children and rank < len(fused.tokens) and fused.probs[rank] > 0.0:
            score = tree.scores[node] * depth_discount * rate(fused, fused.probs[rank])
            frontier[next(entered)] = (score, node, rank, fused)

    if drafted >= budget:
        return "budget"
    expand(0)
    while frontier:
        first = min(frontier, key=lambda e: (-frontier[e][0], e))  # the highest score, then the earliest
        score, parent, rank, fused = frontier.pop(first)
        if fused is None:  # parent's children: look its context up, its best candidate enters
            ctx = [*context[:-1], *tree.path_tokens(parent)][-3:]
            below = lookup(tuple(ctx))
            if below is not None:
                offer(parent, below, 0)
            continue
        offer(parent, fused, rank + 1)
        tok, p = fused.tokens[rank], fused.probs[rank]
        node = tree.child(parent, tok)
        if node is not None:  # a suffix-chain node: adopted, unless it already was
            if node in expanded:
                continue
            tree.fused[node], tree.sources[node], tree.origins[node] = p, fused.sources, FUSED
            if score > tree.scores[node]:
                expected += score - tree.scores[node]
                tree.scores[node] = score
        else:
            if cost is not None and not pays(cost, drafted, score, expected):
                return "cost"
            node = tree.add(parent, tok, score=score, fused=p, sources=fused.sources)
            drafted += 1
            expected += score
            if drafted >= budget:
                return "budget"
        expand(node)
    return "exhausted"


def depth_first_order(parents: Sequence[int], scores: Sequence[float]) -> list[int]:
    """Node indices in depth-first order, each node's children by score, highest first (ties: lower
    index first)."""
    children: list[list[int]] = [[] for _ in parents]
    for i in range(1, len(parents)):
        children[parents[i]].append(i)
    order: list[int] = []

    def visit(i: int) -> None:
        order.append(i)
        for j in sorted(children[i], key=lambda j: (-scores[j], j)):
            visit(j)

    visit(0)
    return order


def laid_out(tree: DraftTree) -> DraftTree:
    """``tree`` in depth-first order, highest-score child first (new lists)."""
    order = depth_first_order(tree.parents, tree.scores)
    new_index = {old: new for new, old in enumerate(order)}

    def pick(values: Sequence) -> list:
        return [values[i] for i in order]

    tokens, parents = pick(tree.tokens), [-1] + [new_index[tree.parents[i]] for i in order[1:]]
    lists = (tree.depths, tree.scores, tree.fused, tree.sources, tree.suffix, tree.origins)
    fields = [pick(values) for values in lists]
    children = {(parents[i], tokens[i]): i for i in range(1, len(order))}
    return DraftTree(tokens, parents, *fields, children, order=pick(tree.order))
