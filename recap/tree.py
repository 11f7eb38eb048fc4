"""The candidate tree as data, and the pure functions over it (DESIGN.md sections 4-5).

A ``DraftTree`` holds parallel lists, node 0 being the root (the last accepted token,
not yet fed to the target) and every parent preceding its children:

    tokens[i]  parents[i] (-1 for the root)  depths[i]  scores[i] (path score)
    fused[i] (fused probability given the parent's context)  sources[i]  suffix[i]

Functions here build trees (best-first search, suffix chains, static templates),
and derive what verification needs (ancestor matrix, additive attention bias, depths);
acceptance lives in ``recap.acceptance``. Nothing here touches a model.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from recap.fusion import Fused
from recap.memory import Entry

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

    @classmethod
    def root(cls, token: int) -> DraftTree:
        return cls([token], [-1], [0], [1.0], [1.0], [()], [False], ["root"])

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
        self._children[(parent, token)] = idx
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
        it is the accepted path, the KV cache needs no compaction.
        """
        kids: list[list[int]] = [[] for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            kids[self.parents[i]].append(i)
        order: list[int] = []
        stack = [0]
        while stack:
            i = stack.pop()
            order.append(i)
            # push lowest score first so the best child is visited next
            stack.extend(sorted(kids[i], key=lambda j: (self.scores[j], -j)))
        if order == list(range(len(order))):
            return self
        new_index = {old: new for new, old in enumerate(order)}
        parents = [-1] + [new_index[self.parents[old]] for old in order[1:]]
        tokens = [self.tokens[old] for old in order]
        return DraftTree(
            tokens=tokens,
            parents=parents,
            depths=[self.depths[old] for old in order],
            scores=[self.scores[old] for old in order],
            fused=[self.fused[old] for old in order],
            sources=[self.sources[old] for old in order],
            suffix=[self.suffix[old] for old in order],
            origins=[self.origins[old] for old in order],
            _children={(parents[i], tokens[i]): i for i in range(1, len(order))},
        )


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
) -> DraftTree:
    """Grow ``tree`` by best-first search until it has ``budget`` drafted nodes.

    context: request tokens ending with the root token. lookup(last <= 3 tokens) gives the
    fused distribution for that context (None when no memory knows it). rate(fused, p)
    turns a fused probability into the chance the proposal is accepted (default: p
    itself); a path's score is the product of its rates (times ``depth_discount`` per
    level). A max-heap of frontier candidates is ordered by path score; popping one adds
    it (or adopts an existing suffix-chain node with the same token) and pushes its top
    children.
    """
    # Frontier entries: (-path score, tie-break, parent, sibling rank, fused, parent base).
    # Siblings are pushed lazily, the next one only when the previous is popped: they come
    # sorted by probability, so the heap holds one candidate per expanded node, not k.
    heap: list[tuple[float, int, int, int, Fused, float]] = []
    counter = 0
    expanded: set[int] = set()
    before = tuple(context[-3:-1])  # up to two request tokens preceding the root
    ctx: dict[int, tuple[int, ...]] = {}

    def ctx3(node: int) -> tuple[int, ...]:
        found = ctx.get(node)
        if found is None:
            parent = tree.parents[node]
            found = ((ctx3(parent) if parent >= 0 else before) + (tree.tokens[node],))[-3:]
            ctx[node] = found
        return found

    def push(parent: int, rank: int, fused: Fused, base: float) -> None:
        nonlocal counter
        if rank >= max_children or rank >= len(fused.tokens):
            return
        p = fused.probs[rank]
        if p <= 0.0:
            return
        counter += 1
        r = p if rate is None else rate(fused, p)
        heapq.heappush(heap, (-base * r, counter, parent, rank, fused, base))

    def expand(node: int) -> None:
        expanded.add(node)
        if tree.depths[node] >= max_depth:
            return
        fused = lookup(ctx3(node))
        if fused is not None:
            push(node, 0, fused, tree.scores[node] * depth_discount)

    drafted = len(tree) - 1
    expand(0)
    while heap and drafted < budget:
        neg, _, parent, rank, fused, base = heapq.heappop(heap)
        push(parent, rank + 1, fused, base)  # the next sibling becomes a candidate
        tok, p = fused.tokens[rank], fused.probs[rank]
        existing = tree.child(parent, tok)
        if existing is not None:
            if existing in expanded:
                continue
            # adopt a suffix-chain node: it now also carries the memories' prediction
            tree.fused[existing], tree.sources[existing] = p, fused.sources
            tree.origins[existing] = "mixed"  # resolved from its sources, like any fused node
            tree.scores[existing] = max(tree.scores[existing], -neg)
            expand(existing)
            continue
        node = tree.add(parent, tok, score=-neg, fused=p, sources=fused.sources)
        drafted += 1
        expand(node)
    return tree


def add_chain(
    tree: DraftTree,
    chain: Sequence[int],
    *,
    max_new: int,
    max_depth: int,
    confidence: float = 0.5,
    origin: str = "suffix",
) -> int:
    """Merge a chain below the root, sharing existing prefixes. Returns nodes added."""
    node, added = 0, 0
    for tok in chain:
        if tree.depths[node] >= max_depth:
            break
        nxt = tree.child(node, tok)
        if nxt is None:
            if added >= max_new:
                break
            nxt = tree.add(node, tok, score=tree.scores[node] * confidence, suffix=True, origin=origin)
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


# --------------------------------------------------------------------------- verifying


def ancestor_matrix(parents: Sequence[int]) -> torch.Tensor:
    """(N, N) bool: [i, j] is True when j is i or one of its ancestors."""
    n = len(parents)
    anc = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        anc[i] |= anc[parents[i]]
    return anc


def tree_attention_bias(parents: Sequence[int], prefix_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask for verifying a tree after a cached prefix.

    Returns (1, 1, N, P + N) in ``dtype``: 0 where node i may attend (the whole prefix,
    its ancestors and itself), the dtype's minimum elsewhere. A float mask, because a
    boolean one is silently added to the scores under eager attention.
    """
    n = len(parents)
    allowed = torch.ones(n, prefix_len + n, dtype=torch.bool)
    allowed[:, prefix_len:] = ancestor_matrix(parents)
    bias = torch.zeros(n, prefix_len + n, dtype=dtype)
    bias.masked_fill_(~allowed, torch.finfo(dtype).min)
    return bias[None, None]  # (1, 1, N, P + N)


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
