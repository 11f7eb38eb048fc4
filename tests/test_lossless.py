"""Lossless: every method's output equals the model's own generate(), token for token.

Covered for every tiny family of tests/tiny_models.py (Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
LLaVA-1.5, LLaVA-NeXT with a Llama and with a Qwen2 text model, Gemma 3), sdpa and eager
attention, several images and prompts, a text-only prompt, EOS inside an accepted path,
max_new_tokens falling mid-path, and a persistent memory reused over three requests with
different images, and the generation config Qwen2.5-VL-7B-Instruct ships (sampling with
top_k=1 and a repetition penalty) on every family, against both greedy and plain generate().
tests/test_generation_config.py covers each logits processor on its own.

Identity alone would pass a drafter whose trees never match, so the matrix also checks, per
family and method, that a method with trees had drafted tokens accepted (tests/accepted.py). The
tests that need trees drafted (those, a cut or an EOS inside an accepted path, two runs' traces)
pass ``config=TREES``: trees that do not depend on the size loop's wall-clock timings.
"""

from __future__ import annotations

import pytest
import torch
from accepted import TREES, AcceptedDrafts
from hf_reference import greedy_reference
from PIL import Image, ImageDraw
from tiny_models import FAMILIES

import recap

METHODS = recap.METHODS
PROMPTS = ["describe the image .", "what color is the circle ?", "tell me about the picture"]


def make_image(seed: int, size: tuple[int, int] = (90, 70)) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    colors = torch.randint(0, 256, (4, 3), generator=g).tolist()
    img = Image.new("RGB", size, tuple(colors[0]))
    draw = ImageDraw.Draw(img)
    draw.ellipse((5, 5, 40, 40), fill=tuple(colors[1]))
    draw.rectangle((45, 20, 85, 60), fill=tuple(colors[2]))
    return img


def reference(target: recap.Target, image, prompt: str, n: int) -> list[int]:
    """Greedy ``generate()``'s new tokens, computed once per session (tests/hf_reference.py)."""
    return greedy_reference(target, image, prompt, n)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_matches_greedy_generate_over_three_requests(load_tiny, family: str, attn: str) -> None:
    target = load_tiny(family, attn)
    requests = [(make_image(1), PROMPTS[0]), (make_image(2), PROMPTS[1]), (make_image(3), PROMPTS[0])]
    refs = [reference(target, img, p, 32) for img, p in requests]
    accepted = AcceptedDrafts(f"{family}/{attn}")
    for method in METHODS:
        memory = recap.TokenMemory.for_target(target)  # one memory reused across the three requests
        for (img, prompt), ref in zip(requests, refs):
            out = recap.generate(target, img, prompt, method=method, max_new_tokens=32, memory=memory,
                                 config=TREES)
            assert out.token_ids == ref, f"{family}/{attn}/{method} diverged from greedy generate"
            assert out.decode_steps >= 1 and out.mat == pytest.approx(len(ref) / out.decode_steps)
            accepted.add(method, out)
    accepted.check()


@pytest.mark.parametrize("family", FAMILIES)
def test_text_only_prompt_matches_greedy_generate(load_tiny, family: str) -> None:
    target = load_tiny(family)
    ref = reference(target, None, PROMPTS[2], 24)
    for method in METHODS:
        assert recap.generate(target, None, PROMPTS[2], method=method, max_new_tokens=24).token_ids == ref


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava_next"])
def test_max_new_tokens_falling_mid_path_cuts_exactly(load_tiny, family: str) -> None:
    target = load_tiny(family)
    img = make_image(4)
    full = reference(target, img, PROMPTS[0], 30)
    memory = recap.TokenMemory.for_target(target)
    recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=30, memory=memory,
                   config=TREES)  # warm up
    cut_mid_path = 0
    for n in range(1, 21):
        steps = list(
            recap.iter_steps(target, img, PROMPTS[0], method="recap", max_new_tokens=n, memory=memory,
                             config=TREES)
        )
        assert steps[-1].token_ids == full[:n]
        last = steps[-1]
        # cut inside the path: the accepted nodes' tokens were emitted, the bonus was not
        if last.stop_reason == "max_new_tokens" and len(last.emitted) == len(last.accepted) - 1:
            cut_mid_path += 1
    assert cut_mid_path > 0, "no run had max_new_tokens fall inside an accepted path"


@pytest.mark.parametrize("family", ["qwen2_vl", "llava"])
def test_eos_inside_an_accepted_path_stops_exactly(load_tiny, family: str) -> None:
    target = load_tiny(family)
    img = make_image(5)
    free = reference(target, img, PROMPTS[0], 30)
    memory = recap.TokenMemory.for_target(target)
    recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=30, memory=memory,
                   config=TREES)  # warm up
    steps = list(recap.iter_steps(target, img, PROMPTS[0], method="recap", max_new_tokens=30, memory=memory,
                                  config=TREES))
    # Declare a token that the warm run accepts inside a multi-token path to be an EOS.
    candidates = [
        s.tree.tokens[s.accepted[i]]
        for s in steps
        if len(s.accepted) >= 3
        for i in range(1, len(s.accepted) - 1)
    ]
    assert candidates, "the warm run accepted no path long enough to hold an EOS inside it"
    stop = candidates[0]
    saved = target.model.generation_config.eos_token_id
    try:
        eos = [saved, stop] if isinstance(saved, int) else [*saved, stop]
        target.model.generation_config.eos_token_id = eos
        ref = reference(target, img, PROMPTS[0], 30)
        assert ref != free and ref[-1] == stop
        for method in METHODS:
            mem = recap.TokenMemory.for_target(target)
            recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=30, memory=mem,
                           config=TREES)
            out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=30, memory=mem,
                                 config=TREES)
            assert out.token_ids == ref and out.stop_reason == "eos"
    finally:
        target.model.generation_config.eos_token_id = saved


def test_generate_is_deterministic_and_trace_matches_output(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    img = make_image(6)
    a = recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=20, trace=True, config=TREES)
    b = recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=20, trace=True, config=TREES)
    assert a.token_ids == b.token_ids
    assert a.trace is not None and a.trace.token_ids == a.token_ids
    assert [t for s in a.trace.steps for t in s.emitted] == a.token_ids
    back = recap.DecodeTrace.from_json(a.trace.to_json())
    assert back.token_ids == a.token_ids and len(back.steps) == a.decode_steps


def test_trace_records_each_memory_entrys_own_top1(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    img, mem = make_image(6), recap.TokenMemory.for_target(target)
    recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=20, memory=mem, config=TREES)
    out = recap.generate(target, img, PROMPTS[1], method="recap", max_new_tokens=20, memory=mem, trace=True,
                         config=TREES)
    sources = [(n, src) for st in out.trace.steps for n in st.nodes for src in n.sources]
    assert sources, "a warm memory proposes nodes"
    for n, src in sources:
        assert 0 <= src.top_token and src.top_text == target.token_text(src.top_token)
        assert src.top_prob >= src.prob  # the top-1 is the entry's most probable token
        if n.token == src.top_token:
            assert src.top_prob == src.prob


@pytest.mark.parametrize(
    "config",
    [
        recap.RecapConfig(budget=1, max_depth=1),
        recap.RecapConfig(budget=64, max_depth=16, max_children=2),
        recap.RecapConfig(fusion="backoff", use_m3=False, suffix=False, calibrate=False),
        recap.RecapConfig(fusion="fixed", use_m2=False, depth_discount=0.5, top_k=3),
        recap.RecapConfig(budget="auto"),
    ],
    ids=["tiny-tree", "deep-narrow", "backoff", "fixed", "auto"],
)
def test_every_config_stays_lossless(load_tiny, config) -> None:
    target = load_tiny("qwen2_5_vl")
    ref = reference(target, make_image(7), PROMPTS[0], 24)
    for method in ("tr", "recap"):
        memory = recap.TokenMemory.for_target(target, config.top_k)
        for _ in range(2):  # cold, then warm
            out = recap.generate(target, make_image(7), PROMPTS[0], method=method, max_new_tokens=24,
                                 memory=memory, config=config)
            assert out.token_ids == ref, f"{method} with {config}"


#: Qwen2.5-VL-7B-Instruct's generation_config.json (EOS ids mapped onto the tiny vocabulary:
#: <|im_end|> and <|endoftext|>, as the real file lists 151645 and 151643).
QWEN25_VL_SHIPPED = {
    "do_sample": True, "temperature": 0.1, "top_k": 1, "top_p": 0.001, "repetition_penalty": 1.05,
}


@pytest.mark.parametrize("family", FAMILIES)
def test_qwen25_vl_shipped_generation_config_matches_greedy_and_plain_generate(
    load_tiny, family: str
) -> None:
    target = load_tiny(family)
    saved = target.model.generation_config
    eos, other = target.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    shipped = saved.__class__(**{**saved.to_dict(), **QWEN25_VL_SHIPPED, "eos_token_id": [eos, other]})
    img = make_image(2)
    raw = reference(target, img, PROMPTS[0], 32)
    target.model.generation_config = shipped
    try:
        greedy = reference(target, img, PROMPTS[0], 32)
        inputs = recap.prepare_inputs(target, img, PROMPTS[0])
        with torch.inference_mode():
            plain = target.model.generate(**inputs, max_new_tokens=32)
        plain = plain[0, inputs["input_ids"].shape[1] :].tolist()
        assert plain == greedy, "top_k=1 sampling is the processed argmax"
        assert greedy != raw, "the repetition penalty changes this output: the raw argmax would diverge"
        accepted = AcceptedDrafts(f"{family}, shipped config")
        for method in METHODS:
            memory = recap.TokenMemory.for_target(target)
            for _ in range(2):  # cold, then warm
                out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=32, memory=memory,
                                     config=TREES)
                assert out.token_ids == greedy, f"{family}/{method} diverged under the shipped config"
                accepted.add(method, out)
        accepted.check()
    finally:
        target.model.generation_config = saved
