"""Sampling, losslessly: the same seed gives the same tokens as ``generate(do_sample=True)``.

Every method, on every tiny architecture (``tiny_models.FAMILIES``), under several seeds and
settings (every warper, processors before them, ``renormalize_logits`` after them), cold and
warm memories,
drawing from torch's default generator after ``torch.manual_seed(s)`` and from a private
one (``seed=s``); a stop inside an accepted path; the per-node distributions bit for bit
against transformers' own processors and warpers; the seed's contract; the trace's sampling
record (settings, seed, where the target drew, each drafted node's acceptance probability
checked against a sequential forward); the CLI. The real-file fixtures and the shapes model:
tests/test_sampling_real.py; the distribution itself: tests/test_sampling_distribution.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from accepted import TREES
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_generation_config import hf_processors, random_tree
from test_lossless import PROMPTS, make_image
from tiny_models import FAMILIES
from transformers import GenerationConfig

import recap
from recap.__main__ import main
from recap.drafting.tree import DraftTree
from recap.trace.format import DecodeTrace, TraceError
from recap.verification.acceptance import process_logits
from recap.verification.generation_config import acceptance_rule
from recap.verification.sampling import SamplingRule
from recap.verification.seed import MAX_SEED

N = 24
HEADLINE = {"do_sample": True, "temperature": 0.7, "top_p": 0.9}  # top_k 50: transformers' default
#: Settings that together use every warper, processors before them and renormalisation after.
SETTINGS = [
    {"do_sample": True, "temperature": 1.0, "top_k": 0},
    {"do_sample": True, "temperature": 0.5, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.3},
    {"do_sample": True, "typical_p": 0.8, "epsilon_cutoff": 0.01, "no_repeat_ngram_size": 3},
    {"do_sample": True, "temperature": 0.8, "eta_cutoff": 0.01, "top_h": 0.7, "renormalize_logits": True},
]


def hf_sample(target: recap.Target, image, prompt: str, n: int, seed: int, **fields) -> list[int]:
    """generate(do_sample=True, ...) after torch.manual_seed(seed): the reference."""
    inputs = recap.prepare_inputs(target, image, prompt)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = target.model.generate(**inputs, max_new_tokens=n, **fields)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def assert_same_seed_same_tokens(
    target: recap.Target, image, prompt: str, n: int, fields: dict, seeds, label: str,
    memories: dict | None = None, config: recap.RecapConfig = TREES,
) -> int:
    """Every method equals the reference under each seed, drawing from the default generator after
    ``torch.manual_seed(seed)`` (its memory cold on the first call) and then from a private one
    (``seed=seed``, the memory warm). ``memories``: method -> memory, kept across calls. Returns the
    longest step a drafting method accepted (the tree walk must be exercised: ``config`` is
    ``TREES``, trees that do not depend on the size loop's timings, unless a caller names another)."""
    memories = {} if memories is None else memories
    longest = 0
    for seed in seeds:
        ref = hf_sample(target, image, prompt, n, seed, **fields)
        for method in recap.METHODS:
            memory = memories.setdefault(method, recap.TokenMemory.for_target(target))
            torch.manual_seed(seed)
            out = recap.generate(target, image, prompt, method=method, max_new_tokens=n, memory=memory,
                                 generation_config=fields, config=config)
            assert out.token_ids == ref, (f"{label}: {method} (torch.manual_seed({seed})) "
                                          "diverged from generate()")
            private = recap.generate(target, image, prompt, method=method, max_new_tokens=n, memory=memory,
                                     generation_config=fields, seed=seed, config=config)
            assert private.token_ids == ref, f"{label}: {method} (seed={seed}) diverged from generate()"
            if method != "ar":
                longest = max(longest, *out.accepted_lengths, *private.accepted_lengths)
    return longest


@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_gives_generates_tokens_under_the_same_seed(load_tiny, family: str) -> None:
    target = load_tiny(family)
    other = SETTINGS[FAMILIES.index(family) % len(SETTINGS)]
    longest, memories = 0, {}
    for fields, image, prompt in ((HEADLINE, make_image(1), PROMPTS[0]), (other, None, PROMPTS[2])):
        longest = max(
            longest, assert_same_seed_same_tokens(target, image, prompt, N, fields, (0, 1), family, memories)
        )
    assert longest >= 2, f"{family}: no drafted token was ever accepted: the tree walk went untested"


def test_a_stop_inside_an_accepted_path_cuts_exactly(load_tiny) -> None:
    """max_new_tokens falling inside a sampled path, and an EOS drawn at a drafted child."""
    target = load_tiny("llava_next_qwen2")
    img, fields = make_image(4), {"do_sample": True, "temperature": 0.1}  # peaked: paths get accepted
    fixed = recap.RecapConfig(budget=24, cost_aware=False)  # trees deep enough for paths inside them
    memory = recap.TokenMemory.for_target(target)
    for seed in range(3):  # warm the memory on this request's own draws
        recap.generate(target, img, PROMPTS[0], method="recap", max_new_tokens=30, memory=memory,
                       generation_config=fields, seed=seed, config=fixed)
    full = hf_sample(target, img, PROMPTS[0], 30, 0, **fields)
    cut_mid_path, paths = 0, []
    for n in range(1, 17):
        torch.manual_seed(0)
        steps = list(recap.iter_steps(
                         target, img, PROMPTS[0], method="recap", max_new_tokens=n, memory=memory,
                         generation_config=fields, config=fixed,
                     ))
        assert steps[-1].token_ids == full[:n], f"max_new_tokens={n}"
        last = steps[-1]
        cut_mid_path += last.stop_reason == "max_new_tokens" and len(last.emitted) == len(last.accepted) - 1
        paths += [s.tree.tokens[a] for s in steps for a in s.accepted[1:-1]]
    assert cut_mid_path > 0, "no run had max_new_tokens fall inside an accepted path"
    stop = paths[0]  # a token accepted inside a path: make it an EOS
    eos = target.model.generation_config.eos_token_id
    with_stop = {**fields, "eos_token_id": [eos, stop] if isinstance(eos, int) else [*eos, stop]}
    ref = hf_sample(target, img, PROMPTS[0], 30, 0, **with_stop)
    assert ref[-1] == stop and len(ref) < 30
    for method in recap.METHODS:
        torch.manual_seed(0)
        out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=30, memory=memory,
                             generation_config=with_stop, config=fixed)
        assert out.token_ids == ref and out.stop_reason == "eos", method


def test_one_draw_per_emitted_token_leaves_the_default_generator_where_generate_does(load_tiny) -> None:
    target, fields = load_tiny("qwen2_vl"), {"do_sample": True, "temperature": 0.1}
    memory = recap.TokenMemory.for_target(target)
    recap.generate(
        target, make_image(1), PROMPTS[0], max_new_tokens=12, memory=memory, generation_config=fields, seed=3,
        config=TREES,
    )  # the memory learns this very continuation: the next run accepts long paths
    hf_sample(target, make_image(1), PROMPTS[0], 12, 3, **fields)
    after_hf = torch.rand(4)
    torch.manual_seed(3)
    out = recap.generate(target, make_image(1), PROMPTS[0], max_new_tokens=12, memory=memory,
                         generation_config=fields, config=TREES)
    assert out.stop_reason == "max_new_tokens" and out.decode_steps < 12  # fewer passes than tokens
    assert torch.equal(torch.rand(4), after_hf)  # lazily along the walk: no draw at a node it never reached


def test_a_private_seed_reproduces_and_leaves_the_global_generator_alone(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    state = torch.get_rng_state()
    runs = [recap.generate(
                target, None, PROMPTS[0], max_new_tokens=12, generation_config=HEADLINE, seed=s
            ).token_ids
            for s in (7, 7, 8, 9)]
    assert torch.equal(torch.get_rng_state(), state)
    assert runs[0] == runs[1] and len({tuple(r) for r in runs[1:]}) > 1
    with pytest.raises(ValueError, match="seed"):
        recap.generate(target, None, PROMPTS[0], max_new_tokens=4, generation_config=HEADLINE, seed=-1)
    for bad in (True, 1.0, "1", MAX_SEED + 1):
        with pytest.raises(ValueError, match="seed must be an integer"):
            next(recap.iter_steps(
                     target, None, PROMPTS[0], max_new_tokens=4, generation_config=HEADLINE, seed=bad
                 ))
    greedy = recap.generate(target, None, PROMPTS[0], max_new_tokens=8)
    assert recap.generate(target, None, PROMPTS[0], max_new_tokens=8, seed=5).token_ids == greedy.token_ids


def test_top_k_1_samples_and_draws_as_generate_does(load_tiny) -> None:
    """do_sample=True always takes the sampling rule, top_k=1 (Qwen2-VL's shipped config) too."""
    target = load_tiny("qwen2_vl")
    rule = acceptance_rule(target.model, {"do_sample": True, "top_k": 1, "temperature": 0.4}, prompt_len=9,
                           max_new_tokens=4, vocab_size=target.vocab_size)
    assert isinstance(rule, SamplingRule) and rule.sampling is not None and rule.sampling.top_k == 1
    rule = acceptance_rule(target.model, HEADLINE, prompt_len=9, max_new_tokens=4,
                           vocab_size=target.vocab_size)
    assert isinstance(rule, SamplingRule) and (rule.sampling.top_k, rule.sampling.top_p) == (50, 0.9)
    greedy = acceptance_rule(target.model, {"do_sample": False, "top_k": 1}, prompt_len=9, max_new_tokens=4,
                             vocab_size=target.vocab_size)
    assert not isinstance(greedy, SamplingRule) and greedy.sampling is None


@pytest.mark.parametrize("seed", [0, 7])
def test_top_k_1_leaves_the_tokens_and_the_random_stream_where_generate_does(load_tiny, seed: int) -> None:
    """Under torch.manual_seed(s): generate()'s tokens and the default generator's state after the
    call, for every method (one draw per emitted token; a greedy rule would draw none)."""
    target = load_tiny("qwen2_5_vl")
    fields = {"do_sample": True, "top_k": 1, "temperature": 0.7, "repetition_penalty": 1.05}
    img = make_image(3)
    ref = hf_sample(target, img, PROMPTS[0], N, seed, **fields)
    after_hf = torch.get_rng_state()
    assert len(ref) == N
    memory = recap.TokenMemory.for_target(target)
    for method in recap.METHODS:
        for run in ("cold", "warm"):
            torch.manual_seed(seed)
            out = recap.generate(target, img, PROMPTS[0], method=method, max_new_tokens=N, memory=memory,
                                 generation_config=fields)
            assert out.token_ids == ref, f"{method} ({run}) diverged from generate()"
            assert torch.equal(torch.get_rng_state(), after_hf), f"{method} ({run}): another random stream"


# --------------------------------------------------------------------------- per node, vs transformers


@st.composite
def sampling_configs(draw) -> dict:
    fields: dict = {"do_sample": True}
    if draw(st.booleans()):
        fields["temperature"] = draw(st.floats(0.2, 2.0))
    if draw(st.booleans()):
        fields["top_k"] = draw(st.integers(0, 30))
    for name, lo, hi in (
        ("top_p", 0.05, 1.0), ("min_p", 0.0, 0.5), ("typical_p", 0.05, 1.0), ("epsilon_cutoff", 0.0, 0.05),
        ("eta_cutoff", 0.0, 0.05), ("top_h", 0.05, 1.0),
    ):
        if draw(st.integers(0, 3)) == 0:
            fields[name] = draw(st.floats(lo, hi))
    if draw(st.booleans()):
        fields["repetition_penalty"] = draw(st.floats(0.7, 1.6))
    if draw(st.booleans()):
        fields["no_repeat_ngram_size"] = draw(st.integers(1, 3))
    fields["renormalize_logits"] = draw(st.booleans())
    return fields


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_each_nodes_distribution_is_transformers_own_bit_for_bit(load_tiny, data) -> None:
    """Processors on the node's own context, then the warpers, then the softmax: generate()'s
    probabilities at every node, equal to the last bit (so a shared seed draws alike)."""
    model = load_tiny("llava").model
    vocab = model.get_output_embeddings().weight.shape[0]
    fields = data.draw(sampling_configs())
    if fields.get("top_k", 2) == 1:
        fields["top_k"] = 2  # top_k=1 keeps one token: its draws are tested above
    try:
        gc = GenerationConfig(**fields)
        rule = acceptance_rule(model, gc, prompt_len=6, max_new_tokens=12, vocab_size=vocab)
    except ValueError:
        assume(False)
    history = data.draw(st.lists(st.integers(0, vocab - 1), min_size=6, max_size=12))
    tokens, parents, depths = random_tree(data.draw, vocab, data.draw(st.integers(1, 8)))
    tokens[0] = history[-1]
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 99)))
    logits = torch.randn(len(tokens), vocab, generator=g) * data.draw(st.sampled_from([1.0, 4.0]))
    assert isinstance(rule, SamplingRule)
    lengths = torch.tensor(depths) + len(history)
    from recap.verification.acceptance import node_context

    scores = process_logits(rule.processing, logits, lengths,
                            node_context(torch.tensor(history), tokens, parents, depths))
    procs = hf_processors(model, gc, 6, 12)
    tree = DraftTree(tokens, parents, depths, [1.0] * len(tokens), [1.0] * len(tokens), [()] * len(tokens),
                     [False] * len(tokens), ["root"] * len(tokens))
    for i in range(len(tokens)):
        context = torch.tensor([history + tree.path_tokens(i)[1:]])
        theirs = torch.nn.functional.softmax(procs(context, logits[i : i + 1].clone()), dim=-1)
        ours = rule.distribution(scores[i : i + 1].clone())
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True,
                                   msg=f"node {i} under {fields}")


# --------------------------------------------------------------------------- the trace


def test_the_trace_records_the_settings_the_draws_and_each_childs_acceptance_probability(load_tiny) -> None:
    target = load_tiny("llava")  # plain positions: a sequential forward of any context is one call
    fields = {"do_sample": True, "temperature": 0.6, "top_k": 30, "repetition_penalty": 1.2}
    img, memory = make_image(2), recap.TokenMemory.for_target(target)
    recap.generate(target, img, PROMPTS[1], max_new_tokens=16, memory=memory, generation_config=fields,
                   seed=1, config=TREES)
    out = recap.generate(target, img, PROMPTS[1], max_new_tokens=16, memory=memory, generation_config=fields,
                         seed=2, trace=True, config=TREES)  # drafted children to check
    trace = out.trace
    assert trace is not None and trace.sampling is not None
    assert (trace.sampling.temperature, trace.sampling.top_k, trace.sampling.top_p, trace.sampling.seed) == (
        0.6, 30, None, 2,
    )
    inputs = recap.prepare_inputs(target, img, PROMPTS[1])
    prompt = inputs["input_ids"][0].tolist()
    procs = hf_processors(target.model, GenerationConfig(**fields), len(prompt), 16)
    done: list[int] = []
    checked = 0
    for step in trace.steps:
        assert step.drawn == step.accepted[: len(step.emitted)]
        assert [
            step.nodes[i].target_token for i in step.drawn
        ] == step.emitted  # each draw is a token emitted
        assert len(step.accept_probs) == len(step.nodes) and step.accept_probs[0] == 1.0
        for node in step.nodes[
            1:3
        ]:  # a drafted child's probability, from a sequential forward of its context
            path, p = [], node.parent
            while p > 0:
                path.insert(0, step.nodes[p].token)
                p = step.nodes[p].parent
            ids = torch.tensor([prompt + done + path])
            with torch.inference_mode():
                logits = (target.model(**{**inputs, "input_ids": ids, "attention_mask": torch.ones_like(ids)})
                          .logits[:, -1]
                          .float())
            probs = torch.nn.functional.softmax(procs(ids, logits), dim=-1)[0]
            assert step.accept_probs[node.index] == pytest.approx(float(probs[node.token]), abs=1e-4)
            checked += 1
        done += step.emitted
    assert checked >= 2
    data = json.loads(trace.to_json())
    assert data["version"] == 3 and data["sampling"]["seed"] == 2
    assert DecodeTrace.from_json(trace.to_json()).steps[0].accept_probs == trace.steps[0].accept_probs
    data["steps"][0]["drawn"] = [0, 1, 2][: len(data["steps"][0]["drawn"]) + 1]
    with pytest.raises(TraceError, match=r"steps\[0\]\.drawn"):
        DecodeTrace.from_dict(data)


def test_a_greedy_trace_is_the_version_2_document_it_always_was(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")
    trace = recap.generate(target, make_image(2), PROMPTS[1], max_new_tokens=8, trace=True).trace
    data = json.loads(trace.to_json())
    assert data["version"] == 2 and "sampling" not in data
    assert not {"drawn", "accept_probs"} & set(data["steps"][0])
    assert DecodeTrace.from_json(trace.to_json()).sampling is None
    data["steps"][0]["drawn"] = [0]  # draws without sampling settings
    with pytest.raises(TraceError, match="only when the trace samples"):
        DecodeTrace.from_dict(data)


# --------------------------------------------------------------------------- the command line


def test_the_cli_samples_with_its_options(tiny_dirs, tmp_path, capsys) -> None:
    trace = tmp_path / "t.json"
    argv = ["generate", "--model", str(tiny_dirs["llava"]), "--prompt", PROMPTS[0], "--max-new-tokens", "10",
            "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40", "--seed", "5", "--trace", str(trace)]
    assert main(argv) == 0
    target = recap.load_target(tiny_dirs["llava"])
    ref = hf_sample(target, None, PROMPTS[0], 10, 5, do_sample=True, temperature=0.7, top_p=0.9, top_k=40)
    saved = DecodeTrace.load(trace)
    assert saved.token_ids == ref and saved.sampling.seed == 5 and saved.sampling.top_k == 40
    for bad in (["--temperature", "0"], ["--top-p", "1.5"], ["--top-k", "-1"], ["--seed", "x"]):
        with pytest.raises(SystemExit):
            main(["generate", "--prompt", "x", *bad])
        assert bad[0] in capsys.readouterr().err
