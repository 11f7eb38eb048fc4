"""Compare's reduced-precision check (``app.tabs.compare_precision``) on a real bf16 model: a difference
from the reference that is no tie is an error, and nothing runs in fp32 or when the tokens agree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tiny_models
import torch
from PIL import Image

import recap
from app.state.runs import Run
from app.state.targets import LoadedModel
from app.tabs.compare import badge, summarize
from app.tabs.compare_precision import precision_verdicts

PROMPT = "Describe the image."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_models.build("qwen2_5_vl", tmp_path_factory.mktemp("cmp-prec") / "m", seed=1)


def _runs(target: recap.Target, image: Image.Image) -> dict[str, Run]:
    ref = recap.generate(target, image, PROMPT, method="ar", max_new_tokens=8, trace=True).trace
    assert ref is not None
    vocab = target.vocab_size
    last = (ref.token_ids[-1] + 7) % vocab  # not the model's choice there
    wrong = dataclasses.replace(ref, method="tr", token_ids=[*ref.token_ids[:-1], last])
    return {"ar": Run(1, ref), "recap": Run(2, ref), "tr": Run(3, wrong)}


def test_bf16_a_difference_that_is_no_tie_is_an_error(model_dir: Path) -> None:
    target = recap.load_target(model_dir, device="cpu", dtype=torch.bfloat16)
    image = Image.new("RGB", (64, 64), "red")
    runs = _runs(target, image)
    verdicts = precision_verdicts(LoadedModel(None, target), image, PROMPT, runs, "ar")  # type: ignore[arg-type]
    assert set(verdicts) == {"tr"}  # recap's tokens are the reference's: nothing to check
    lossless, sentence = verdicts["tr"]
    assert not lossless and sentence.startswith("bf16 error at token 8")
    summary = summarize(runs, verdicts)
    assert not summary["lossless"] and "WARNING" in badge(summary)
    assert "bf16 error at token 8" in badge(summary)


def test_fp32_checks_nothing(model_dir: Path) -> None:
    target = recap.load_target(model_dir, device="cpu", dtype=torch.float32)
    image = Image.new("RGB", (64, 64), "red")
    assert precision_verdicts(LoadedModel(None, target), image, PROMPT, _runs(target, image), "ar") == {}  # type: ignore[arg-type]
