"""The benchmark under sampling: every row beside HF ``generate(do_sample=True)``, shared seeds.

Request i's runs (every row, every repeat) start from ``torch.manual_seed(seed + i)``; the
engine rows must give hf's tokens (the lossless check, fatal), transformers' own prompt
lookup is reported but not fatal (it uses the generator differently). No timing assertions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tiny_models
import torch

import recap
from recap import bench
from recap.__main__ import main as cli_main
from recap.bench import runner

DEVICE = os.environ.get("RECAP_TEST_DEVICE", "cpu")
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.9}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_models.build("qwen2_5_vl", tmp_path_factory.mktemp("bench-sampling") / "m", seed=1)


@pytest.fixture(scope="module")
def results(tiny_dir: Path) -> dict:
    target = recap.load_target(tiny_dir, device=DEVICE, dtype=torch.float32)
    return bench.bench(target, suite="quick", limit=3, repeats=2, max_new_tokens=12, progress=False,
                       sampling=SAMPLING, seed=40)


def test_every_engine_row_gives_hfs_sampled_tokens_under_the_shared_seeds(results: dict) -> None:
    assert results["lossless"]["ok"], results["lossless"]["mismatches"]
    assert results["meta"]["sampling"] == {**SAMPLING, "seed": 40}
    # the engine rows, recap-auto (the default's trees) among them (hf-pld: shown only)
    assert results["lossless"]["checked"] == 3 * (len(recap.METHODS) + 1)
    for name in recap.METHODS:
        s = results["summary"][name]["overall"]
        assert s["requests"] == 3 and s["lossless"] == 3, name
    labels = {a["name"]: a["label"] for a in results["arms"]}
    assert "do_sample=True" in labels["hf"]
    text = bench.render_markdown(results)
    assert "Sampling: temperature 0.7, top_p 0.9" in text and "torch.manual_seed(40 + i)" in text


def test_the_seeds_are_shared_per_request_and_differ_between_requests(tiny_dir: Path) -> None:
    target = recap.load_target(tiny_dir, device=DEVICE, dtype=torch.float32)
    req = bench.build_suite("quick", 1)[0]
    image = req.image()
    counter = runner.ForwardCounter(target.model)
    try:
        torch.manual_seed(7)
        a = runner.run_hf(target, req, image, max_new_tokens=10, counter=counter, sampling=SAMPLING).tokens
        torch.manual_seed(7)
        b = runner.run_hf(target, req, image, max_new_tokens=10, counter=counter, sampling=SAMPLING).tokens
        torch.manual_seed(8)
        c = runner.run_hf(target, req, image, max_new_tokens=10, counter=counter, sampling=SAMPLING).tokens
    finally:
        counter.close()
    plain = runner.ForwardCounter(target.model)
    greedy = runner.run_hf(target, req, image, max_new_tokens=10, counter=plain).tokens
    assert a == b and a != c and a != greedy


def test_a_sampled_mismatch_of_an_engine_row_fails_loudly(
    tiny_dir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    real = runner.run_engine

    def corrupt(*args, **kwargs):
        run = real(*args, **kwargs)
        run.tokens = [*run.tokens[:-1], (run.tokens[-1] + 1) % 50]
        return run

    monkeypatch.setattr(runner, "run_engine", corrupt)
    rc = cli_main(
        [
            "bench", "--model", str(tiny_dir), "--suite", "quick", "--limit", "1", "--max-new-tokens", "4",
            "--methods", "ar", "--out", str(tmp_path), "--no-progress", "--device", DEVICE, "--temperature",
            "0.7", "--seed", "3",
        ]
    )
    assert rc != 0
    assert "differ from HF generate(do_sample=True) under the same seed" in capsys.readouterr().err
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["meta"]["sampling"] == {"do_sample": True, "temperature": 0.7, "seed": 3}


def test_transformers_prompt_lookup_is_reported_not_fatal_under_sampling() -> None:
    records = [
        {"arm": "hf", "method": "hf", "median_s": 1.0, "match": True},
        {"arm": "hf-pld", "method": "hf-pld", "median_s": 1.0, "match": False},
        {"arm": "tr", "method": "tr", "median_s": 1.0, "match": False},
    ]
    assert [r["arm"] for r in bench.mismatches(records)] == ["hf-pld", "tr"]
    assert [r["arm"] for r in bench.mismatches(records, sampling=True)] == ["tr"]
