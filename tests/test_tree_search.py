"""The oracle's tree search, the layout kernel and the mask grow exactly what the plain algorithms do
(DESIGN.md section 4).

The oracle's ``best_first`` (``tests/oracle``, what the drafting kernel is checked against in
test_kernels.py) skips the heap for an item that would pop next; the layout kernel
(``recap.drafting.tree.layout``) orders a tree depth-first; ``tree_attention_bias`` builds the mask
as bytes. Each is checked here against a straightforward reference: the textbook search (every item
through the heap, ``DraftTree.add``, then a depth-first rebuild) and a brute-force ancestor mask.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from oracle import drafters as oracle_drafters
from oracle import memory as refmem
from oracle.search import add_chain, best_first, laid_out
from test_properties import random_trees

from recap.core.config import RecapConfig
from recap.drafting.tree import DraftTree, layout
from recap.drafting.treecost import PassCost
from recap.verification.treemask import tree_attention_bias
from recap.verification.verify import long_tensor

V, K = 12, 4  # a small vocabulary: contexts repeat, so M2 / M3 entries and suffix adoption happen


def reference_search(tree, context, lookup, *, budget, max_depth, max_children, depth_discount=1.0, rate=None,
                     cost=None) -> str:
    """Best-first search as first written: every item through the heap, nodes added by ``tree.add``."""
    heap: list = []
    counter = 0
    expanded: set[int] = set()
    before = tuple(context[-3:-1])
    ctx = []
    for i, tok in enumerate(tree.tokens):
        p = tree.parents[i]
        ctx.append(((ctx[p] if p >= 0 else before) + (tok,))[-3:])
    seconds, marginal = (cost.seconds, cost.marginal) if cost is not None else ((), ())

    def expand(node: int) -> None:
        nonlocal counter
        expanded.add(node)
        if tree.depths[node] < max_depth:
            counter += 1
            heapq.heappush(heap, (-tree.scores[node] * depth_discount, counter, node, -1, None, 0.0))

    drafted = len(tree) - 1
    mat = 1.0 + sum(tree.scores[1:])
    expand(0)
    while heap:
        if drafted >= budget:
            return "budget"
        neg, _, parent, rank, fused, base = heapq.heappop(heap)
        if fused is None:
            below = lookup(ctx[parent])
            if below is not None and below.probs[0] > 0.0:
                p = below.probs[0]
                counter += 1
                heapq.heappush(
                    heap, (neg * (p if rate is None else rate(below, p)), counter, parent, 0, below, -neg)
                )
            continue
        nxt = rank + 1
        if nxt < max_children and nxt < len(fused.tokens) and fused.probs[nxt] > 0.0:
            p = fused.probs[nxt]
            counter += 1
            heapq.heappush(
                heap, (-base * (p if rate is None else rate(fused, p)), counter, parent, nxt, fused, base)
            )
        tok, p, score = fused.tokens[rank], fused.probs[rank], -neg
        existing = tree.child(parent, tok)
        if existing is not None:
            if existing in expanded:
                continue
            tree.fused[existing], tree.sources[existing], tree.origins[existing] = p, fused.sources, "mixed"
            if score > tree.scores[existing]:
                mat += score - tree.scores[existing]
                tree.scores[existing] = score
            expand(existing)
            continue
        if seconds and score * seconds[drafted] <= marginal[drafted] * mat:
            return "cost"
        node = tree.add(parent, tok, score=score, fused=p, sources=fused.sources)
        ctx.append((ctx[parent] + (tok,))[-3:])
        drafted += 1
        mat += score
        expand(node)
    return "budget" if drafted >= budget else "exhausted"


def reference_layout(tree: DraftTree) -> list[int]:
    """Depth-first order, children by (score, -index) descending, by an explicit recursion."""
    kids: dict[int, list[int]] = {i: [] for i in range(len(tree))}
    for i in range(1, len(tree)):
        kids[tree.parents[i]].append(i)
    out: list[int] = []

    def visit(i: int) -> None:
        out.append(i)
        for j in sorted(kids[i], key=lambda j: (-tree.scores[j], j)):
            visit(j)

    visit(0)
    return out


def fields(tree: DraftTree) -> tuple:
    return (tree.tokens, tree.parents, tree.depths, tree.scores, tree.fused, tree.sources, tree.suffix,
            tree.origins, tree.order,)


#: Probability rows (sorted, as the target's top-k comes): few distinct values, so equal path scores
#: are common.
ROWS = ([0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0],
        [0.5, 0.25, 0.25, 0.0],)


@st.composite
def tied_memory(draw):
    """A request memory whose rows repeat a few probability values, so path scores tie often."""
    seq = draw(st.lists(st.integers(0, V - 1), min_size=4, max_size=24))
    mem = refmem.RequestMemory(refmem.TokenMemory(V, K))
    n = len(seq)
    ids = [draw(st.permutations(range(V)))[:K] for _ in range(n)]
    probs = [draw(st.sampled_from(ROWS)) for _ in range(n)]
    pre = [None, None, *seq]
    mem.record([(pre[t], pre[t + 1], pre[t + 2]) for t in range(n)], torch.tensor(ids),
               torch.tensor(probs, dtype=torch.float32), step=0, depths=[0] * n)
    return seq, mem


@given(tied_memory(), st.integers(1, 30), st.integers(1, 5), st.integers(1, 4), st.sampled_from([1.0, 0.9]),
       st.booleans(), st.lists(st.integers(0, V - 1), max_size=5), st.sampled_from([None, 2e-5, 4e-4]))
def test_best_first_grows_the_reference_tree_in_the_reference_order(
    mem_seq, budget, depth, children, discount, calibrate, chain, slope
) -> None:
    seq, mem = mem_seq
    cfg = RecapConfig(budget=budget, max_depth=depth, top_k=K, max_children=children, depth_discount=discount)
    cost = None if slope is None else PassCost.from_fit((1e-3, slope, 0.0), budget)
    drafter = oracle_drafters.Recap(mem, cfg, budget, cost)
    rate = drafter.rate if calibrate else None
    grown = {}
    for name, search in (("fast", best_first), ("reference", reference_search)):
        tree = DraftTree.root(seq[-1])
        add_chain(tree, chain, max_new=min(4, budget), max_depth=depth, confidence=0.5,
                  cost=cost)  # nodes to adopt
        why = search(tree, seq, drafter.lookup, budget=budget, max_depth=depth, max_children=children,
                     depth_discount=discount, rate=rate, cost=cost)
        grown[name] = (tree, why)
    fast, why = grown["fast"]
    fast = laid_out(fast)
    ref, ref_why = grown["reference"]
    assert why == ref_why
    order = reference_layout(ref)
    new_index = {old: new for new, old in enumerate(order)}
    expected = [[field[i] for i in order] for field in fields(ref)]
    expected[1] = [-1] + [new_index[ref.parents[i]] for i in order[1:]]  # the parents, renumbered
    assert list(fields(fast)) == expected
    assert [fast.path_tokens(i) for i in range(len(fast))] == [ref.path_tokens(i) for i in order]
    for i in range(1, len(fast)):  # the children index agrees with the new positions
        assert fast.child(fast.parents[i], fast.tokens[i]) == i


@given(random_trees())
def test_the_layout_visits_children_best_first_ties_by_insertion(tree) -> None:
    parents, scores = np.array(tree.parents, dtype=np.int64), np.array(tree.scores, dtype=np.float64)
    assert layout(parents, scores, len(tree)).tolist() == reference_layout(tree)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@given(random_trees(), st.integers(0, 9))
def test_mask_opens_exactly_the_prefix_and_each_nodes_ancestors(dtype, tree, prefix) -> None:
    bias = tree_attention_bias(tree.parents, prefix, dtype)
    n = len(tree)
    expected = torch.full((n, prefix + n), torch.finfo(dtype).min, dtype=dtype)
    expected[:, :prefix] = 0
    for i in range(n):
        j = i
        while j >= 0:
            expected[i, prefix + j] = 0
            j = tree.parents[j]
    assert bias.dtype == dtype and bias.shape == (1, 1, n, prefix + n)
    assert torch.equal(bias[0, 0], expected)


@given(st.lists(st.integers(-(2**40), 2**40), max_size=40))
def test_long_tensor_is_torch_tensor_of_the_list(values) -> None:
    out = long_tensor(values)
    assert out.dtype == torch.int64 and torch.equal(out, torch.tensor(values, dtype=torch.int64))
