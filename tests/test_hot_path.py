"""The cheap hot path and cost-aware trees: what they must keep (the same trees, the same output)."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_lossless import make_image, reference
from test_properties import K, V, warm_memory
from test_token_text import KINDS, SETTINGS, TEXTS, encode, tokenizers  # noqa: F401  (a fixture)

import recap
from recap.drafting.protocol import DraftSetup, DraftState, Verification
from recap.drafting.recap_drafter import RecapDrafter
from recap.drafting.recycling import SeqBuffer
from recap.drafting.tree import DraftTree
from recap.drafting.treecost import PassCost
from recap.engine import loop as engine
from recap.memory.store import RequestMemory
from recap.methods import REGISTRY, get_method
from recap.models.tokens import Speller
from recap.trace.format import DecodeTrace
from recap.verification import verify
from recap.verification.hostcopy import HostPredictions, topk_predictions

# --------------------------------------------------------------------------- registry


def test_every_registered_method_builds_its_drafter() -> None:
    assert recap.METHODS == tuple(m.name for m in REGISTRY) and len(set(recap.METHODS)) == len(REGISTRY)
    for m in REGISTRY:
        memory = recap.TokenMemory(V, K) if m.keeps_memory else None
        drafter = m.build(DraftSetup(recap.RecapConfig(top_k=K, budget=8, cost_aware=False), V, memory))
        assert drafter.needs_predictions == m.keeps_memory
        assert drafter.budget == (8 if m.keeps_memory else 0)
        assert (drafter.memory is not None) == m.keeps_memory
        assert m.label and m.colour.startswith("#") and len(m.colour) == 7
        assert drafter.draft(DraftState([1, 2, 3])).tokens[0] == 3


def test_an_unknown_method_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown method 'nope'; choose one of ar, pld, tr, recap"):
        get_method("nope")


# --------------------------------------------------------------------------- cost-aware growth


def _draft(mem, seq, cost: PassCost | None, budget: int = 24) -> tuple[DraftTree, str]:
    cfg = recap.RecapConfig(budget=budget, top_k=K, suffix=False, cost_aware=cost is not None)
    drafter = RecapDrafter(mem, cfg, budget, cost)
    return drafter.draft(DraftState(seq)), drafter.last_stop


@given(warm_memory())
def test_free_nodes_grow_the_same_tree_as_a_fixed_budget(mem_seq) -> None:
    seq, mem = mem_seq
    free = PassCost.from_fit((1e-3, 0.0, 0.0), 24, host_s_per_node=0.0, host_s_per_pass=0.0)
    a, _ = _draft(mem, seq, None)
    b, _ = _draft(mem, seq, free)
    assert (a.tokens, a.parents, a.scores) == (b.tokens, b.parents, b.scores)


@given(warm_memory())
def test_nodes_costing_more_than_a_pass_are_never_drafted(mem_seq) -> None:
    seq, mem = mem_seq
    dear = PassCost.from_fit((1e-3, 1.0, 0.0), 24)  # one node costs 1000 passes
    tree, stop = _draft(mem, seq, dear)
    assert len(tree) == 1 and stop in ("cost", "exhausted")


@given(warm_memory(), st.floats(1e-6, 2e-3))
def test_every_drafted_node_pays_for_itself_and_the_next_would_not(mem_seq, slope) -> None:
    seq, mem = mem_seq
    cost = PassCost.from_fit((1e-3, slope, 0.0), 24)
    tree, stop = _draft(mem, seq, cost)
    scores = sorted(tree.scores[1:], reverse=True)  # best-first adds them in this order
    mat = 1.0
    for b, s in enumerate(scores):
        assert s * cost.seconds[b] > cost.marginal[b] * mat
        mat += s
    if stop == "cost":
        bigger, _ = _draft(mem, seq, None, budget=len(scores) + 1)
        nxt = sorted(bigger.scores[1:], reverse=True)[len(scores)]
        assert nxt * cost.seconds[len(scores)] <= cost.marginal[len(scores)] * mat


def test_pass_cost_is_the_fit_plus_host_work() -> None:
    cost = PassCost.from_fit((2e-3, 40e-6, 1e-8), 4, host_s_per_node=5e-6, host_s_per_pass=1e-4)
    assert cost.cap == 4 and len(cost.seconds) == 6
    assert cost.seconds[0] == pytest.approx(2.1e-3)
    assert cost.marginal[2] == pytest.approx(45e-6 + 1e-8 * 5)
    with pytest.raises(ValueError):
        PassCost.from_fit((1e-3, -1.0, 0.0), 4)


def test_a_pass_cost_below_the_budget_is_refused_by_name() -> None:
    # the kernel reads seconds[b] / marginal[b] for every b below the budget: a shorter cost read past them
    mem = RequestMemory(recap.TokenMemory(V, K))
    cfg = recap.RecapConfig(budget=24, top_k=K, cost_aware=True)
    with pytest.raises(ValueError, match="pass cost's cap 4 is below the node budget 24"):
        RecapDrafter(mem, cfg, 24, PassCost.from_fit((1e-3, 1e-5, 0.0), 4))
    assert RecapDrafter(mem, cfg, 24, PassCost.from_fit((1e-3, 1e-5, 0.0), 24)).cost.cap == 24


# --------------------------------------------------------------------------- the drafters' contract


def test_the_sequence_buffer_copies_what_the_handed_list_gained() -> None:
    buf, seq = SeqBuffer(), [1, 2, 3]
    assert buf.sync(seq)[0][:3].tolist() == [1, 2, 3]
    seq.extend(range(300))  # grown in place (past the array's room): only the tail is copied
    array, n = buf.sync(seq)
    assert n == 303 and array[:n].tolist() == seq
    for other in ([9, 9, 3], seq[:2]):  # another list (ending as an old prefix does), the same one shorter
        array, n = buf.sync(other)
        assert n == len(other) and array[:n].tolist() == other


def test_a_drafter_learns_only_from_the_tree_its_last_draft_returned() -> None:
    drafter = RecapDrafter(RequestMemory(recap.TokenMemory(V, K)), recap.RecapConfig(budget=4, top_k=K), 4)
    drafter.draft(DraftState([1, 2, 3], 1))
    rows = torch.zeros(1, K, dtype=torch.int64), torch.full((1, K), 0.25)
    with pytest.raises(ValueError, match="last draft"):
        drafter.update(DraftState([1, 2, 3], 1), Verification(DraftTree.root(3), [0], [0], *rows))


# --------------------------------------------------------------------------- tree order


@given(warm_memory())
def test_suffix_chain_nodes_have_an_order_too(mem_seq) -> None:
    seq, mem = mem_seq
    seq = [*seq, *seq[:3], seq[0]]  # gives the suffix matcher something to find
    cfg = recap.RecapConfig(budget=12, top_k=K, cost_aware=False)
    tree = RecapDrafter(mem, cfg, 12).draft(DraftState(seq))
    assert sorted(tree.order) == list(range(len(tree)))
    for i in range(1, len(tree)):
        assert tree.order[tree.parents[i]] < tree.order[i]  # a parent is added before its children


# --------------------------------------------------------------------------- host predictions and KV


@pytest.mark.parametrize("need_topk", [True, False])
def test_buffered_host_path_equals_the_direct_one(need_topk: bool) -> None:
    """The CUDA code path (device top-k, buffered copies, one sync), run on the CPU."""
    g = torch.Generator().manual_seed(0)
    host = HostPredictions(torch.device("cpu"), 4, need_topk=need_topk, overlap=True)
    for n in (3, 40, 7, 90):  # buffers grow, then are reused for smaller passes
        logits = torch.randn(n, V, generator=g)
        assert host.fetch(logits.argmax(-1), raw=logits) == logits.argmax(-1).tolist()
        ids, probs = host.topk(logits)
        ref_ids, ref_probs = topk_predictions(logits, 4)
        assert torch.equal(ids, ref_ids) and torch.allclose(probs, ref_probs)
        assert ids.shape == (n, 4)


def test_top_k_probabilities_are_the_softmax_of_the_top_logits() -> None:
    logits = torch.randn(5, V, generator=torch.Generator().manual_seed(1))
    ids, probs = topk_predictions(logits, 3)
    full = torch.softmax(logits, -1)
    assert torch.equal(ids, torch.topk(logits, 3, dim=-1).indices)
    assert torch.allclose(probs, full.gather(1, ids))


@given(st.integers(0, 6), st.lists(st.integers(1, 12), max_size=6, unique=True))
def test_kv_compaction_keeps_the_prefix_and_the_accepted_path(prefix, rest) -> None:
    n = 13
    accepted = [0, *sorted(rest)]
    layers = []
    for seed in range(2):
        k = torch.randn(1, 2, prefix + n, 3, generator=torch.Generator().manual_seed(seed))
        layers.append(SimpleNamespace(keys=k, values=k + 1, ref=k.clone()))
    verify.keep_accepted(SimpleNamespace(layers=layers), prefix, accepted)
    keep = list(range(prefix)) + [prefix + a for a in accepted]
    for layer in layers:
        assert torch.equal(layer.keys, layer.ref[:, :, keep]) and torch.equal(layer.values,
                                                                              layer.ref[:, :, keep] + 1)


# --------------------------------------------------------------------------- lossless, trace


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_recap_stays_lossless_with_fixed_and_cost_aware_trees_and_buffered_copies(
    load_tiny, family, monkeypatch
):
    target = load_tiny(family)
    monkeypatch.setattr(engine, "HostPredictions", functools.partial(HostPredictions, overlap=True))
    requests = [(make_image(4), "describe the image ."), (make_image(5), "what color is the circle ?")]
    refs = [reference(target, img, p, 40) for img, p in requests]
    for cfg in (recap.RecapConfig(budget=32, cost_aware=False), recap.RecapConfig(cost_aware=True, budget=24),
                recap.RecapConfig(cost_aware=True, budget=64),):
        memory = recap.TokenMemory.for_target(target)
        for (img, prompt), ref in zip(requests, refs):
            steps = list(recap.iter_steps(target, img, prompt, max_new_tokens=40, memory=memory, config=cfg))
            assert steps[-1].token_ids == ref
            assert all(s.tree_size == len(s.tree) - 1 <= int(cfg.budget) for s in steps)
            if not cfg.cost_aware:
                assert any(s.tree_size == cfg.budget for s in steps)


def test_the_trace_carries_each_steps_tree_size_and_old_traces_still_load(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    out = recap.generate(target, make_image(6), "describe the image .", max_new_tokens=12, trace=True,
                         config=recap.RecapConfig(cost_aware=True))
    assert out.trace is not None
    assert [s.tree_size for s in out.trace.steps] == [len(s.nodes) - 1 for s in out.trace.steps]
    data = out.trace.to_dict()
    assert DecodeTrace.from_dict(data).steps[0].tree_size == out.trace.steps[0].tree_size
    for step in data["steps"]:
        del step["tree_size"]  # a trace written before cost-aware trees
    assert DecodeTrace.from_dict(data).steps[0].tree_size is None


# --------------------------------------------------------------------------- spellings grown per step


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(data=st.data())
def test_spellings_grown_step_by_step_equal_the_whole_spelling(tokenizers, kind: str, data) -> None:  # noqa: F811
    """The trace's per-token spellings grow with each step's tokens and stay exactly
    ``spell(all tokens)``: partial UTF-8 bytes (byte-level pieces, SentencePiece <0xNN> byte
    fallback), special tokens, ids past the vocabulary, cut anywhere between steps."""
    texts = tokenizers[kind]
    vocab = len(texts.tokenizer)
    piece = st.one_of(
        st.integers(0, vocab + 20).map(lambda i: [i]),  # any id, special tokens and padding rows included
        st.lists(st.integers(3, 400), min_size=1,
                 max_size=4),  # SentencePiece's byte pieces, Qwen's short ones
        TEXTS.map(lambda text: encode(texts, text)),  # real text: multi-byte characters split over tokens
    )
    ids = [i for part in data.draw(st.lists(piece, min_size=1, max_size=6)) for i in part]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=6)))
    speller = Speller(texts)
    for lo, hi in zip([0, *cuts], [*cuts, len(ids)]):
        speller.extend(ids[lo:hi])
        assert speller.texts == texts.spell(ids[:hi])
        assert speller.text == "".join(speller.texts)
