"""Tree growth as first written: suffix continuations merged as a chain, best-first search over a
lookup, and the depth-first layout (``recap.drafting.search`` / ``suffix`` / ``tree.layout``'s reference)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from oracle.fusion import Fused, plain_sum
from recap.drafting.tree import DraftTree
from recap.drafting.treecost import PassCost


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
    """Grow ``tree`` by best-first search, up to ``budget`` drafted nodes.

    context: request tokens ending with the root token. lookup(last <= 3 tokens) gives the
    fused distribution for that context (None when no memory knows it). rate(fused, p)
    turns a fused probability into the chance the proposal is accepted (default: p
    itself); a path's score is the product of its rates (times ``depth_discount`` per
    level): the probability that the whole path is accepted, i.e. the node's expected
    contribution to the tokens this pass emits. A max-heap of frontier candidates is
    ordered by path score; popping one adds it (or adopts an existing suffix-chain node
    with the same token) and pushes its top children.

    cost: when given, the search also stops at the first candidate that does not pay for
    itself: adding a node of score s to a tree of b drafted nodes that expects M tokens per
    pass is worth it only while (M + s) / T(b + 1) > M / T(b), i.e. s * T(b) > dT(b) * M,
    with T the measured seconds per pass. Candidates pop in non-increasing score order and
    dT(b) * M / T(b) only grows, so the first refusal is final.

    The tree ends in ``reordered()``'s order (so that call costs nothing): drafted nodes are
    appended to the lists during the search and the tree is permuted once at the end.

    Returns why growth stopped: "budget", "cost" or "exhausted" (no candidate left).
    """
    tokens, parents, depths, scores = tree.tokens, tree.parents, tree.depths, tree.scores
    fused_of, sources = tree.fused, tree.sources
    children = tree._children
    n0 = len(tokens)  # the root and suffix-chain nodes; every later node is drafted here
    adopted: set[int] = set()  # suffix-chain nodes adopted (and so expanded) by the search
    before = tuple(context[-3:-1])  # up to two request tokens preceding the root
    ctx: list[tuple[int, ...]] = []
    for i, tok in enumerate(tokens):  # nodes already there (the root, suffix chains)
        p = parents[i]
        ctx.append(((ctx[p] if p >= 0 else before) + (tok,))[-3:])
    seconds, marginal = (cost.seconds, cost.marginal) if cost is not None else ((), ())
    push, pop = heapq.heappush, heapq.heappop
    # Heap items: (-score, counter, parent, rank, fused | None, base). A placeholder (fused
    # None) is keyed by its node's own score, an upper bound on its children's (rates are
    # <= 1): its lookup happens only when it pops, so leaves added near the end of the
    # search, whose children could never win, cost no lookup. ``counter`` breaks ties (first
    # pushed pops first). An item that would pop right after it is made (its key below the
    # heap's top; its counter is the largest) skips the heap: it is ``ready``.
    heap: list[tuple[float, int, int, int, Fused | None, float]] = []
    ready: tuple[float, int, int, int, Fused | None, float] | None = None
    counter = 0
    drafted = n0 - 1
    mat = 1.0 + plain_sum(scores[1:])  # expected tokens per pass: the bonus token + every node's score
    if drafted >= budget:
        return "budget"
    if depths[0] < max_depth:
        counter = 1
        ready = (-scores[0] * depth_discount, 1, 0, -1, None, 0.0)
    why = "exhausted"
    while True:
        if ready is not None:
            neg, _, parent, rank, fused, base = ready
            ready = None
        elif heap:
            neg, _, parent, rank, fused, base = pop(heap)
        else:
            break
        if fused is None:  # a placeholder: look the node's context up, push its best child
            below = lookup(ctx[parent])
            if below is not None:
                p = below.probs[0]
                if p > 0.0:
                    counter += 1
                    key = neg * (p if rate is None else rate(below, p))
                    item = (key, counter, parent, 0, below, -neg)
                    if heap and heap[0][0] <= key:
                        push(heap, item)
                    else:
                        ready = item
            continue
        nxt = rank + 1  # the next sibling becomes a candidate (siblings come sorted by probability)
        if nxt < max_children and nxt < len(fused.tokens):
            p = fused.probs[nxt]
            if p > 0.0:
                counter += 1
                push(
                    heap, (-base * (p if rate is None else rate(fused, p)), counter, parent, nxt, fused, base)
                )
        tok, p = fused.tokens[rank], fused.probs[rank]
        score = -neg
        edge = (parent, tok)
        existing = children.get(edge)
        if existing is not None:
            if existing >= n0 or existing in adopted:  # drafted nodes are expanded when added
                continue
            # adopt a suffix-chain node: it now also carries the memories' prediction
            fused_of[existing], sources[existing] = p, fused.sources
            tree.origins[existing] = "mixed"  # resolved from its sources, like any fused node
            if score > scores[existing]:
                mat += score - scores[existing]
                scores[existing] = score
            adopted.add(existing)
            node = existing
        else:
            if seconds and score * seconds[drafted] <= marginal[drafted] * mat:
                why = "cost"
                break
            node = len(tokens)
            tokens.append(tok)
            parents.append(parent)
            depths.append(depths[parent] + 1)
            scores.append(score)
            fused_of.append(p)
            sources.append(fused.sources)
            children[edge] = node
            ctx.append(ctx[parent][-2:] + (tok,))  # the last 3 tokens
            drafted += 1
            mat += score
            if drafted >= budget:
                why = "budget"
                break
        if depths[node] < max_depth:  # expand the node: its placeholder
            counter += 1
            key = -scores[node] * depth_discount
            item = (key, counter, node, -1, None, 0.0)
            if heap and heap[0][0] <= key:
                push(heap, item)
            else:
                ready = item
    added = len(tokens) - n0
    if added:
        tree.suffix.extend([False] * added)
        tree.origins.extend(["mixed"] * added)
        tree.order.extend(range(n0, n0 + added))
    return why


def depth_first_order(parents: Sequence[int], scores: Sequence[float]) -> list[int]:
    """Node indices in depth-first order, each node's children by score, highest first (ties: lower
    index first)."""
    n = len(parents)
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        kids[parents[i]].append(i)
    order: list[int] = []
    visit = order.append
    stack = [0]
    by_score = scores.__getitem__
    while stack:
        i = stack.pop()
        visit(i)
        below = kids[i]
        if below:
            if len(below) > 1:
                # The stack pops its last item first: lowest score first, ties by higher index
                # first (a stable sort of the reversed, index-ascending list).
                below.reverse()
                below.sort(key=by_score)
            stack.extend(below)
    return order


def laid_out(tree: DraftTree) -> DraftTree:
    """``tree`` in depth-first order, highest-score child first (new lists)."""
    order = depth_first_order(tree.parents, tree.scores)
    new_index = {old: new for new, old in enumerate(order)}
    pick = [
        list(map(lst.__getitem__, order))
        for lst in (
            tree.tokens,
            tree.depths,
            tree.scores,
            tree.fused,
            tree.sources,
            tree.suffix,
            tree.origins,
            tree.order,
        )
    ]
    parents = [-1] + [new_index[tree.parents[i]] for i in order[1:]]
    tokens, depths, scores, fused, sources, suffix, origins, added = pick
    return DraftTree.from_lists(tokens, parents, depths=depths, scores=scores, fused=fused, sources=sources,
                                suffix=suffix, origins=origins, order=added, in_order=True)
