"""The prefill costs what generate()'s costs (issue 28.2).

``recap.engine.steps.prefill`` runs the lm_head only at the positions a memory reads: those
whose token is no image placeholder (a memory never files a key ending at one), none for a
drafter without predictions. It hands the drafter their top-k at once; nothing of size
(P - 1, V) is made. The rows must be the ones the full product gives, bit for bit.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_lossless import PROMPTS, make_image
from tiny_models import FAMILIES
from transformers import DynamicCache

import recap
from recap.engine.steps import prefill
from recap.verification.generation_config import acceptance_rule
from recap.verification.hostcopy import HostPredictions, topk_predictions

K = 8


class ForwardSpy:
    """Records the prefill forward's ``logits_to_keep`` and the shape of the logits it returned."""

    def __init__(self, model: Any) -> None:
        self.keep: list[Any] = []
        self.shapes: list[tuple[int, ...]] = []
        self.handles = [model.register_forward_pre_hook(self.before, with_kwargs=True),
                        model.register_forward_hook(self.after)]

    def before(self, module: Any, args: tuple, kwargs: dict) -> None:
        self.keep.append(kwargs.get("logits_to_keep"))

    def after(self, module: Any, args: tuple, output: Any) -> None:
        self.shapes.append(tuple(output.logits.shape))

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def run_prefill(target: recap.Target, image, prompt: str, *, need_topk: bool):
    inputs = recap.prepare_inputs(target, image, prompt)
    rule = acceptance_rule(target.model, None, prompt_len=inputs["input_ids"].shape[-1], max_new_tokens=8,
                           vocab_size=target.vocab_size, device=target.device)
    spy = ForwardSpy(target.model)
    try:
        with torch.inference_mode():
            state, top = prefill(target, inputs, rule, HostPredictions(target.device, K, need_topk=need_topk))
    finally:
        spy.close()
    return inputs, state, top, spy


def full_logits(target: recap.Target, inputs: dict) -> torch.Tensor:
    """The old prefill's product: logits (P - 1, V) at every position."""
    model = target.model
    with torch.inference_mode():
        target.adapter.before_prefill(model)
        cut = target.adapter.prefill_inputs(inputs)
        out = model(**cut, cache=DynamicCache(config=model.config), use_cache=True)
        target.adapter.before_prefill(model)
    return out.logits[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_only_at_the_read_positions_and_their_top_k_bit_for_bit(load_tiny, family: str) -> None:
    target = load_tiny(family)
    inputs, state, top, spy = run_prefill(target, make_image(2), PROMPTS[0], need_topk=True)
    ids = inputs["input_ids"][0].tolist()
    blocked = target.image_token_ids
    read = [i for i, tok in enumerate(ids[:-1]) if tok not in blocked]
    assert len(read) < len(ids) - 1, "the request has image placeholders"
    assert spy.keep[0].tolist() == read
    assert spy.shapes == [(1, len(read), target.vocab_size)]  # the (T, V) product only
    assert top is not None and state.prefix_len == len(ids) - 1
    top_ids, top_probs = top
    assert top_ids.shape == top_probs.shape == (len(ids) - 1, K) and top_ids.device.type == "cpu"
    want_ids, want_probs = topk_predictions(full_logits(target, inputs)[read], K)
    assert torch.equal(top_ids[read], want_ids) and torch.equal(top_probs[read], want_probs)
    others = [i for i in range(len(ids) - 1) if i not in read]
    assert not top_ids[others].any() and not top_probs[others].any()  # rows nobody reads: zeros


def test_a_text_prompt_reads_every_position(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    inputs, _, top, spy = run_prefill(target, None, PROMPTS[2], need_topk=True)
    n = inputs["input_ids"].shape[-1] - 1
    assert spy.keep[0].tolist() == list(range(n)) and spy.shapes == [(1, n, target.vocab_size)]
    want_ids, want_probs = topk_predictions(full_logits(target, inputs), K)
    assert torch.equal(top[0], want_ids) and torch.equal(top[1], want_probs)


def test_a_drafter_without_predictions_gets_no_logits_at_all(load_tiny) -> None:
    target = load_tiny("llava")
    _, _, top, spy = run_prefill(target, make_image(3), PROMPTS[0], need_topk=False)
    assert top is None and spy.keep[0].numel() == 0 and spy.shapes == [(1, 0, target.vocab_size)]


@pytest.mark.parametrize("method", ["ar", "pld", "recap"])
def test_every_method_still_decodes_losslessly_after_the_cheap_prefill(load_tiny, method: str) -> None:
    target = load_tiny("gemma3")
    img = make_image(6)
    inputs = recap.prepare_inputs(target, img, PROMPTS[0])
    with torch.inference_mode():
        ref = target.model.generate(**inputs, do_sample=False, max_new_tokens=16)
    ref = ref[0, inputs["input_ids"].shape[1]:]
    memory = recap.TokenMemory.for_target(target)
    for _ in range(2):
        out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=16, memory=memory)
        assert out.token_ids == ref.tolist()
