"""Property tests: trees, masks and fusion behave as DESIGN.md sections 3-5 say."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle.fusion import fuse, fusion_weights

from recap.core.config import RecapConfig
from recap.drafting.protocol import DraftState
from recap.drafting.recap_drafter import RecapDrafter
from recap.drafting.suffix import suffix_chain
from recap.drafting.token_recycling import TRDrafter
from recap.drafting.tree import DraftTree, layout, static_template
from recap.memory.rows import NONE, Keys, predictions
from recap.memory.store import Entry, RequestMemory, TokenMemory
from recap.verification.acceptance import accept_path
from recap.verification.treemask import ancestor_matrix, tree_attention_bias

V, K = 40, 4
IMAGE = 7  # the image placeholder id in these tests


def suffix_continuation(seq: list[int], *, min_len: int = 2, max_len: int = 8, max_tokens: int = 8,
                        blocked: frozenset[int] = frozenset()) -> list[int]:
    """The suffix-chain kernel over a token list."""
    out = np.empty(max_tokens, dtype=np.int64)
    n = suffix_chain(np.array(seq, dtype=np.int64), len(seq), (min_len, max_len, max_tokens),
                     np.array(sorted(blocked), dtype=np.int64), out)
    return out[:n].tolist()  # type: ignore[no-any-return]

settings.register_profile("recap", max_examples=40, deadline=None)
settings.load_profile("recap")


def record(mem, keys, top_ids, top_probs, *, step, depths, order=None) -> None:
    """File N target predictions into a ``RequestMemory`` (``file``) under Python keys: keys[i] =
    (x_{t-2}, x_{t-1}, x_t), None where the context is shorter; rows written in ``order`` (default
    0..N-1), later rows win."""
    a, b, c = (np.array([NONE if v is None else v for v in col], dtype=np.int64) for col in zip(*keys))
    at = np.arange(len(keys), dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    mem.file(Keys(a=a, b=b, c=c, order=at), predictions(top_ids, top_probs, depths), step)


def entry(ids, probs, step=0, depth=0) -> Entry:
    """The Entry the engine's write path makes of one prediction (``RequestMemory.file``)."""
    mem = RequestMemory(TokenMemory(V, K))
    record(mem, [(None, None, 0)], torch.tensor([list(ids)]), torch.tensor([list(probs)]), step=step,
           depths=[depth])
    return mem.m1.lookup(0)


@st.composite
def topk_rows(draw, n: int):
    ids = torch.stack([torch.randperm(V)[:K] for _ in range(n)]) if n else torch.zeros(0, K, dtype=torch.long)
    raw = draw(st.lists(st.lists(st.floats(0.01, 1.0), min_size=K, max_size=K), min_size=n, max_size=n))
    probs = torch.tensor(raw, dtype=torch.float32).reshape(n, K)
    probs = torch.sort(probs / probs.sum(-1, keepdim=True).clamp_min(1e-9), dim=-1, descending=True).values
    return ids, probs


@st.composite
def warm_memory(draw):
    """A RequestMemory after recording a random token sequence's predictions."""
    seq = draw(st.lists(st.integers(0, V - 1), min_size=4, max_size=30))
    mem = RequestMemory(TokenMemory(V, K), image_token_ids=[IMAGE])
    ids, probs = draw(topk_rows(len(seq)))
    pre = [None, None, *seq]
    keys = [(pre[t], pre[t + 1], pre[t + 2]) for t in range(len(seq))]
    record(mem, keys, ids, probs, step=0, depths=[0] * len(seq))
    return seq, mem


# --------------------------------------------------------------------------- trees


@given(warm_memory(), st.integers(1, 40), st.integers(1, 6), st.integers(1, 4), st.booleans())
def test_recap_trees_respect_budget_depth_order_and_unique_siblings(mem_seq, budget, depth, children, suffix):
    seq, mem = mem_seq
    cfg = RecapConfig(budget=budget, max_depth=depth, top_k=K, max_children=children, suffix=suffix)
    tree = RecapDrafter(mem, cfg, budget).draft(DraftState(seq))
    assert tree.tokens[0] == seq[-1] and tree.parents[0] == -1
    assert len(tree) - 1 <= budget
    siblings = set()
    for i in range(1, len(tree)):
        p = tree.parents[i]
        assert 0 <= p < i, "parents precede children"
        assert tree.depths[i] == tree.depths[p] + 1 <= depth
        assert (p, tree.tokens[i]) not in siblings, "no duplicate siblings"
        siblings.add((p, tree.tokens[i]))


@given(warm_memory(), st.integers(1, 40))
def test_recap_tree_puts_the_best_chain_first(mem_seq, budget):
    seq, mem = mem_seq
    tree = RecapDrafter(mem, RecapConfig(budget=budget, top_k=K, suffix=False), budget).draft(DraftState(seq))
    # node i+1 is the highest-score child of node i along the leading chain
    i = 0
    while True:
        kids = [j for j in range(len(tree)) if tree.parents[j] == i]
        if not kids:
            break
        assert i + 1 in kids and tree.scores[i + 1] == max(tree.scores[j] for j in kids)
        i += 1


@given(warm_memory(), st.integers(1, 40), st.integers(1, 6))
def test_tr_trees_follow_the_static_template(mem_seq, budget, depth):
    seq, mem = mem_seq
    tree = TRDrafter(mem, RecapConfig(budget=budget, max_depth=depth, top_k=K), budget).draft(DraftState(seq))
    assert len(tree) - 1 <= budget
    for i in range(1, len(tree)):
        row = mem.m1.lookup(tree.tokens[tree.parents[i]])
        assert row is not None and tree.tokens[i] in row.ids
        assert tree.depths[i] <= depth


@given(st.integers(1, 100), st.integers(1, 10), st.integers(1, 8))
def test_static_template_is_a_tree_within_limits(budget, depth, k):
    tpl = static_template(budget, depth, k)
    assert len(tpl) == min(budget, sum(k**d for d in range(1, depth + 1)))
    depths = [0]
    for i, (parent, rank) in enumerate(tpl, start=1):
        assert 0 <= parent < i and 0 <= rank < k
        depths.append(depths[parent] + 1)
        assert depths[-1] <= depth


@st.composite
def random_trees(draw):
    n = draw(st.integers(1, 30))
    tree = DraftTree.root(0)
    for _ in range(n - 1):
        parent = draw(st.integers(0, len(tree) - 1))
        tok = draw(st.integers(0, 50))
        if tree.child(parent, tok) is None:
            tree.add(parent, tok, score=draw(st.floats(0, 1)))
    return tree


@given(random_trees(), st.integers(0, 20))
def test_mask_equals_brute_force_ancestor_check(tree, prefix):
    def is_ancestor_or_self(j: int, i: int) -> bool:
        while i >= 0:
            if i == j:
                return True
            i = tree.parents[i]
        return False

    anc = ancestor_matrix(tree.parents)
    bias = tree_attention_bias(tree.parents, prefix, torch.float32)[0, 0]
    n = len(tree)
    assert bias.shape == (n, prefix + n) and torch.all(bias[:, :prefix] == 0)
    for i in range(n):
        for j in range(n):
            expected = is_ancestor_or_self(j, i)
            assert bool(anc[i, j]) == expected
            assert (bias[i, prefix + j] == 0) == expected


@given(random_trees())
def test_the_layout_is_every_node_once_each_parent_before_its_children(tree):
    order = layout(np.array(tree.parents, dtype=np.int64), np.array(tree.scores, dtype=np.float64), len(tree))
    where = {node: i for i, node in enumerate(order.tolist())}
    assert sorted(where) == list(range(len(tree))) and where[0] == 0
    assert all(where[tree.parents[j]] < where[j] for j in range(1, len(tree)))


@given(random_trees(), st.lists(st.integers(0, 50), min_size=30, max_size=30))
def test_greedy_acceptance_follows_argmax_children(tree, argmax):
    path, bonus = accept_path(tree, argmax)
    assert path[0] == 0
    for a, b in zip(path, path[1:]):
        assert tree.parents[b] == a and tree.tokens[b] == argmax[a]
    assert tree.child(path[-1], argmax[path[-1]]) is None and bonus == argmax[path[-1]]


@given(st.lists(st.integers(0, 5), min_size=0, max_size=40))
def test_suffix_continuation_follows_an_earlier_occurrence(seq):
    out = suffix_continuation(seq, min_len=2, max_tokens=5, blocked=frozenset({IMAGE}))
    if out:
        # some earlier position ends with the last two tokens and is followed by `out`
        n = len(seq)
        assert any(
            seq[e - 1 : e + 1] == seq[-2:] and seq[e + 1 : e + 1 + len(out)] == out for e in range(1, n - 1)
        )


def test_suffix_continuation_never_proposes_image_tokens():
    seq = [1, 2, IMAGE, IMAGE, 1, 2]
    assert suffix_continuation(seq, min_len=2, blocked=frozenset({IMAGE})) == []
    assert suffix_continuation([1, 2, 3, 4, 1, 2], min_len=2) == [3, 4, 1, 2]


# --------------------------------------------------------------------------- fusion


@st.composite
def entry_lists(draw):
    kinds = draw(st.sampled_from([["m3", "m2", "m1"], ["m2", "m1"], ["m3", "m1"], ["m1"], ["m3"]]))
    out = []
    for kind in kinds:
        probs = sorted(draw(st.lists(st.floats(0.001, 1.0), min_size=K, max_size=K)), reverse=True)
        ids = draw(st.lists(st.integers(0, V - 1), min_size=K, max_size=K, unique=True))
        out.append((kind, entry(ids, probs)))
    return out


@given(entry_lists(), st.sampled_from(["entropy", "fixed", "backoff"]))
def test_fusion_weights_are_a_distribution(entries, mode):
    w = fusion_weights(entries, mode=mode)
    assert all(x >= 0 for x in w) and math.isclose(sum(w), 1.0, rel_tol=1e-9)
    fused = fuse(entries, mode=mode)
    assert math.isclose(sum(fused.probs), 1.0, rel_tol=1e-6)
    assert list(fused.probs) == sorted(fused.probs, reverse=True)


@given(st.lists(st.floats(0.01, 1.0), min_size=K, max_size=K))
def test_more_specific_entries_weigh_more_at_equal_confidence(probs):
    probs = sorted(probs, reverse=True)
    e = entry(range(K), probs)
    w = fusion_weights([("m3", e), ("m2", e), ("m1", e)])
    assert w[0] > w[1] > w[2]


def test_more_concentrated_entries_weigh_more_at_equal_specificity():
    peaked = entry(range(K), [0.97, 0.01, 0.01, 0.01])
    flat = entry(range(K), [0.25, 0.25, 0.25, 0.25])
    w = fusion_weights([("m1", peaked), ("m1", flat)])
    assert w[0] > w[1]
    assert flat.concentration == pytest.approx(0.0, abs=1e-6) and peaked.concentration > 0.7
