"""Tree attention: one forward over a tree gives, at every node, the logits of decoding
that node's root-to-node path one token at a time from the same cached prefix."""

from __future__ import annotations

import copy

import pytest
import torch
from test_lossless import make_image
from transformers import DynamicCache

import recap
from recap.drafting.tree import DraftTree
from recap.verification.treemask import tree_attention_bias


def random_tree(vocab: int, n: int, seed: int) -> DraftTree:
    g = torch.Generator().manual_seed(seed)
    tree = DraftTree.root(int(torch.randint(10, vocab, (1,), generator=g)))
    while len(tree) < n:
        parent = int(torch.randint(0, len(tree), (1,), generator=g))
        tok = int(torch.randint(10, vocab, (1,), generator=g))
        if tree.child(parent, tok) is None and tree.depths[parent] < 5:
            tree.add(parent, tok, score=0.5)
    return tree


def prefill(target: recap.Target, image, prompt: str):
    inputs = recap.prepare_inputs(target, image, prompt)
    target.adapter.before_prefill(target.model)
    cache = DynamicCache(config=target.model.config)
    out = target.model(**inputs, cache=cache, use_cache=True)
    return out.cache, inputs["input_ids"].shape[1], target.adapter.rope_delta(target.model)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "llava", "llava_next"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_logits_equal_sequential_decoding_of_each_path(load_tiny, family: str, attn: str) -> None:
    target = load_tiny(family, attn)
    model = target.model
    with torch.inference_mode():
        cache, p, delta = prefill(target, make_image(11), "describe the image .")
        tree = random_tree(target.vocab_size, 12, seed=3)
        bias = tree_attention_bias(tree.parents, p, target.dtype)
        pos = target.adapter.tree_positions(p, torch.tensor(tree.depths), delta)
        tree_cache = copy.deepcopy(cache)
        out = model(
            input_ids=torch.tensor([tree.tokens]), attention_mask=bias, position_ids=pos, cache=tree_cache
        )
        tree_logits = out.logits[0]  # (N, V)
        for node in range(len(tree)):
            path = tree.path_tokens(node)
            seq_cache = copy.deepcopy(cache)
            for d, tok in enumerate(path):
                step_pos = target.adapter.tree_positions(p + d, torch.tensor([0]), delta)
                logits = model(
                    input_ids=torch.tensor([[tok]]), position_ids=step_pos, cache=seq_cache, use_cache=True
                ).logits[0, -1]
            torch.testing.assert_close(tree_logits[node], logits, atol=1e-5, rtol=1e-4)


def test_float_bias_blocks_non_ancestors_and_allows_prefix() -> None:
    tree = DraftTree.root(1)
    a = tree.add(0, 2, score=1)
    tree.add(0, 3, score=1)
    c = tree.add(a, 4, score=1)
    bias = tree_attention_bias(tree.parents, 5, torch.float32)[0, 0]
    assert bias.shape == (4, 9)
    assert torch.all(bias[:, :5] == 0)
    neg = torch.finfo(torch.float32).min
    assert bias[c, 5 + 0] == 0 and bias[c, 5 + a] == 0 and bias[c, 5 + c] == 0
    assert bias[c, 5 + 2] == neg


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("prefix_len", [0, 1, 37])
def test_the_device_mask_is_the_host_mask_built_from_the_tree_block_alone(prefix_len: int, dtype) -> None:
    from recap.verification.treemask import device_tree_bias
    from recap.verification.verify import full_tree_bias

    parents = [-1, 0, 0, 1, 1, 2, 5, 6]
    host = tree_attention_bias(parents, prefix_len, dtype)
    built = device_tree_bias(parents, prefix_len, dtype, torch.device("cpu"))
    assert built.shape == host.shape == (1, 1, len(parents), prefix_len + len(parents))
    assert built.dtype == dtype and torch.equal(built, host)
    # what the engine feeds: the host bytes on a CPU (the device build elsewhere, the same values)
    assert torch.equal(full_tree_bias(parents, prefix_len, dtype, torch.device("cpu")), host)
    assert device_tree_bias([], prefix_len, dtype, torch.device("cpu")).shape == (1, 1, 0, prefix_len)
