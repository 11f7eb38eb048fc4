"""Lossless under the generation config: every method emits what the model's own generate() emits.

generate() does not take the raw argmax: it applies the logits processors its
generation config asks for. Each processor recap implements is checked three ways:

* per node, the processed scores equal transformers' own processors run on that node's
  context alone (bit for bit, on random trees);
* end to end on the tiny models, every method equals both ``generate(do_sample=False)``
  and plain ``generate()`` under a config that sets it (chosen from the unprocessed
  output so that it really changes the output);
* with hypothesis over penalty values and n-gram sizes.

A config that really samples is sampled, as generate() samples it (tests/test_sampling.py
covers sampling in full); what cannot be reproduced raises naming the field.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from accepted import TREES
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_lossless import PROMPTS, make_image
from transformers import GenerationConfig

import recap
from recap.__main__ import main
from recap.drafting.tree import DraftTree
from recap.models.inputs import load_image
from recap.models.target import DEFAULT_MODEL_DIR
from recap.verification import acceptance
from recap.verification.acceptance import History, node_context, node_lengths, process_logits
from recap.verification.generation_config import acceptance_rule
from recap.verification.sampling import SamplingRule

N = 24


@contextmanager
def model_config(target: recap.Target, **fields) -> Iterator[GenerationConfig]:
    """Give the model a generation config with ``fields`` set (as a checkpoint would ship it)."""
    saved = target.model.generation_config
    gc = copy.deepcopy(saved)
    gc.update(**fields)
    target.model.generation_config = gc
    try:
        yield gc
    finally:
        target.model.generation_config = saved


def new_tokens(target: recap.Target, image, prompt: str, n: int, **kwargs) -> list[int]:
    inputs = recap.prepare_inputs(target, image, prompt)
    with torch.inference_mode():
        out = target.model.generate(**inputs, max_new_tokens=n, **kwargs)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def assert_every_method_matches(
    target: recap.Target, image, prompt: str, n: int, ref: list[int], label: str,
    config: recap.RecapConfig = TREES, **kwargs,
) -> None:
    """All methods, cold then warm memory, equal ``ref`` (generate(max_new_tokens=n)); warm tree
    methods accept multi-token paths (under ``config``: ``TREES``, trees that do not depend on the
    size loop's timings)."""
    for method in recap.METHODS:
        memory = recap.TokenMemory.for_target(target)
        for run in ("cold", "warm"):
            out = recap.generate(target, image, prompt, method=method, max_new_tokens=n,
                                 memory=memory, config=config, **kwargs)
            assert out.token_ids == ref, f"{label}: {method} ({run}) diverged from generate()"
        if method in ("tr", "recap") and len(ref) > 4:
            assert max(out.accepted_lengths) >= 2, f"{label}: {method} never accepted a drafted node"


# --------------------------------------------------------------------------- per node, vs transformers


def hf_processors(model, gc: GenerationConfig, prompt_len: int, n: int):
    """The processor list generate() builds for ``gc`` (after its own length preparation)."""
    gc, _ = model._prepare_generation_config(gc)
    gc.max_length = prompt_len + n
    if gc.min_new_tokens is not None:
        gc.min_length = prompt_len + gc.min_new_tokens
    model._prepare_special_tokens(gc, True, device="cpu")
    return model._get_logits_processor(gc, input_ids_seq_length=prompt_len, device="cpu",
                                       model_kwargs={"attention_mask": torch.ones(1, prompt_len)})


def random_tree(draw, vocab: int, size: int) -> tuple[list[int], list[int], list[int]]:
    tokens, parents, depths = [draw(st.integers(0, vocab - 1))], [-1], [0]
    for i in range(1, size):
        p = draw(st.integers(0, i - 1))
        tokens.append(draw(st.integers(0, vocab - 1)))
        parents.append(p)
        depths.append(depths[p] + 1)
    return tokens, parents, depths


@st.composite
def processor_configs(draw, vocab: int, eos: int) -> dict:
    tok = st.integers(0, vocab - 1)
    fields: dict = {"eos_token_id": [eos, draw(tok)]}
    if draw(st.booleans()):
        fields["repetition_penalty"] = draw(st.floats(0.5, 2.5))
    if draw(st.booleans()):
        fields["no_repeat_ngram_size"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        words = st.lists(tok, min_size=1, max_size=3)
        fields["bad_words_ids"] = draw(st.lists(words, min_size=1, max_size=4))
    if draw(st.booleans()):
        fields["sequence_bias"] = [
            [s, draw(st.floats(-4, 4))]
            for s in draw(st.lists(st.lists(tok, min_size=1, max_size=2), min_size=1, max_size=3))
        ]
    if draw(st.booleans()):
        fields["min_new_tokens" if draw(st.booleans()) else "min_length"] = draw(st.integers(0, 12))
    if draw(st.booleans()):
        fields["suppress_tokens"] = draw(st.lists(tok, max_size=4))
    if draw(st.booleans()):
        fields["begin_suppress_tokens"] = draw(st.lists(tok, min_size=1, max_size=3))
    if draw(st.booleans()):
        fields["forced_eos_token_id"] = eos
    fields["renormalize_logits"] = draw(st.booleans())
    fields["remove_invalid_values"] = draw(st.booleans())
    return fields


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_processed_scores_equal_transformers_processors_on_each_nodes_own_context(load_tiny, data) -> None:
    model = load_tiny("qwen2_vl").model
    vocab = model.get_output_embeddings().weight.shape[0]
    fields = data.draw(processor_configs(vocab, eos=int(model.generation_config.eos_token_id)))
    try:
        gc = GenerationConfig(**fields)
    except ValueError:  # transformers refuses it too (e.g. forcing a suppressed EOS)
        assume(False)
    history = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12))
    generated = data.draw(st.integers(0, len(history) - 1))  # the history's tail already generated
    prompt_len, n = len(history) - generated, data.draw(st.integers(generated + 1, generated + 8))
    tokens, parents, depths = random_tree(data.draw, vocab, data.draw(st.integers(1, 9)))
    tokens[0] = history[-1]  # the root is the history's last token
    logits = torch.randn(len(tokens), vocab,
                         generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))

    try:
        rule = acceptance_rule(model, gc, prompt_len=prompt_len, max_new_tokens=n, vocab_size=vocab)
    except ValueError:  # e.g. bad_words_ids holding only EOS: then generate() refuses it too
        with pytest.raises(ValueError):
            hf_processors(model, gc, prompt_len, n)(torch.tensor([history]), logits[:1].clone())
        return
    ids = torch.tensor(history)
    ours = process_logits(rule, logits, node_lengths(len(history), depths, logits.device),
                          node_context(ids, tokens, parents, depths))
    procs = hf_processors(model, gc, prompt_len, n)
    tree = DraftTree(tokens, parents, depths, [1.0] * len(tokens), [1.0] * len(tokens), [()] * len(tokens),
                     [False] * len(tokens), ["root"] * len(tokens))
    for i in range(len(tokens)):
        context = torch.tensor([history + tree.path_tokens(i)[1:]])  # (1, L): what generate() sees
        theirs = procs(context, logits[i : i + 1].clone())[0]
        # bit for bit (NaN where both are NaN: everything banned, then renormalised)
        torch.testing.assert_close(ours[i], theirs, rtol=0, atol=0, equal_nan=True,
                                   msg=f"node {i} (depth {depths[i]}) under {fields}")
    assert (ours.argmax(-1).tolist()
            == acceptance.target_scores(rule, logits, History(history, logits.device, keep_ids=True), tokens,
                                        parents, depths)
            .argmax(-1)
            .tolist())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), penalty=st.floats(0.8, 1.5))
def test_top_k_1_sampling_keeps_only_the_processed_argmax(load_tiny, seed: int, penalty: float) -> None:
    """Qwen's shipped warpers (temperature 0.1, top_k 1, top_p 0.001) leave one token: our argmax."""
    model = load_tiny("qwen2_5_vl").model
    vocab = model.get_output_embeddings().weight.shape[0]
    gc = GenerationConfig(do_sample=True, temperature=0.1, top_k=1, top_p=0.001, repetition_penalty=penalty)
    g = torch.Generator().manual_seed(seed)
    history = torch.randint(0, vocab, (10,), generator=g).tolist()
    logits = torch.randn(1, vocab, generator=g) * 4
    rule = acceptance_rule(model, gc, prompt_len=10, max_new_tokens=8, vocab_size=vocab)
    assert isinstance(rule, SamplingRule)  # it draws, as generate() does (tests/test_sampling.py)
    ours = process_logits(rule.processing, logits, torch.tensor([10]), torch.tensor([history]))
    warped = hf_processors(model, gc, 10, 8)(torch.tensor([history]), logits.clone())[0]
    assert torch.isfinite(warped).nonzero().flatten().tolist() == [int(ours.argmax())]


def test_node_context_rows_are_history_then_path_right_aligned() -> None:
    history = torch.tensor([5, 6, 7])
    tokens, parents, depths = [7, 1, 2, 3], [-1, 0, 1, 0], [0, 1, 2, 1]
    ctx = node_context(history, tokens, parents, depths)
    pad = acceptance.PAD
    assert ctx.tolist() == [[pad, pad, 5, 6, 7], [pad, 5, 6, 7, 1], [5, 6, 7, 1, 2], [pad, 5, 6, 7, 3]]
    assert node_lengths(3, depths, history.device).tolist() == [3, 4, 5, 4]


def test_with_nothing_to_apply_acceptance_is_the_raw_argmax_and_runs_no_processing(
    load_tiny, monkeypatch
) -> None:
    target = load_tiny("qwen2_5_vl")
    rule = acceptance_rule(target.model, None, prompt_len=20, max_new_tokens=8, vocab_size=target.vocab_size)
    assert not rule.active and not rule.needs_context

    def boom(*args, **kwargs):
        raise AssertionError("processing ran with nothing to apply")

    monkeypatch.setattr(acceptance, "process_logits", boom)
    ref = new_tokens(target, make_image(1), PROMPTS[0], 12, do_sample=False)
    assert (
        recap.generate(target, make_image(1), PROMPTS[0], method="recap", max_new_tokens=12).token_ids == ref
    )


# ------------------------------------------------------------------------ end to end, one processor at a time


def _most_common(tokens: list[int]) -> int:
    return Counter(tokens).most_common(1)[0][0]


#: (id, family, fields built from the unprocessed greedy output ``base``, the EOS id and the
#:  prompt length, whether the config must change the output)
PROCESSORS: list[tuple[str, str, Callable[[list[int], int, int], dict], bool]] = [
    ("repetition_penalty", "qwen2_vl", lambda b, e, p: {"repetition_penalty": 1.4}, True),
    ("repetition_penalty_below_1", "llava", lambda b, e, p: {"repetition_penalty": 0.7}, True),
    ("no_repeat_ngram_size", "llava_next", lambda b, e, p: {"no_repeat_ngram_size": 2}, True),
    ("min_new_tokens", "qwen2_5_vl", lambda b, e, p: {"eos_token_id": [e, b[2]], "min_new_tokens": 5}, True),
    ("min_length", "llava_next_qwen2", lambda b, e, p: {"eos_token_id": [e, b[1]], "min_length": p + 8},
     True),
    ("suppress_tokens", "llava", lambda b, e, p: {"suppress_tokens": [_most_common(b)]}, True),
    ("begin_suppress_tokens", "qwen2_vl", lambda b, e, p: {"begin_suppress_tokens": [b[0]]}, True),
    ("bad_words_ids", "qwen2_5_vl", lambda b, e, p: {"bad_words_ids": [[b[4]], [b[1], b[2]]]}, True),
    ("sequence_bias", "llava_next", lambda b, e, p: {"sequence_bias": [[[b[3]], -3.0], [[b[0], b[1]], -2.5]]},
     True),
    ("forced_eos_token_id", "llava_next_qwen2", lambda b, e, p: {"forced_eos_token_id": e}, True),
    ("eos_token_id_list", "qwen2_vl", lambda b, e, p: {"eos_token_id": [e, b[3]]}, True),
    (
        "renormalize_and_remove_invalid", "llava",
        lambda b, e, p: {
            "renormalize_logits": True, "remove_invalid_values": True, "suppress_tokens": [b[0]],
        },
        True,
    ),
]


@pytest.mark.parametrize("name,family,build,changes", PROCESSORS, ids=[p[0] for p in PROCESSORS])
def test_each_processor_matches_both_generate_references(load_tiny, name, family, build, changes) -> None:
    target = load_tiny(family)
    img = make_image(1)
    base = new_tokens(target, img, PROMPTS[0], N, do_sample=False)
    eos = int(target.model.generation_config.eos_token_id)
    prompt_len = recap.prepare_inputs(target, img, PROMPTS[0])["input_ids"].shape[1]
    with model_config(target, **build(base, eos, prompt_len)):
        greedy = new_tokens(target, img, PROMPTS[0], N, do_sample=False)
        plain = new_tokens(target, img, PROMPTS[0], N)
        assert greedy == plain
        if changes:
            assert greedy != base, f"{name} did not change the output: the test would prove nothing"
        assert_every_method_matches(target, img, PROMPTS[0], N, greedy, f"{family}/{name}")


def test_a_generation_config_passed_by_the_caller_is_merged_like_generate(load_tiny) -> None:
    target = load_tiny("llava_next")
    gc = GenerationConfig(repetition_penalty=1.3, no_repeat_ngram_size=3)  # eos etc. come from the model's
    ref = new_tokens(target, make_image(2), PROMPTS[1], N, generation_config=gc)
    assert ref != new_tokens(target, make_image(2), PROMPTS[1], N, do_sample=False)
    assert_every_method_matches(target, make_image(2), PROMPTS[1], N, ref, "passed config",
                                generation_config=gc)
    as_dict = recap.generate(target, make_image(2), PROMPTS[1], max_new_tokens=N,
                             generation_config={"repetition_penalty": 1.3, "no_repeat_ngram_size": 3})
    assert as_dict.token_ids == ref


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(penalty=st.floats(0.6, 2.0), ngram=st.integers(0, 4), family=st.sampled_from(["qwen2_vl", "llava"]))
def test_any_penalty_and_ngram_size_stays_lossless(
    load_tiny, penalty: float, ngram: int, family: str
) -> None:
    target = load_tiny(family)
    gc = GenerationConfig(repetition_penalty=penalty, no_repeat_ngram_size=ngram)
    ref = new_tokens(target, None, PROMPTS[2], 20, generation_config=gc)
    for method in ("pld", "recap"):
        memory = recap.TokenMemory.for_target(target)
        for _ in range(2):
            out = recap.generate(target, None, PROMPTS[2], method=method, max_new_tokens=20, memory=memory,
                                 generation_config=gc)
            assert out.token_ids == ref, (method, penalty, ngram)


# --------------------------------------------------------------------------- sampling, and what raises


def test_a_really_sampling_config_is_sampled_as_generate_samples_it(load_tiny) -> None:
    """The "sampling ignored" fallback is gone: the model's own sampling config is honoured."""
    target = load_tiny("qwen2_5_vl")
    img = make_image(3)
    with model_config(target, do_sample=True, top_k=50, temperature=0.7, repetition_penalty=1.2):
        greedy = new_tokens(target, img, PROMPTS[0], N, do_sample=False)
        torch.manual_seed(5)
        ref = new_tokens(target, img, PROMPTS[0], N)  # plain generate(): the config samples
        torch.manual_seed(5)
        steps = list(recap.iter_steps(target, img, PROMPTS[0], method="recap", max_new_tokens=N, trace=True))
        torch.manual_seed(5)
        out = recap.generate(target, img, PROMPTS[0], method="tr", max_new_tokens=N, trace=True)
    assert ref != greedy, "the config must really sample for this test to prove anything"
    assert out.token_ids == ref and steps[-1].token_ids == ref
    assert out.trace is not None and out.trace.sampling is not None
    assert (out.trace.sampling.temperature, out.trace.sampling.top_k, out.trace.sampling.seed) == (
        0.7, 50, None,
    )
    assert recap.DecodeTrace.from_json(out.trace.to_json()).sampling == out.trace.sampling


def test_the_cli_samples_under_a_shipped_sampling_config(tiny_dirs, tmp_path) -> None:
    model_dir = tmp_path / "sampling-model"
    shutil.copytree(tiny_dirs["qwen2_vl"], model_dir)
    config_file = model_dir / "generation_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "do_sample": True, "top_k": 20}))
    trace = tmp_path / "trace.json"
    assert (main(
                [
                    "generate", "--model", str(model_dir), "--prompt", PROMPTS[0], "--max-new-tokens", "6",
                    "--seed", "11", "--trace", str(trace),
                ]
            )
            == 0)
    target = recap.load_target(model_dir)
    torch.manual_seed(11)  # seed= is a private generator seeded alike: the same stream on a CPU
    assert recap.DecodeTrace.load(trace).token_ids == new_tokens(target, None, PROMPTS[0], 6)


@pytest.mark.parametrize(
    "fields,named",
    [
        ({"num_beams": 2}, "num_beams"),
        ({"penalty_alpha": 0.6, "top_k": 4}, "penalty_alpha"),
        ({"dola_layers": "high"}, "dola_layers"),
        ({"guidance_scale": 1.5}, "guidance_scale"),
        ({"exponential_decay_length_penalty": (4, 1.5)}, "exponential_decay_length_penalty"),
        ({"stop_strings": ["red"]}, "stop_strings"),
        ({"max_time": 5.0}, "max_time"),
        ({"encoder_repetition_penalty": 1.3}, "encoder_repetition_penalty"),
        ({"repetition_penalty": 2}, "repetition_penalty"),
        ({"bad_words_ids": [[10**7]]}, "bad_words_ids"),
        ({"sequence_bias": [[3, 1.0]]}, "sequence_bias"),
        ({"no_repeat_ngram_size": 2.0}, "no_repeat_ngram_size"),
        ({"do_sample": True, "num_return_sequences": 2}, "num_return_sequences"),
        ({"do_sample": True, "num_beams": 2}, "num_beams"),
        ({"do_sample": True, "temperature": 0.0}, "temperature"),
        ({"do_sample": True, "typical_p": 0.0}, "typical_p"),
        ({"do_sample": True, "min_p": 2.0}, "min_p"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_what_verification_cannot_reproduce_raises_naming_the_field(load_tiny, fields, named) -> None:
    target = load_tiny("qwen2_vl")
    with pytest.raises(ValueError, match=named):
        recap.generate(target, None, PROMPTS[0], max_new_tokens=4,
                       generation_config=GenerationConfig(**fields))
    with model_config(target, **fields), pytest.raises(ValueError, match=named):  # shipped with the model
        next(recap.iter_steps(target, None, PROMPTS[0], max_new_tokens=4))


@pytest.mark.parametrize("kwarg", ["logits_processor", "stopping_criteria"])
def test_custom_processors_and_criteria_raise(load_tiny, kwarg: str) -> None:
    target = load_tiny("qwen2_vl")
    with pytest.raises(ValueError, match=kwarg):
        recap.generate(target, None, PROMPTS[0], max_new_tokens=4, **{kwarg: [lambda ids, scores: scores]})
    with pytest.raises(ValueError, match="generation_config must be"):
        recap.generate(target, None, PROMPTS[0], max_new_tokens=4, generation_config=42)


# --------------------------------------------------------------------------- the embedded model

SHAPES = DEFAULT_MODEL_DIR


def test_the_shapes_model_stays_exact_under_penalties(shapes_target) -> None:
    target = shapes_target
    image = load_image(SHAPES.parent / "examples" / "scene_1000505.png")
    prompt = "Describe the image in detail."
    gc = GenerationConfig(repetition_penalty=1.15, no_repeat_ngram_size=5)
    ref = new_tokens(target, image, prompt, 64, generation_config=gc)
    assert ref != new_tokens(target, image, prompt, 64, do_sample=False)
    assert_every_method_matches(target, image, prompt, 64, ref, "shapes-vlm", generation_config=gc)
