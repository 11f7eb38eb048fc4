"""The candidate tree as data, and the pure functions over it (DESIGN.md sections 4-5).

A ``DraftTree`` holds parallel lists, node 0 being the root (the last accepted token,
not yet fed to the target) and every parent preceding its children:

    tokens[i]  parents[i] (-1 for the root)  depths[i]  scores[i] (path score)
    fused[i] (fused probability given the parent's context)  sources[i]  suffix[i]
    origins[i]  order[i] (when the drafter added node i: 0 = root, 1, 2, ...)

RECAP's drafter grows its trees by best-first search (``recap.drafting.search``) and lays them out
depth-first (``layout``); Token Recycling fills a static template (``static_template``), its nodes
in the order added. What verification needs lives in ``recap.verification``. Nothing here touches
a model.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from recap.memory.jit import njit
from recap.memory.rows import Entry

Source = tuple[str, float, Entry]  # (memory kind, fusion weight, entry)
#: The origin of a node fused from memory rows. It is a request, not a verdict: the trace
#: (``recap.trace.record.node_origin``) names the source that gave more than half of the node's
#: fused probability, and writes "mixed" only where none did. (The value is kept: it is in every
#: digest and trace.)
FUSED = "mixed"


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
    #: ``add`` calls, suffix-chain nodes included), whatever order the nodes are laid out in.
    order: list[int] = field(default_factory=lambda: [0])

    @classmethod
    def root(cls, token: int) -> DraftTree:
        return cls([token], [-1], [0], [1.0], [1.0], [()], [False], ["root"])

    @classmethod
    def from_lists(
        cls, tokens: list[int], parents: list[int], *, depths: list[int], scores: list[float],
        fused: list[float], sources: list[tuple[Source, ...]] | None, suffix: list[bool], origins: list[str],
        order: list[int],
    ) -> DraftTree:
        """A tree from its per-node lists (the drafting kernels'); ``sources`` None: a subclass makes
        them when read."""
        tree = cls(tokens, parents, depths, scores, fused, sources, suffix, origins, order=order)  # type: ignore[arg-type]
        tree._children = dict(zip(zip(parents[1:], tokens[1:]), range(1, len(tokens))))
        return tree

    def __len__(self) -> int:
        return len(self.tokens)

    def child(self, parent: int, token: int) -> int | None:
        """Index of ``parent``'s child carrying ``token``, if any."""
        return self._children.get((parent, token))

    def add(
        self, parent: int, token: int, *, score: float, fused: float = 0.0, sources: tuple[Source, ...] = (),
        suffix: bool = False, origin: str = FUSED,
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
        return idx

    def path_tokens(self, node: int) -> list[int]:
        """Tokens from the root (included) down to ``node``."""
        out: list[int] = []
        while node >= 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]


@njit
def layout(parents, scores, n):  # noqa: ANN001, ANN201
    """The first n nodes in depth-first order, each node's children by score, highest first (ties:
    lower index first): (n,) int64 node indices. Parents precede children, and the rank-1 chain
    occupies indices 0..d: when it is the accepted path, the KV cache needs no compaction."""
    order = np.empty(n, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    kids = np.empty(n, dtype=np.int64)
    top = 1
    stack[0] = 0
    m = 0
    while top > 0:
        top -= 1
        i = stack[top]
        order[m] = i
        m += 1
        nk = 0
        for j in range(n - 1, i, -1):  # children, highest index first (the stack pops the last first)
            if parents[j] == i:
                kids[nk] = j
                nk += 1
        for u in range(1, nk):  # stable insertion sort by score, ascending
            x = kids[u]
            v = u - 1
            while v >= 0 and scores[kids[v]] > scores[x]:
                kids[v + 1] = kids[v]
                v -= 1
            kids[v + 1] = x
        for u in range(nk):
            stack[top] = kids[u]
            top += 1
    return order


# --------------------------------------------------------------------------- templates


def static_template(
    budget: int, max_depth: int, k: int, rank_weights: Sequence[float] | None = None
) -> list[tuple[int, int]]:
    """A static tree shape (Token Recycling): list of (parent index, child rank).

    Node 0 is the root; nodes are added best-first by the product of assumed acceptance
    rates per rank (default 0.6, 0.15, 0.08, 0.05, ...; ties: lower rank, then earlier parent)
    and returned breadth-first, each parent before its children, siblings by rank.
    """
    if rank_weights is None:
        rank_weights = [0.6, 0.15, 0.08, 0.05, 0.04, 0.03, 0.02, 0.02][:k] + [0.01] * max(0, k - 8)
    paths: list[tuple[int, ...]] = []  # per node added, the ranks from the root down (its depth: the length)
    parents: list[int] = []
    heap = [(-rank_weights[r], r, -1) for r in range(k)]  # (-score, rank, parent node)
    heapq.heapify(heap)
    while heap and len(paths) < budget:
        neg, r, parent = heapq.heappop(heap)
        paths.append((paths[parent] if parent >= 0 else ()) + (r,))
        parents.append(parent)
        if len(paths[-1]) < max_depth:
            for r2 in range(k):
                heapq.heappush(heap, (neg * rank_weights[r2], r2, len(paths) - 1))
    order = sorted(range(len(paths)), key=lambda i: (len(paths[i]), paths[i]))
    pos = {old: new + 1 for new, old in enumerate(order)}
    return [(pos.get(parents[i], 0), paths[i][-1]) for i in order]
