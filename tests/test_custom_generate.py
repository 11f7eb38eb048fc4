"""RECAP inside transformers' generate(): ``custom_generate=recap.decoding(...)`` (issue 38).

On every tiny family (tests/tiny_models.py): the callable's output equals plain greedy
``model.generate()`` token for token for ar, Token Recycling and RECAP (cold and warm memory, with
drafted tokens accepted), and sampled ``generate(do_sample=True)`` under the same seed; the output
object of ``return_dict_in_generate=True`` with the trace; the repository's ``custom_generate/``
folder loaded by local path as transformers loads a Hub repository; and every refusal named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accepted import AcceptedDrafts
from test_lossless import PROMPTS, make_image
from tiny_models import FAMILIES
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

import recap

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("ar", "tr", "recap")
N = 24
SAMPLED = {"do_sample": True, "temperature": 0.7, "top_p": 0.9}
#: Trees of a fixed size: whether drafted tokens get accepted must not depend on this machine's timings.
FIXED = recap.RecapConfig(budget=24, cost_aware=False)


def hf(target: recap.Target, inputs: dict, seed: int | None = None, **kwargs) -> torch.Tensor:
    """Plain ``model.generate()`` (after ``torch.manual_seed(seed)`` when given): the reference."""
    if seed is not None:
        torch.manual_seed(seed)
    return target.model.generate(**inputs, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_custom_generate_equals_greedy_generate_for_every_method(load_tiny, family: str) -> None:
    target = load_tiny(family)
    accepted = AcceptedDrafts(f"{family}, custom_generate")
    requests = [(make_image(1), PROMPTS[0]), (make_image(2), PROMPTS[1]), (None, PROMPTS[2])]
    for method in METHODS:
        memory = recap.TokenMemory.for_target(target)  # warm across the requests, as a caller keeps it
        for image, prompt in requests * 2:
            inputs = recap.prepare_inputs(target, image, prompt)
            ref = hf(target, inputs, do_sample=False, max_new_tokens=N)
            out = target.model.generate(
                **inputs, do_sample=False, max_new_tokens=N, return_dict_in_generate=True,
                custom_generate=recap.decoding(method=method, memory=memory, config=FIXED),
            )
            assert isinstance(out, GenerateDecoderOnlyOutput) and isinstance(out, recap.RecapGenerateOutput)
            assert torch.equal(out.sequences, ref), f"{family}/{method} diverged from greedy generate()"
            new = ref.shape[1] - inputs["input_ids"].shape[1]
            assert out.method == method and sum(out.accepted_lengths) == new
            accepted.add(method, _as_generation(out))
    accepted.check()


def _as_generation(out: recap.RecapGenerateOutput):
    """What AcceptedDrafts counts: the new tokens and the passes."""
    from types import SimpleNamespace

    return SimpleNamespace(token_ids=[0] * sum(out.accepted_lengths), decode_steps=out.decode_steps)


@pytest.mark.parametrize("family", FAMILIES)
def test_custom_generate_samples_generates_tokens_under_the_same_seed(load_tiny, family: str) -> None:
    target = load_tiny(family)
    inputs = recap.prepare_inputs(target, make_image(3), PROMPTS[0])
    for seed in (0, 1):
        ref = hf(target, inputs, seed=seed, max_new_tokens=N, **SAMPLED)
        for method in METHODS:
            torch.manual_seed(seed)  # the default generator, as generate() draws
            out = target.model.generate(**inputs, max_new_tokens=N, **SAMPLED,
                                        custom_generate=recap.decoding(method=method))
            assert torch.equal(out, ref), f"{family}/{method}: torch.manual_seed({seed}) diverged"
            # a private generator seeded the same draws the same tokens
            private = target.model.generate(**inputs, max_new_tokens=N, **SAMPLED,
                                            custom_generate=recap.decoding(method=method, seed=seed))
            assert torch.equal(private, ref), f"{family}/{method}: decoding(seed={seed}) diverged"


def test_the_output_object_carries_the_trace(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    inputs = recap.prepare_inputs(target, make_image(4), PROMPTS[0])
    fixed = FIXED
    out = target.model.generate(
        **inputs, max_new_tokens=N, do_sample=False, return_dict_in_generate=True,
        custom_generate=recap.decoding(method="recap", trace=True, processor=target.processor, config=fixed),
    )
    new = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    assert out.trace is not None and out.trace.token_ids == new and len(out.trace.steps) == out.decode_steps
    assert out.trace.text == target.output_text(new)
    assert out.stop_reason in ("eos", "max_new_tokens")
    assert out.mat == pytest.approx(len(new) / out.decode_steps)
    assert out.scores is None and out.logits is None  # nothing computed that generate() would return there
    # the one engine: recap.generate on the same request drafts and accepts the same trees
    same = recap.generate(target, make_image(4), PROMPTS[0], method="recap", max_new_tokens=N, config=fixed,
                          trace=True)
    assert same.token_ids == new and same.accepted_lengths == out.accepted_lengths
    def trees(trace: recap.DecodeTrace) -> list[list[int]]:
        return [[node.token for node in step.nodes] for step in trace.steps]

    assert trees(same.trace) == trees(out.trace)


def test_the_folder_loads_by_local_path_as_a_hub_repository(load_tiny) -> None:
    """``custom_generate/`` in the layout the Hub expects, loaded from the repository root with
    ``trust_remote_code`` (transformers copies and imports ``custom_generate/generate.py``)."""
    target = load_tiny("llava_next")
    inputs = recap.prepare_inputs(target, make_image(5), PROMPTS[1])
    ref = hf(target, inputs, do_sample=False, max_new_tokens=N)
    memory = recap.TokenMemory.for_target(target)
    for _ in range(2):
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=N, custom_generate=str(ROOT),
                                    trust_remote_code=True, method="recap", memory=memory)
        assert torch.equal(out, ref)
    assert len(memory.requests) == 2, "the folder's generate passed method= and memory= to the decoding"
    out = target.model.generate(**inputs, do_sample=False, max_new_tokens=N, custom_generate=str(ROOT),
                                trust_remote_code=True, return_dict_in_generate=True, method="tr")
    assert torch.equal(out.sequences, ref) and out.method == "tr"
    with pytest.raises(ValueError, match="trust_remote_code"):  # transformers' own gate on local code
        target.model.generate(**inputs, max_new_tokens=4, custom_generate=str(ROOT))
    for name in ("generate.py", "README.md", "requirements.txt"):
        assert (ROOT / "custom_generate" / name).is_file()
    front = (ROOT / "custom_generate" / "README.md").read_text().split("---")[1]
    assert "library_name: transformers" in front and "- custom_generate" in front


class Recording:
    """A streamer that records every call (transformers' protocol: put, end)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append(("put", tuple(value.shape), value.tolist()))

    def end(self) -> None:
        self.calls.append(("end",))


def test_the_streamer_gets_the_calls_generate_makes(load_tiny) -> None:
    target = load_tiny("qwen2_vl")
    inputs = recap.prepare_inputs(target, make_image(6), PROMPTS[0])
    theirs, ours, folder = Recording(), Recording(), Recording()
    hf(target, inputs, do_sample=False, max_new_tokens=N, streamer=theirs)
    target.model.generate(**inputs, do_sample=False, max_new_tokens=N,
                          custom_generate=recap.decoding(method="recap", streamer=ours))
    assert ours.calls == theirs.calls and theirs.calls[-1] == ("end",)
    # through the folder, generate()'s own streamer= reaches the decoding
    target.model.generate(**inputs, do_sample=False, max_new_tokens=N, custom_generate=str(ROOT),
                          trust_remote_code=True, streamer=folder)
    assert folder.calls == theirs.calls
    # and with the callable: generate() put the prompt into its streamer, the decoding sends the rest
    for dec_streamer in (None, "same"):
        given = Recording()
        dec = recap.decoding(streamer=given if dec_streamer else None)
        target.model.generate(**inputs, do_sample=False, max_new_tokens=N, custom_generate=dec,
                              streamer=given)
        assert given.calls == theirs.calls
    with pytest.raises(ValueError, match="two streamers"):
        target.model.generate(**inputs, max_new_tokens=4, streamer=Recording(),
                              custom_generate=recap.decoding(streamer=Recording()))


def test_a_text_iterator_streamer_given_to_generate_reads_the_text(load_tiny) -> None:
    import threading

    from transformers import TextIteratorStreamer

    target = load_tiny("llava_next_qwen2")
    inputs = recap.prepare_inputs(target, make_image(8), PROMPTS[1])
    texts = []
    for custom in (None, recap.decoding(method="recap")):
        streamer = TextIteratorStreamer(target.tokenizer, skip_prompt=True, timeout=60)
        kwargs = {"custom_generate": custom} if custom is not None else {}
        thread = threading.Thread(target=target.model.generate, kwargs={
            **inputs, "do_sample": False, "max_new_tokens": N, "streamer": streamer, **kwargs})
        thread.start()
        texts.append("".join(streamer))
        thread.join()
    assert texts[0] == texts[1] and texts[0].strip()


def test_refusals_are_named(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    inputs = recap.prepare_inputs(target, make_image(7), PROMPTS[0])
    dec = recap.decoding(method="recap")
    gen = target.model.generate

    class Shift(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores

    class Never(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    two = {k: torch.cat([v, v]) if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v
           for k, v in inputs.items()}
    two["pixel_values"] = torch.cat([inputs["pixel_values"]] * 2)
    two["image_grid_thw"] = torch.cat([inputs["image_grid_thw"]] * 2)
    with pytest.raises(ValueError, match="batch of 2"):
        gen(**two, max_new_tokens=4, custom_generate=dec)
    with pytest.raises(ValueError, match="Shift"):
        gen(**inputs, max_new_tokens=4, custom_generate=dec, logits_processor=LogitsProcessorList([Shift()]))
    with pytest.raises(ValueError, match="PrefixConstrainedLogitsProcessor"):
        gen(**inputs, max_new_tokens=4, custom_generate=dec, prefix_allowed_tokens_fn=lambda b, ids: [1, 2])
    with pytest.raises(ValueError, match="Never"):
        gen(**inputs, max_new_tokens=4, custom_generate=dec,
            stopping_criteria=StoppingCriteriaList([Never()]))
    with pytest.raises(ValueError, match="output_scores"):
        gen(**inputs, max_new_tokens=4, custom_generate=dec, return_dict_in_generate=True, output_scores=True)
    with pytest.raises(ValueError, match="num_beams"):  # the engine's own refusal, as recap.generate's
        gen(**inputs, max_new_tokens=4, custom_generate=dec, num_beams=2)
    with pytest.raises(ValueError, match="assistant_model"):
        gen(**inputs, max_new_tokens=4, custom_generate=dec, assistant_model=target.model)
    traced = recap.decoding(trace=True, processor=target.processor)
    with pytest.raises(ValueError, match="return_dict_in_generate"):
        gen(**inputs, max_new_tokens=4, custom_generate=traced)
    padded = {**inputs, "attention_mask": inputs["attention_mask"].clone()}
    padded["attention_mask"][0, 0] = 0
    with pytest.raises(ValueError, match="padding"):
        gen(**padded, max_new_tokens=4, custom_generate=dec)
    for bad, match in (({"method": "nope"}, "nope"), ({"trace": True}, "processor="),
                       ({"seed": -1}, "seed"), ({"memory": {}}, "TokenMemory"),
                       ({"streamer": object()}, "put"), ({"processor": object()}, "tokenizer"),
                       ({"owner": ""}, "owner"), ({"memory_scope": 3}, "memory_scope")):
        with pytest.raises(ValueError, match=match):
            recap.decoding(**bad)


def test_the_model_is_wrapped_once_and_its_lock_kept(load_tiny) -> None:
    from recap.integrations.custom_generate import _target

    target = load_tiny("gemma3")
    first = _target(target.model, None)
    assert _target(target.model, None) is first
    other = _target(target.model, target.processor)
    assert other is not first and other.prefill_lock is first.prefill_lock


def test_the_docs_checker_reads_a_path_ending_in_an_export_as_a_path() -> None:
    """``recap.decoding`` is an export; `app/state/decoding.py` in a doc stays a file name."""
    import doc_refs

    assert doc_refs.check_names("x.md", "`app/state/decoding.py`, `custom_generate/generate.py`") == []
    assert doc_refs.check_names("x.md", "`decoding.nope`") != []


def test_the_configs_own_processors_are_applied_not_refused(load_tiny) -> None:
    """Processors and criteria generate() builds from its settings are the engine's to apply."""
    target = load_tiny("qwen3_vl")
    inputs = recap.prepare_inputs(target, make_image(9), PROMPTS[0])
    settings = {"repetition_penalty": 1.3, "no_repeat_ngram_size": 3, "min_new_tokens": 4,
                "suppress_tokens": [5], "do_sample": False, "max_new_tokens": N}
    ref = hf(target, inputs, **settings)
    assert not torch.equal(ref, hf(target, inputs, do_sample=False, max_new_tokens=N)), "the settings matter"
    out = target.model.generate(**inputs, **settings, custom_generate=recap.decoding(method="recap"))
    assert torch.equal(out, ref)


def test_a_model_loaded_from_a_repository_with_the_folder_generates_with_recap(tiny_dirs, tmp_path) -> None:
    """A self-contained model-generate pair: the model's files and ``custom_generate/`` in one folder;
    ``from_pretrained(..., trust_remote_code=True)`` makes the method the model's ``generate``."""
    import shutil

    from transformers import Qwen2_5_VLForConditionalGeneration

    repo = tmp_path / "repo"
    shutil.copytree(tiny_dirs["qwen2_5_vl"], repo)
    shutil.copytree(ROOT / "custom_generate", repo / "custom_generate")
    plain = Qwen2_5_VLForConditionalGeneration.from_pretrained(repo).eval()
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(repo, trust_remote_code=True).eval()
    target = recap.Target.from_model(plain, recap.load_target(repo).processor)
    inputs = recap.prepare_inputs(target, make_image(10), PROMPTS[1])
    ref = plain.generate(**inputs, do_sample=False, max_new_tokens=N)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=N, return_dict_in_generate=True,
                         method="tr")
    assert isinstance(out, recap.RecapGenerateOutput) and out.method == "tr", "the folder's generate ran"
    assert torch.equal(out.sequences, ref)


@pytest.mark.parametrize("name", ["smolvlm-256m-instruct", "smolvlm2-256m-video-instruct"])
def test_smolvlm_tiles_and_their_pixel_mask_reach_the_engine(name: str, tmp_path) -> None:
    """SmolVLM / Idefics3 (tests/smolvlm_models.py): several tiles and a ``pixel_attention_mask``, handed
    over before generate() would encode them."""
    import smolvlm_models

    assert name in smolvlm_models.NAMES
    directory = smolvlm_models.build(name, tmp_path / name)
    target = recap.load_target(directory, device="cpu", dtype=torch.float32)
    inputs = recap.prepare_inputs(target, make_image(11, (200, 50)), PROMPTS[0])
    assert "pixel_attention_mask" in inputs and inputs["pixel_values"].shape[1] > 1  # tiles
    ref = hf(target, inputs, do_sample=False, max_new_tokens=N)
    memory = recap.TokenMemory.for_target(target)
    for method in ("tr", "recap", "recap"):
        dec = recap.decoding(method=method, memory=memory, config=FIXED)
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=N, custom_generate=dec)
        assert torch.equal(out, ref), f"{name}/{method}"
