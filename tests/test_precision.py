"""The reduced-precision guarantee (recap.verification.ties): in bf16 and fp16 every token a method
emits is the model's greedy choice for its own prefix, within the tie tolerance, computed as
generate() computes it; a real bug (a tree mask whose prefix window is three positions off) fails the check.

Every family of tests/tiny_models.py x every method x (sdpa, eager) x (bf16, fp16), one request
each (the bf16 and fp16 runs on different images and prompts, for coverage at the same cost).
"""

from __future__ import annotations

import pytest
import torch
from test_lossless import PROMPTS, make_image
from tiny_models import FAMILIES

import recap
import recap.verification.verify as verify_module
from recap.verification.ties import (
    TIE_ULPS,
    PrecisionCheck,
    TokenCheck,
    check_greedy,
    compare_with_reference,
    describe_tie,
    resolution,
    tie_tolerance,
)
from recap.verification.treemask import tree_attention_bias

N = 24
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REQUESTS = {"bf16": (1, PROMPTS[0]), "fp16": (2, PROMPTS[1])}
_TARGETS: dict[tuple[str, str, str], recap.Target] = {}


@pytest.fixture(scope="module")
def load_reduced(tiny_dirs):
    def load(family: str, attn: str, dtype: str) -> recap.Target:
        key = (family, attn, dtype)
        if key not in _TARGETS:
            _TARGETS[key] = recap.load_target(tiny_dirs[family], device="cpu", dtype=DTYPES[dtype],
                                              attn_implementation=attn)
        return _TARGETS[key]

    yield load
    _TARGETS.clear()


def test_tolerance_is_the_dtypes_resolution_at_the_logits_magnitude() -> None:
    # bf16 keeps 8 significant bits: eps 2**-7; at |x| in [0.25, 0.5) one unit is 2**-9
    assert resolution(0.3, torch.bfloat16) == 2.0**-9
    assert resolution(-20.0, torch.bfloat16) == 2.0**-7 * 16
    assert resolution(0.3, torch.float16) == 2.0**-10 * 2.0**-2
    assert tie_tolerance(0.3, torch.bfloat16) == TIE_ULPS * 2.0**-9
    assert resolution(0.0, torch.bfloat16) > 0  # the smallest normal's unit, never zero
    tie = TokenCheck(index=26, token=5, best=7, max_logit=0.4, gap=0.0039, tolerance=0.0052)
    assert tie.is_tie and tie.ok and not tie.is_argmax
    assert describe_tie("bf16", tie) == "bf16 tie at token 27: top-2 gap 0.0039, tolerance 0.0052"
    error = TokenCheck(index=3, token=5, best=7, max_logit=0.4, gap=0.01, tolerance=0.0052)
    check = PrecisionCheck("bf16", [TokenCheck(0, 1, 1, 0.4, 0.0, 0.0052), tie, error])
    assert not check.ok and check.errors == [error] and check.ties == [tie] and check.first_difference == tie
    assert check.sentence().startswith("bf16 error at token 4")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_emitted_token_is_a_greedy_choice_within_the_tie_tolerance(
    load_reduced, family: str, attn: str, dtype: str
) -> None:
    target = load_reduced(family, attn, dtype)
    seed, prompt = REQUESTS[dtype]
    image = make_image(seed)
    inputs = recap.prepare_inputs(target, image, prompt)
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=N)
    reference = out[0, inputs["input_ids"].shape[1]:].tolist()
    for method in recap.METHODS:
        tokens = recap.generate(target, image, prompt, method=method, max_new_tokens=N).token_ids
        check = check_greedy(target, inputs, tokens)
        where = f"{family}/{attn}/{dtype}/{method}"
        assert len(check.tokens) == len(tokens), where
        assert check.ok, f"{where}: {check.sentence()}"
        lossless, sentence = compare_with_reference(target, inputs, tokens, reference)
        assert lossless, f"{where}: {sentence}"
        # identical to generate(), or the first difference is a tie the sentence names
        assert (tokens == reference) == (sentence == ""), where
        if tokens == reference:  # teacher forcing the reference reproduces its own choices
            assert all(t.gap == 0.0 for t in check.tokens), where


def test_fp32_differences_are_errors_never_ties(load_tiny) -> None:
    target = load_tiny("qwen2_vl")
    inputs = recap.prepare_inputs(target, make_image(1), PROMPTS[0])
    tokens = recap.generate(target, make_image(1), PROMPTS[0], method="ar", max_new_tokens=8).token_ids
    assert compare_with_reference(target, inputs, tokens, tokens) == (True, "")
    other = [*tokens[:-1], (tokens[-1] + 1) % target.vocab_size]
    lossless, sentence = compare_with_reference(target, inputs, other, tokens)
    assert not lossless and sentence == f"fp32 differs from generate() at token {len(tokens)} (not lossless)"
    check = check_greedy(target, inputs, other)
    assert not check.ok and check.errors[0].index == len(tokens) - 1


def _mask_window_off(parents, prefix_len, dtype):
    """A real bug: the tree mask's prefix window ends three positions early (the three tokens before
    the root are closed). One position off is not enough on these tiny models: their logits are so
    flat that a decode under it can stay within the tie tolerance for 32 tokens (qwen2_vl/recap did)."""
    bias = tree_attention_bias(parents, prefix_len, dtype).clone()
    bias[..., max(prefix_len - 3, 0):prefix_len] = torch.finfo(dtype).min
    return bias


@pytest.mark.parametrize("method", ["ar", "recap"])
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "gemma3"])
def test_the_check_fails_on_a_tree_mask_whose_window_is_off(
    load_reduced, monkeypatch: pytest.MonkeyPatch, family: str, method: str
) -> None:
    target = load_reduced(family, "sdpa", "bf16")
    image, prompt = make_image(1), PROMPTS[0]
    inputs = recap.prepare_inputs(target, image, prompt)
    healthy = recap.generate(target, image, prompt, method=method, max_new_tokens=32).token_ids
    assert check_greedy(target, inputs, healthy).ok
    # recap's own mask builder, as the engine's verify step calls it (not transformers)
    monkeypatch.setattr(verify_module, "tree_attention_bias", _mask_window_off)
    broken = recap.generate(target, image, prompt, method=method, max_new_tokens=32).token_ids
    monkeypatch.undo()
    check = check_greedy(target, inputs, broken)
    assert not check.ok, f"{family}/{method}: the check passed a masked-off decode: {check.sentence()}"
    assert check.sentence().startswith("bf16 error at token")
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=32)
    reference = out[0, inputs["input_ids"].shape[1]:].tolist()
    assert compare_with_reference(target, inputs, broken, reference)[0] is False


def test_bad_tokens_are_named(load_tiny) -> None:
    target = load_tiny("llava")
    inputs = recap.prepare_inputs(target, None, PROMPTS[2])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        check_greedy(target, inputs, [target.vocab_size + 3])
    assert check_greedy(target, inputs, []).tokens == []
