"""``recap.generate`` takes what transformers' ``generate()`` takes (issue 38): generation settings as
keywords (merged into its generation config, unknown names refused), a ``streamer=`` with
transformers' protocol (the calls ``generate()`` makes; ``TextIteratorStreamer`` in a thread), model
inputs already built (``inputs=``), and a model loaded with transformers (``recap.Target.from_model``).
"""

from __future__ import annotations

import threading

import pytest
import torch
from test_custom_generate import FIXED, Recording
from test_lossless import PROMPTS, make_image
from transformers import GenerationConfig, TextIteratorStreamer

import recap
from recap.core.errors import InputError
from recap.engine.generate_args import generation_settings

N = 20
SAMPLED = {"do_sample": True, "temperature": 0.7, "top_p": 0.9}


def hf_tokens(target: recap.Target, image, prompt: str, seed: int | None = None, **kwargs) -> list[int]:
    inputs = recap.prepare_inputs(target, image, prompt)
    if seed is not None:
        torch.manual_seed(seed)
    out = target.model.generate(**inputs, max_new_tokens=N, **kwargs)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def test_generation_settings_as_keywords_equal_generate_with_them(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    img = make_image(1)
    for seed in (0, 5):
        ref = hf_tokens(target, img, PROMPTS[0], seed=seed, **SAMPLED)
        for method in ("ar", "recap"):
            out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=N, seed=seed,
                                 **SAMPLED)
            assert out.token_ids == ref, f"{method}, seed {seed}"
    # over a generation_config: the keywords win, the rest of the config stays
    greedy = hf_tokens(target, img, PROMPTS[0], do_sample=False, repetition_penalty=1.3)
    config = GenerationConfig(do_sample=True, repetition_penalty=1.3)
    out = recap.generate(target, img, PROMPTS[0], max_new_tokens=N, generation_config=config, do_sample=False)
    assert out.token_ids == greedy and config.do_sample is True, "the caller's config is left as it was"
    out = recap.generate(target, img, PROMPTS[0], max_new_tokens=N,
                         generation_config={"repetition_penalty": 1.3}, do_sample=False)
    assert out.token_ids == greedy
    assert greedy != hf_tokens(target, img, PROMPTS[0], do_sample=False), "the penalty changes this output"


def test_unknown_and_misplaced_settings_are_refused(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    with pytest.raises(ValueError, match="'temprature'"):
        recap.generate(target, make_image(1), PROMPTS[0], max_new_tokens=4, temprature=0.7)
    with pytest.raises(ValueError, match="max_new_tokens="):
        recap.generate(target, make_image(1), PROMPTS[0], max_length=40)
    with pytest.raises(ValueError, match="num_beams"):  # the engine's refusal of the merged config
        recap.generate(target, make_image(1), PROMPTS[0], max_new_tokens=4, num_beams=2)
    with pytest.raises(ValueError, match="'a', 'b'"):
        list(recap.iter_steps(target, make_image(1), PROMPTS[0], max_new_tokens=4, b=1, a=2))
    assert generation_settings(None, {}) is None
    merged = generation_settings({"top_k": 3}, {"top_k": 5, "do_sample": True})
    assert merged == {"top_k": 5, "do_sample": True}


def test_the_streamer_gets_the_calls_generate_makes(load_tiny) -> None:
    target = load_tiny("llava")
    img = make_image(2)
    inputs = recap.prepare_inputs(target, img, PROMPTS[0])
    theirs = Recording()
    target.model.generate(**inputs, do_sample=False, max_new_tokens=N, streamer=theirs)
    memory = recap.TokenMemory.for_target(target)
    for method in ("ar", "tr", "recap", "recap"):  # the last one warm: several tokens per pass
        ours = Recording()
        out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=N, memory=memory,
                             do_sample=False, streamer=ours, config=FIXED)
        assert ours.calls == theirs.calls, method
    assert out.decode_steps < len(out.token_ids), "a pass emitted several tokens, streamed one by one"
    # iter_steps streams as it goes: the prompt, then each step's tokens before the step is yielded
    ours = Recording()
    steps = recap.iter_steps(target, img, PROMPTS[0], max_new_tokens=N, memory=memory, streamer=ours)
    first = next(steps)
    assert len(ours.calls) == 1 + len(first.emitted) and ours.calls[0][1] == tuple(inputs["input_ids"].shape)
    steps.close()


def test_a_text_iterator_streamer_reads_the_text_in_another_thread(load_tiny) -> None:
    target = load_tiny("qwen2_vl")
    img = make_image(3)
    inputs = recap.prepare_inputs(target, img, PROMPTS[1])

    def hf(streamer: TextIteratorStreamer) -> None:
        target.model.generate(**inputs, do_sample=False, max_new_tokens=N, streamer=streamer)

    def ours(streamer: TextIteratorStreamer) -> None:
        recap.generate(target, img, PROMPTS[1], max_new_tokens=N, streamer=streamer)

    texts = []
    for job in (hf, ours):
        streamer = TextIteratorStreamer(target.tokenizer, skip_prompt=True, timeout=60)
        thread = threading.Thread(target=job, args=(streamer,))
        thread.start()
        texts.append("".join(streamer))  # ends when end() is called
        thread.join()
    assert texts[0] == texts[1] and texts[0].strip()
    with pytest.raises(ValueError, match="end"):
        recap.generate(target, img, PROMPTS[1], max_new_tokens=4, streamer=type("P", (), {"put": print})())


def test_prepared_inputs_decode_as_the_request(load_tiny) -> None:
    target = load_tiny("gemma3")
    img = make_image(4)
    ref = recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=N)
    inputs = recap.prepare_inputs(target, img, PROMPTS[0])
    out = recap.generate(target, inputs=inputs, method="recap", max_new_tokens=N, trace=True)
    assert out.token_ids == ref.token_ids and out.text == ref.text
    assert out.trace.image_key and out.trace.turn == 1 and PROMPTS[0] in out.trace.prompt
    text_only = recap.prepare_inputs(target, None, PROMPTS[2])
    assert recap.generate(target, inputs=text_only, max_new_tokens=N).token_ids == hf_tokens(
        target, None, PROMPTS[2], do_sample=False)
    with pytest.raises(InputError, match="not both"):
        recap.generate(target, img, PROMPTS[0], inputs=inputs)
    batch = {**inputs, "input_ids": torch.cat([inputs["input_ids"]] * 2)}
    with pytest.raises(ValueError, match="batch of 2"):
        recap.generate(target, inputs=batch)
    with pytest.raises(InputError, match="vocabulary"):
        recap.generate(target, inputs={"input_ids": torch.tensor([[1, 10**7]])})
    with pytest.raises(ValueError, match="dict"):
        recap.generate(target, inputs=[1, 2])


def test_a_model_loaded_with_transformers_is_wrapped(load_tiny) -> None:
    target = load_tiny("llava_next")
    wrapped = recap.Target.from_model(target.model, target.processor)
    assert (wrapped.family, wrapped.device, wrapped.dtype) == (target.family, target.device, target.dtype)
    img = make_image(5)
    assert recap.generate(wrapped, img, PROMPTS[0], max_new_tokens=N).token_ids == hf_tokens(
        target, img, PROMPTS[0], do_sample=False)
    bare = recap.Target.from_model(target.model)  # no processor: prepared inputs, no texts
    inputs = recap.prepare_inputs(target, img, PROMPTS[0])
    *_, last = recap.iter_steps(bare, inputs=inputs, max_new_tokens=N, method="tr")
    assert last.token_ids == hf_tokens(target, img, PROMPTS[0], do_sample=False)
    with pytest.raises(ValueError, match="no processor"):
        recap.generate(bare, img, PROMPTS[0], max_new_tokens=N)
    with pytest.raises(ValueError, match="LlavaNextForConditionalGeneration"):
        recap.Target.from_model(target.model.model, target.processor)  # the base model: no LM head
    with pytest.raises(ValueError, match="tokenizer"):
        recap.Target.from_model(target.model, object())
    with pytest.raises(ValueError, match="supports these families"):
        recap.Target.from_model(torch.nn.Linear(2, 2))


def test_a_model_of_another_family_or_attention_is_refused() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    with pytest.raises(ValueError, match="'llama'"):
        recap.Target.from_model(LlamaForCausalLM(config))


def test_an_attention_that_skips_the_tree_mask_is_refused(load_tiny) -> None:
    config = load_tiny("llava").model.config
    saved = config._attn_implementation
    config._attn_implementation = "flex_attention"  # what a model loaded with it reports
    try:
        with pytest.raises(ValueError, match="'flex_attention' cannot verify a draft tree"):
            recap.Target.from_model(load_tiny("llava").model)
    finally:
        config._attn_implementation = saved
    assert config.get_text_config()._attn_implementation == saved
