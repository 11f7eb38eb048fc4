"""The candidate tree as data, and the pure functions over it (DESIGN.md sections 4-5).

A ``DraftTree`` holds parallel lists, node 0 being the root (the last accepted token,
not yet fed to the target) and every parent preceding its children:

    tokens[i]  parents[i] (-1 for the root)  depths[i]  scores[i] (path score)
    fused[i] (fused probability given the parent's context)  sources[i]  suffix[i]
    origins[i]  order[i] (when the drafter added node i: 0 = root, 1, 2, ...)

Functions here build trees (best-first search, static templates; suffix chains in
``recap.drafting.suffix``); what verification needs (ancestor matrix, additive attention
bias) lives in ``recap.verification.treemask``, acceptance in
``recap.verification.acceptance``. Nothing here touches a model.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from recap.drafting.treecost import PassCost
from recap.memory.fastpath import plain_sum
from recap.memory.fusion import Fused
from recap.memory.store import Entry

Source = tuple[str, float, Entry]  # (memory kind, fusion weight, entry)


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    scores: list[float]
    fused: list[float]
    sources: list[tuple[Source, ...]]
    suffix: list[bool]
    origins: list[str]
    _children: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)
    #: order[i]: when the drafter added node i (0 = the root, then 1, 2, ... in the order of
    #: ``add`` calls, suffix-chain nodes included); kept through ``reordered()``.
    order: list[int] = field(default_factory=lambda: [0])
    #: True while the tree is in ``reordered()``'s order (``best_first`` leaves it so; ``add`` clears it).
    _in_order: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def root(cls, token: int) -> DraftTree:
        return cls([token], [-1], [0], [1.0], [1.0], [()], [False], ["root"])

    @classmethod
    def from_lists(
        cls, tokens: list[int], parents: list[int], depths: list[int], scores: list[float], fused: list[float],
        sources: list[tuple[Source, ...]], suffix: list[bool], origins: list[str], order: list[int], *,
        in_order: bool,
    ) -> DraftTree:
        """A tree from its per-node lists (the compiled drafters'); ``in_order``: they are in
        ``reordered()``'s order already."""
        tree = cls(tokens, parents, depths, scores, fused, sources, suffix, origins, order=order)
        tree._children = dict(zip(zip(parents[1:], tokens[1:]), range(1, len(tokens))))
        tree._in_order = in_order
        return tree

    def __len__(self) -> int:
        return len(self.tokens)

    def child(self, parent: int, token: int) -> int | None:
        """Index of ``parent``'s child carrying ``token``, if any."""
        return self._children.get((parent, token))

    def add(
        self,
        parent: int,
        token: int,
        *,
        score: float,
        fused: float = 0.0,
        sources: tuple[Source, ...] = (),
        suffix: bool = False,
        origin: str = "mixed",
    ) -> int:
        if (parent, token) in self._children:
            raise ValueError(f"node {parent} already has a child with token {token}")
        idx = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        self.fused.append(fused)
        self.sources.append(sources)
        self.suffix.append(suffix)
        self.origins.append(origin)
        self.order.append(idx)
        self._children[(parent, token)] = idx
        self._in_order = False
        return idx

    def path_tokens(self, node: int) -> list[int]:
        """Tokens from the root (included) down to ``node``."""
        out: list[int] = []
        while node >= 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

    def reordered(self) -> DraftTree:
        """The same tree in depth-first order, highest-score child first.

        Parents still precede children, and the rank-1 chain occupies indices 0..d: when
        it is the accepted path, the KV cache needs no compaction. A tree ``best_first``
        just laid out is already in this order and is returned as it is.
        """
        if self._in_order:
            return self
        order = depth_first_order(self.parents, self.scores)
        if order == list(range(len(order))):
            return self
        out = DraftTree(
            self.tokens, self.parents, self.depths, self.scores, self.fused, self.sources, self.suffix, self.origins,
            order=self.order,
        )
        out._permute(order)  # new lists: this tree is left as it is
        return out

    def _lay_out(self) -> None:
        """Put this tree in ``reordered()``'s order, in place (what ``best_first`` ends with)."""
        order = depth_first_order(self.parents, self.scores)
        self._in_order = True
        if order != list(range(len(order))):
            self._permute(order)

    def _permute(self, order: list[int]) -> None:
        """Rebuild every per-node list (new list objects) so that new node i is old node ``order[i]``."""
        n = len(order)
        pick = itemgetter(*order)  # n >= 2 here (a lone root is always in order): picks a tuple
        new_index = sorted(range(n), key=order.__getitem__)  # old index -> new index
        new_parents = list(map(new_index.__getitem__, pick(self.parents)))
        new_parents[0] = -1  # the root
        tokens = list(pick(self.tokens))
        self.tokens, self.parents = tokens, new_parents
        self.depths = list(pick(self.depths))
        self.scores = list(pick(self.scores))
        self.fused = list(pick(self.fused))
        self.sources = list(pick(self.sources))
        self.suffix = list(pick(self.suffix))
        self.origins = list(pick(self.origins))
        self.order = list(pick(self.order))
        self._children = dict(zip(zip(new_parents[1:], tokens[1:]), range(1, n)))
        self._in_order = True


def depth_first_order(parents: Sequence[int], scores: Sequence[float]) -> list[int]:
    """Node indices in depth-first order, each node's children by score, highest first (ties: lower index first)."""
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


# --------------------------------------------------------------------------- building


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
        tree._lay_out()
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
                push(heap, (-base * (p if rate is None else rate(fused, p)), counter, parent, nxt, fused, base))
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
    tree._lay_out()
    return why


# --------------------------------------------------------------------------- templates


def static_template(budget: int, max_depth: int, k: int, rank_weights: Sequence[float] | None = None) -> list[tuple[int, int]]:
    """A static tree shape (Token Recycling): list of (parent index, child rank).

    Node 0 is the root; nodes are added best-first by the product of assumed acceptance
    rates per rank (default 0.6, 0.15, 0.08, 0.05, ...) and returned breadth-first, each
    parent before its children.
    """
    if rank_weights is None:
        rank_weights = [0.6, 0.15, 0.08, 0.05, 0.04, 0.03, 0.02, 0.02][:k] + [0.01] * max(0, k - 8)
    nodes: list[tuple[int, int, int]] = []  # (parent, rank, depth)
    heap = [(-rank_weights[r], r, -1, 1) for r in range(k)]
    heapq.heapify(heap)
    scores: list[float] = []
    while heap and len(nodes) < budget:
        neg, r, parent, depth = heapq.heappop(heap)
        nodes.append((parent, r, depth))
        scores.append(-neg)
        me = len(nodes) - 1
        if depth < max_depth:
            for r2 in range(k):
                heapq.heappush(heap, (neg * rank_weights[r2], r2, me, depth + 1))
    # breadth-first order, ranks ascending
    order = sorted(range(len(nodes)), key=lambda i: (nodes[i][2], _path_ranks(nodes, i)))
    pos = {old: new + 1 for new, old in enumerate(order)}
    return [(0 if nodes[i][0] < 0 else pos[nodes[i][0]], nodes[i][1]) for i in order]


def _path_ranks(nodes: list[tuple[int, int, int]], i: int) -> tuple[int, ...]:
    ranks: list[int] = []
    while i >= 0:
        ranks.append(nodes[i][1])
        i = nodes[i][0]
    return tuple(reversed(ranks))
