"""Sampling is exact in distribution: a test that a shared seed cannot fake.

Same-seed identity (tests/test_sampling.py) could in principle hold for a rule that consumes
the generator like generate() and still samples the wrong thing. Here no seed is shared:
``generate(do_sample=True)`` samples the first tokens of a request many times in one batch
(one seed), every method samples them in separate runs under other seeds, and a two-sample
chi-square test compares the empirical distributions of the first ``TOKENS`` tokens (the
joint of the root's draw and the draw after it, so an accepted drafted child counts too).
A deliberately wrong rule, "accept a drafted child whenever its probability is at least
0.3", passes the same-seed plumbing but fails this test.

The model is a tiny random LLaVA whose output layer is scaled up (a confident model: the
top token often has probability 0.3-0.7), so the memories draft tokens that matter; its
vocabulary of 56 tokens keeps the categories few.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, fields

import pytest
import tiny_models
import torch
from accepted import TREES

import recap
from recap.engine import loop
from recap.verification.acceptance import History, TreeShape, target_scores
from recap.verification.sampling import SamplingRule

PROMPT = "what color is the circle ? the red circle is"
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.9}
TOKENS = 2  # the joint distribution of the first two emitted tokens
REFERENCE = 4000  # generate()'s samples, batched
RUNS = 240  # each method's runs, one seed each
ALPHA = 1e-3
SCALE = 20.0  # output-layer scale: logits of std ~3 instead of ~0.15


def confident_model(folder, dtype: torch.dtype) -> recap.Target:
    from conftest import DEVICE

    target = recap.load_target(tiny_models.build("llava", folder), device=DEVICE, dtype=dtype)
    with torch.no_grad():
        target.model.get_output_embeddings().weight.mul_(SCALE)
    return target


@pytest.fixture(scope="module")
def confident(tmp_path_factory: pytest.TempPathFactory) -> recap.Target:
    return confident_model(tmp_path_factory.mktemp("confident") / "m", torch.float32)


def first_tokens(tokens: list[int], eos: frozenset[int]) -> tuple[int, ...]:
    """The first ``TOKENS`` tokens, cut after an EOS (generate() pads a finished row)."""
    out: list[int] = []
    for tok in tokens[:TOKENS]:
        out.append(tok)
        if tok in eos:
            break
    return tuple(out)


def reference(target: recap.Target) -> Counter:
    inputs = recap.prepare_inputs(target, None, PROMPT)
    eos = frozenset(target.eos_token_ids)
    counts: Counter = Counter()
    torch.manual_seed(1)  # one seed for the whole reference: the methods below use none of its draws
    batch = 500
    with torch.inference_mode():
        for _ in range(REFERENCE // batch):
            rows = {k: v.repeat(batch, *[1] * (v.dim() - 1)) for k, v in inputs.items()}
            out = target.model.generate(**rows, max_new_tokens=TOKENS, **SAMPLING)
            for row in out[:, inputs["input_ids"].shape[1] :].tolist():
                counts[first_tokens(row, eos)] += 1
    return counts


def first_seed(method: str) -> int:
    """Each method its own seeds (the same seed gives every method the same tokens: shared seeds
    would make one sample of all of them), none of them the reference's."""
    return 10_000 + 1_000 * recap.METHODS.index(method)


def method_counts(target: recap.Target, method: str) -> tuple[Counter, int]:
    """The first tokens of ``RUNS`` runs (seeds ``first_seed(method) + i``), one memory warming over
    them; and how many runs accepted a drafted token in their first step (under ``TREES``: trees
    that do not depend on the size loop's timings)."""
    eos = frozenset(target.eos_token_ids)
    memory = recap.TokenMemory.for_target(target)
    counts: Counter = Counter()
    drafted = 0
    for i in range(RUNS):
        steps = recap.iter_steps(target, None, PROMPT, method=method, max_new_tokens=TOKENS, memory=memory,
                                 generation_config=SAMPLING, seed=first_seed(method) + i, config=TREES)
        tokens: list[int] = []
        for j, rec in enumerate(steps):
            drafted += j == 0 and len(rec.accepted) > 1
            tokens = rec.token_ids
        counts[first_tokens(tokens, eos)] += 1
    return counts, drafted


def chi_square(ref: Counter, got: Counter) -> tuple[float, int]:
    """Two-sample chi-square statistic and degrees of freedom; categories whose expected count in
    ``got`` is under 5 are pooled into one."""
    n_ref, n_got = sum(ref.values()), sum(got.values())
    keep = [c for c in ref if ref[c] * n_got / n_ref >= 5]
    cells = [(ref[c], got[c]) for c in keep]
    rest = (n_ref - sum(a for a, _ in cells), n_got - sum(b for _, b in cells))
    if rest[0] + rest[1] > 0:
        cells.append(rest)
    stat = 0.0
    for a, b in cells:
        pooled = (a + b) / (n_ref + n_got)
        for observed, n in ((a, n_ref), (b, n_got)):
            expected = pooled * n
            stat += (observed - expected) ** 2 / expected
    return stat, len(cells) - 1


def critical(df: int, alpha: float = ALPHA) -> float:
    """The chi-square quantile 1 - alpha (Wilson-Hilferty; within 1% for df >= 3)."""
    z = statistics.NormalDist().inv_cdf(1 - alpha)
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


@dataclass(frozen=True, eq=False)
class AcceptConfidentChildren(SamplingRule):
    """Deliberately wrong: a drafted child whose probability is at least 0.3 is accepted without a draw."""

    def pick(self, logits: torch.Tensor, history: History, tree: TreeShape) -> torch.Tensor:
        rule = self.processing
        scores = target_scores(rule, logits, history, tree.tokens, tree.parents, tree.depths)
        picked = scores.argmax(-1)
        children: dict[int, list[int]] = {}
        for i in range(1, len(tree.tokens)):
            children.setdefault(tree.parents[i], []).append(i)
        left, node = rule.max_length - history.length, 0
        while True:
            probs = self.distribution(scores[node : node + 1].float())
            best = max(children.get(node, []), key=lambda c: float(probs[0, tree.tokens[c]]), default=None)
            if best is not None and float(probs[0, tree.tokens[best]]) >= 0.3:
                token = tree.tokens[best]
            else:
                token = int(torch.multinomial(probs, num_samples=1, generator=self.generator))
            picked[node] = token
            left -= 1
            nxt = next((c for c in children.get(node, []) if tree.tokens[c] == token), None)
            if nxt is None or left <= 0 or token in rule.eos:
                return picked
            node = nxt


@pytest.fixture(scope="module")
def ref(confident: recap.Target) -> Counter:
    return reference(confident)


@pytest.mark.parametrize("method", recap.METHODS)
def test_every_methods_first_tokens_follow_generates_distribution(confident, ref, method: str) -> None:
    counts, drafted = method_counts(confident, method)
    stat, df = chi_square(ref, counts)
    assert df >= 3, "too few categories for the test to mean anything"
    assert stat < critical(df), f"{method}: chi-square {stat:.1f} over {df} degrees of freedom"
    if method in ("tr", "recap"):
        assert drafted > RUNS // 10, f"{method} accepted a drafted token in only {drafted} first steps"


def test_a_rule_that_accepts_confident_children_without_drawing_fails(confident, ref, monkeypatch) -> None:
    real = loop.acceptance_rule

    def wrong(*args, **kwargs):
        rule = real(*args, **kwargs)
        assert isinstance(rule, SamplingRule)
        return AcceptConfidentChildren(**{f.name: getattr(rule, f.name) for f in fields(rule)})

    monkeypatch.setattr(loop, "acceptance_rule", wrong)
    counts, _ = method_counts(confident, "recap")  # recap's own seeds: only the rule differs
    stat, df = chi_square(ref, counts)
    assert stat > 3 * critical(df), (f"the wrong rule passed: chi-square {stat:.1f} "
                                     f"over {df} degrees of freedom")


def test_in_bf16_recaps_first_tokens_still_follow_generates_distribution(tmp_path_factory) -> None:
    """docs/design.md, Precision: in bf16 a draw near a tie can move, the distribution cannot."""
    target = confident_model(tmp_path_factory.mktemp("confident-bf16") / "m", torch.bfloat16)
    ref = reference(target)
    counts, drafted = method_counts(target, "recap")
    stat, df = chi_square(ref, counts)
    assert df >= 3 and stat < critical(df), f"bf16 recap: chi-square {stat:.1f} over {df} degrees of freedom"
    assert drafted > RUNS // 10, f"bf16 recap accepted a drafted token in only {drafted} first steps"
