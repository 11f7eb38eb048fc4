"""recap.bench: the quick suite's lossless check on a tiny model, results.json schema, tables.

No timing assertions: the machine is shared. A tiny random Qwen2.5-VL (seed 1, whose
greedy answers run to the token limit rather than stopping at once) stands in for the
shapes model.
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
from recap.shapes.scene import KINDS

DEVICE = os.environ.get("RECAP_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_models.build("qwen2_5_vl", tmp_path_factory.mktemp("bench-tiny") / "m", seed=1)


@pytest.fixture(scope="module")
def target(tiny_dir: Path) -> recap.Target:
    return recap.load_target(tiny_dir, device=DEVICE, dtype=torch.float32)


@pytest.fixture(scope="module")
def results(target: recap.Target) -> dict:
    return bench.bench(target, suite="quick", limit=4, repeats=2, max_new_tokens=16, progress=False)


def test_suite_order_is_interleaved_and_covers_every_pair() -> None:
    for name in bench.SUITES:
        if name in bench.FOLLOWUP_QUESTIONS:  # asks each scene in a row (tests/test_scoped_memory.py)
            continue
        reqs = bench.build_suite(name)
        pairs = [(r.seed, r.kind) for r in reqs]
        assert len(pairs) == len(set(pairs))
        assert {r.kind for r in reqs} == set(KINDS)
        assert all(a.kind != b.kind and a.seed != b.seed for a, b in zip(reqs, reqs[1:]))
        assert [r.index for r in reqs] == list(range(len(reqs)))
        assert bench.WARMUP_SEED not in {r.seed for r in reqs}
    assert len(bench.build_suite("quick")) < len(bench.build_suite("default"))
    assert bench.build_suite("default") == bench.build_suite("default")  # fixed order


def test_quick_suite_is_lossless_on_a_tiny_model(results: dict) -> None:
    assert results["lossless"]["ok"], results["lossless"]["mismatches"]
    names = [a["name"] for a in results["arms"]]
    assert names == list(bench.all_methods())
    ran = [a["name"] for a in results["arms"] if not a["skipped"]]
    assert len(results["records"]) == 4 * len(ran)
    for rec in results["records"]:
        assert rec["match"] is True and rec["repeats_identical"] is True
        assert len(rec["times"]) == 2 and rec["median_s"] > 0


def test_results_schema(results: dict) -> None:
    assert results["schema"] == bench.SCHEMA and results["version"] == bench.SCHEMA_VERSION
    meta = results["meta"]
    for key in (
        "model", "model_sha256", "device", "dtype", "suite", "requests", "kinds", "repeats", "max_new_tokens",
        "budget", "resolved_budget", "max_depth", "torch", "transformers", "threads",
    ):
        assert key in meta
    assert meta["requests"] == len(results["requests"]) == 4
    summary = results["summary"]
    for arm in results["arms"]:
        if arm["skipped"]:
            continue
        s = summary[arm["name"]]
        overall = s["overall"]
        for key in ("requests", "tokens", "steps", "mat", "time_s", "tokens_per_s", "speedup", "lossless"):
            assert key in overall, (arm["name"], key)
        assert set(s["by_kind"]) == set(meta["kinds"])
        if arm["method"] in recap.METHODS:
            assert 0.0 <= overall["draft_update_share"] <= 1.0
            assert sum(overall["accepted_hist"].values()) == overall["steps"]
            assert overall["decode_tokens_per_s"] > 0  # realised: tokens over the passes' own seconds
        # the size loop's rows (the default's) say what one-token passes earn, the speed trees were held to
        loop_sized = arm["name"] == bench.AUTO_ROW
        assert ("one_token_tokens_per_s" in overall) == loop_sized, arm["name"]
        recs = [r for r in results["records"] if r["arm"] == arm["name"]]
        # (a cold key's first request may end before its plain pass: some record, not every one)
        assert any(r.get("one_token_s", 0) > 0 for r in recs) == loop_sized, arm["name"]
    table = bench.render_markdown(results)
    assert "| decode tokens/s | one-token tokens/s |" in table
    assert summary["hf"]["overall"]["mat"] == pytest.approx(1.0)
    assert summary["ar"]["overall"]["mat"] == pytest.approx(1.0)
    assert summary["hf"]["overall"]["speedup"] == pytest.approx(1.0)
    oracle = summary["oracle"]["overall"]
    assert oracle["mat"] >= max(summary[m]["overall"]["mat"] for m in ("ar", "pld")) - 1e-9
    json.dumps(results)  # serialisable


def test_oracle_counts_chains_of_the_depth_limit() -> None:
    recs = [{"tokens": 10}, {"tokens": 9}, {"tokens": 1}]
    o = bench.oracle_stats(recs, depth=8)
    assert o["steps"] == 2 + 1 + 1 and o["mat"] == pytest.approx(20 / 4)


def test_markdown_and_html(results: dict, tmp_path: Path) -> None:
    md = bench.render_markdown(results)
    assert "| method | setting | MAT | tokens/s | speedup vs hf | draft+update share | lossless |" in md
    for arm in results["arms"]:
        if not arm["skipped"]:
            assert f"| {arm['name']} |" in md
    assert "| oracle |" in md and "## MAT per question kind" in md and "All outputs identical" in md
    paths = bench.write_results(results, tmp_path)
    assert json.loads(paths["json"].read_text())["schema"] == bench.SCHEMA
    assert paths["md"].read_text() == md
    assert "plotly" in paths["html"].read_text()[:200000].lower()


def test_repeats_share_one_memory_state(target: recap.Target) -> None:
    """Repeats decode on clones and agree in steps, accepted lengths and trees.

    The live memory advances once."""
    arms = bench.method_arms(["tr", "recap"], recap.RecapConfig(size_loop=False))  # trees that repeat
    reqs = bench.build_suite("quick", limit=3)
    recs = bench.run_suite(target, reqs, arms, repeats=3, max_new_tokens=16, warmup=False, progress=False)
    mine = [r for r in recs if r["arm"] in ("tr", "recap")]
    assert mine and all(r["repeats_identical"] and r["match"] for r in mine)
    assert all(len(r["tree_sizes"]) == r["steps"] for r in mine)


def _clone_without_calibration(self: recap.TokenMemory) -> recap.TokenMemory:
    """The benchmark's old copy: the rows and provenance, but a fresh calibration table."""
    out = recap.TokenMemory(self.vocab_size, self.k)
    for name in ("ids", "probs", "entropy", "concentration", "request", "step", "depth"):
        getattr(out, name).copy_(getattr(self, name))
    out.requests = list(self.requests)
    return out


def test_a_repeat_that_drafts_differently_fails_loudly(target: recap.Target, monkeypatch) -> None:
    """The old bug: repeats drafted from a copy without the calibration table. Same tokens, other trees."""
    monkeypatch.setattr(recap.TokenMemory, "clone", _clone_without_calibration)
    arms = bench.method_arms(["recap"], recap.RecapConfig(cost_aware=False, size_loop=False))
    reqs = bench.build_suite("quick", limit=4)
    with pytest.raises(bench.RepeatMismatchError, match="REPEAT CHECK FAILED: row 'recap'.*trees"):
        bench.run_suite(target, reqs, arms, repeats=2, max_new_tokens=16, warmup=False, progress=False)


def test_repeat_check_compares_work_not_output() -> None:
    req = bench.build_suite("quick", limit=1)[0]
    arm = bench.Arm("recap", "recap", recap.RecapConfig(size_loop=False))
    base = dict(tokens=[1, 2, 3], seconds=0.1, steps=2, accepted_lengths=[2, 1], tree_sizes=[4, 4],
                tree_digest=7)
    bench.check_repeats(req, arm,
                        [bench.Run(**base), bench.Run(**{**base, "seconds": 0.2})])  # time may differ
    for field, value in (
        ("steps", 3), ("accepted_lengths", [1, 2]), ("tree_sizes", [4, 3]), ("tree_digest", 8),
    ):
        with pytest.raises(bench.RepeatMismatchError):
            bench.check_repeats(req, arm, [bench.Run(**base), bench.Run(**{**base, field: value})])
    # the closed size loop (the default row) sizes trees by measured time: its repeats keep their
    # tokens, not their work
    loop = bench.method_arms([bench.AUTO_ROW], bench.FIXED_CONFIG)[1]
    assert loop.name == "recap-auto" and loop.config.sized_by_loop
    bench.check_repeats(req, loop, [bench.Run(**base), bench.Run(**{**base, "tree_sizes": [4, 3]})])
    # a fixed budget keeps its size whatever ``size_loop`` says: its repeats are held to the same work
    fixed = bench.method_arms(["recap"], bench.FIXED_CONFIG)[1]
    assert fixed.config.size_loop and not fixed.config.sized_by_loop
    with pytest.raises(bench.RepeatMismatchError):
        bench.check_repeats(req, fixed, [bench.Run(**base), bench.Run(**{**base, "tree_sizes": [4, 3]})])


def test_the_default_row_is_lossless_across_repeats(target: recap.Target) -> None:
    arms = bench.method_arms([bench.AUTO_ROW], bench.FIXED_CONFIG)
    reqs = bench.build_suite("quick", limit=2)
    recs = bench.run_suite(target, reqs, arms, repeats=2, max_new_tokens=16, warmup=False, progress=False)
    assert [r["arm"] for r in recs if r["arm"] != "hf"] == ["recap-auto"] * 2
    assert all(r["match"] for r in recs)


def test_cli_writes_results_and_exits_zero(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    rc = cli_main(
        [
            "bench", "--model", str(tiny_dir), "--suite", "quick", "--limit", "2", "--max-new-tokens", "8",
            "--methods", "ar", "recap", "--out", str(out), "--no-progress", "--device", DEVICE,
        ]
    )
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert [a["name"] for a in data["arms"]] == ["hf", "ar", "recap"]
    assert (out / "results.md").is_file() and (out / "results.html").is_file()
    assert "| recap |" in capsys.readouterr().out


def test_a_mismatch_fails_loudly(tiny_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    real = runner.run_engine

    def corrupt(*args, **kwargs):
        run = real(*args, **kwargs)
        run.tokens = [*run.tokens[:-1], (run.tokens[-1] + 1) % 50]
        return run

    monkeypatch.setattr(runner, "run_engine", corrupt)
    rc = cli_main(
        [
            "bench", "--model", str(tiny_dir), "--suite", "quick", "--limit", "1", "--max-new-tokens", "4",
            "--methods", "ar", "--out", str(tmp_path), "--no-progress", "--device", DEVICE,
        ]
    )
    assert rc != 0
    assert "LOSSLESS CHECK FAILED" in capsys.readouterr().err
    data = json.loads((tmp_path / "results.json").read_text())
    assert not data["lossless"]["ok"] and data["lossless"]["mismatches"][0]["arm"] == "ar"


def test_ablation_rows_run(target: recap.Target) -> None:
    res = bench.bench(target, suite="quick", limit=1, repeats=1, max_new_tokens=6, ablation=True,
                      progress=False, warmup=False)
    assert res["lossless"]["ok"]
    names = [a["name"] for a in res["arms"]]
    for name in (
        "hf", "tr", "tr budget=12", "m1", "m1+m2", "m1+m2+m3", "recap", "fusion=backoff", "fusion=fixed",
        "cold", "budget=8", "budget=12", "budget=128", "budget=auto", "cost<=16", "cost<=24", "cost<=64",
    ):
        assert name in names
    arms = {a["name"]: a for a in res["arms"]}
    assert arms["tr budget=12"]["method"] == "tr" and arms["tr budget=12"]["config"]["budget"] == 12
    assert (arms["budget=32"]["config"]["cost_aware"] is False
            and arms["cost<=24"]["config"]["cost_aware"] is True)
    assert "| budget=64 |" in bench.render_markdown(res)


@pytest.mark.slow  # the quick suite on the shapes model
def test_quick_suite_on_the_shapes_model_is_lossless(quick_bench: dict) -> None:
    """CI's lossless check of the real quick suite (no timing assertions; the run is conftest's
    ``quick_bench``, whose tokens per step tests/test_draft_quality.py checks)."""
    res = quick_bench
    # ar (one token per pass) is exact by construction and checked in test_lossless;
    # the drafters are checked here
    assert res["lossless"]["ok"], res["lossless"]["mismatches"]
    assert res["lossless"]["checked"] == 3 * len(bench.build_suite("quick"))


def test_tr_and_recap_rows_draft_24_fixed_nodes_and_recap_auto_is_the_librarys_default() -> None:
    """The paper's comparison stays at equal tree size; the default (trees sized by cost) has its own row."""
    names = bench.all_methods()
    assert names.index("recap-auto") == names.index("recap") + 1
    arms = {a.name: a for a in bench.method_arms(list(names), bench.FIXED_CONFIG)}
    for name in ("tr", "recap"):
        assert arms[name].config.budget == 24 and arms[name].config.cost_aware is False
    auto = arms["recap-auto"]
    assert auto.method == "recap" and auto.config == recap.RecapConfig(
        scoped_memory=True
    )  # "auto", cost-aware
    ablation = {a.name: a for a in bench.ablation_arms(bench.FIXED_CONFIG)}
    assert ablation["recap"].config.budget == 24
    assert ablation["recap-auto"].config == recap.RecapConfig(scoped_memory=True)
