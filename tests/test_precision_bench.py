"""Where the product compares a decode with generate(), a reduced-precision tie is reported with its
place and gap, and a difference that is no tie stays an error (the benchmark's lossless column).

The tie is a real one: RECAP (fixed 24-node trees) on the tiny Qwen2.5-VL in bf16, sdpa, chooses the
other token of a one-unit tie at token 18 (found by teacher forcing, tests/test_precision.py).
"""

from __future__ import annotations

import pytest
import torch
from test_lossless import PROMPTS, make_image

import recap
from recap.bench.reports import render_markdown
from recap.bench.runner import Run, _precision_check, _record
from recap.bench.statistics import mismatches, summarize, ties
from recap.bench.suite import Arm, Request


@pytest.fixture(scope="module")
def bf16_target(tiny_dirs):
    return recap.load_target(tiny_dirs["qwen2_5_vl"], device="cpu", dtype=torch.bfloat16,
                             attn_implementation="sdpa")


def _records(target, tokens: list[int], ref: list[int], request: Request, image) -> list[dict]:
    check = _precision_check(target, request, image, None)
    assert check is not None  # bf16: differences are checked
    hf = _record(target, request, Arm("hf", "hf"), [Run(ref, 1.0, len(ref))], ref, precision=check)
    row = _record(target, request, Arm("tr", "tr"), [Run(tokens, 0.5, 4)], ref, precision=check)
    return [hf, row]


def test_a_tie_is_reported_with_its_place_and_gap_and_an_error_stays_an_error(bf16_target) -> None:
    target, image = bf16_target, make_image(1)
    request = Request(index=0, seed=0, kind="describe", prompt=PROMPTS[0], answer="")
    inputs = recap.prepare_inputs(target, image, PROMPTS[0])
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=40)
    ref = out[0, inputs["input_ids"].shape[1]:].tolist()
    fixed = recap.RecapConfig(budget=24, cost_aware=False)  # trees that do not depend on timing
    got = recap.generate(target, image, PROMPTS[0], method="recap", max_new_tokens=40, config=fixed).token_ids
    assert got != ref, "the known bf16 tie no longer occurs: pick another case"
    records = _records(target, got, ref, request, image)
    assert records[1]["tie"] and not mismatches(records) and ties(records) == [records[1]]
    sentence = records[1]["mismatch"]["precision"]
    assert sentence.startswith("bf16 tie at token 18") and "top-2 gap" in sentence and "tolerance" in sentence
    summary = summarize(records, [Arm("hf", "hf"), Arm("tr", "tr")], 4)
    assert summary["tr"]["overall"]["ties"] == 1 and summary["tr"]["overall"]["lossless"] == 0
    # a difference that is no tie (a token the model rates far below its maximum) is a failure
    worst = int(torch.argmin(target.model(**inputs).logits[0, -1]))
    wrong = [worst, *ref[1:]]
    bad = _records(target, wrong, ref, request, image)
    assert bad[1]["tie"] is False and mismatches(bad) == [bad[1]]
    assert bad[1]["mismatch"]["precision"].startswith("bf16 error at token 1")


def test_fp32_has_no_precision_check(load_tiny) -> None:
    request = Request(index=0, seed=0, kind="describe", prompt=PROMPTS[0], answer="")
    assert _precision_check(load_tiny("llava"), request, None, None) is None


def test_the_report_names_ties_in_the_lossless_column_and_section() -> None:
    summary_row = {"requests": 2, "tokens": 80, "steps": 20, "mat": 4.0, "tokens_per_s": 10.0, "speedup": 1.5,
                   "lossless": 1, "ties": 1, "time_s": 4.0}
    results = {
        "meta": {"title": "t", "kinds": [], "max_depth": 8, "sampling": None, "model": "m", "device": "cpu",
                 "dtype": "bfloat16", "suite": "quick", "requests": 2, "repeats": 1, "max_new_tokens": 40,
                 "budget": 24, "resolved_budget": 24, "torch": "2", "transformers": "5", "threads": 1},
        "arms": [{"name": "tr", "label": "Token Recycling"}],
        "summary": {"tr": {"overall": summary_row, "by_kind": {}},
                    "oracle": {"overall": {"mat": 1.0, "tokens": 1, "steps": 1}, "by_kind": {}}},
        "lossless": {"ok": True, "checked": 2, "mismatches": [],
                     "ties": [{"arm": "tr", "request": 1,
                               "precision": "bf16 tie at token 27: top-2 gap 0.0039, tolerance 0.0052"}]},
    }
    text = render_markdown(results)
    assert "| 1/2 (+1 tie) |" in text
    assert "- `tr` request 1: bf16 tie at token 27: top-2 gap 0.0039, tolerance 0.0052" in text
