"""The benchmark's acceptance figures (issue 37): per request, per kind, in the report and on the command
line, the same numbers ``recap.trace.stats`` computes from the trace of the same decode."""

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
from recap.bench.reports import acceptance_lines, acceptance_markdown
from recap.bench.statistics import acceptance_summary
from recap.bench.suite import FIXED_CONFIG
from recap.trace.stats import AcceptanceStats, pooled, rate_histogram, run_stats

DEVICE = os.environ.get("RECAP_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_models.build("qwen2_5_vl", tmp_path_factory.mktemp("bench-acc") / "m", seed=1)


@pytest.fixture(scope="module")
def target(tiny_dir: Path) -> recap.Target:
    return recap.load_target(tiny_dir, device=DEVICE, dtype=torch.float32)


@pytest.fixture(scope="module")
def results(target: recap.Target) -> dict:
    return bench.bench(target, suite="quick", methods=["ar", "recap"], limit=3, repeats=1, max_new_tokens=12,
                       progress=False, warmup=False)


def test_each_request_has_the_figures_of_its_trace(results: dict, target: recap.Target) -> None:
    # The bench's recap row, replayed with recap.generate(trace=True) on one memory in the same order:
    # its per-request figures are run_stats of those traces, number for number.
    memory = recap.TokenMemory(target.vocab_size, FIXED_CONFIG.top_k)
    requests = bench.build_suite("quick", 3)
    rows = [r for r in results["records"] if r["arm"] == "recap"]
    assert len(rows) == 3
    for req, rec in zip(requests, rows):
        gen = recap.generate(target, req.image(), req.prompt, method="recap", max_new_tokens=12,
                             memory=memory, config=FIXED_CONFIG, trace=True)
        want = run_stats(gen, depths=FIXED_CONFIG.max_depth).to_dict()
        assert rec["acceptance"] == want
        assert rec["acceptance"]["steps"] == rec["steps"] and rec["acceptance"]["tokens"] == rec["tokens"]
        assert len(rec["acceptance"]["per_depth"]) == FIXED_CONFIG.max_depth  # unreached depths included
    assert all("acceptance" not in r for r in results["records"] if r["arm"] == "hf")


def test_summary_pools_the_requests(results: dict) -> None:
    rows = [r for r in results["records"] if r["arm"] == "recap"]
    per = [AcceptanceStats.from_dict(r["acceptance"]) for r in rows]
    overall = results["summary"]["recap"]["overall"]
    assert overall["acceptance"] == pooled(per).to_dict()
    assert overall["rate_hist"] == rate_histogram(per, 10) and sum(overall["rate_hist"]) == len(
        [s for s in per if s.drafted])
    for kind, s in results["summary"]["recap"]["by_kind"].items():
        mine = [p for p, r in zip(per, rows) if r["kind"] == kind]
        assert s["acceptance"] == pooled(mine).to_dict()
    ar = results["summary"]["ar"]["overall"]["acceptance"]
    assert ar["drafted"] == 0 and ar["acceptance_rate"] is None  # nothing drafted: no rate, not 0
    assert "acceptance" not in results["summary"]["hf"]["overall"]
    assert acceptance_summary([{"tokens": 3}]) == {}  # results written before the figures


def test_report_and_command_line_say_the_same_numbers(results: dict) -> None:
    md = bench.render_markdown(results)
    assert "## Acceptance" in md
    stats = AcceptanceStats.from_dict(results["summary"]["recap"]["overall"]["acceptance"])
    rate = f"{stats.accepted}/{stats.drafted} ({stats.acceptance_rate:.0%})"
    row = next(line for line in md.splitlines() if line.startswith(f"| recap | {rate} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"{stats.tokens_per_pass:.2f}"
    assert cells[3:] == ["–" if r is None else f"{r:.2f}" for r in stats.depth_rates()]
    assert f"recap: {stats.summary()}" in acceptance_lines(results)
    old = json.loads(json.dumps(results))
    for s in old["summary"].values():
        s.get("overall", {}).pop("acceptance", None)
    assert acceptance_markdown(old) == []  # a results.json from before: no section, no error


def test_cli_prints_the_acceptance_lines(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    rc = cli_main(["bench", "--model", str(tiny_dir), "--suite", "quick", "--limit", "1",
                   "--max-new-tokens", "6", "--methods", "recap", "--out", str(tmp_path), "--no-progress",
                   "--device", DEVICE])
    assert rc == 0
    data = json.loads((tmp_path / "results.json").read_text())
    overall = data["summary"]["recap"]["overall"]["acceptance"]
    line = f"acceptance recap: {AcceptanceStats.from_dict(overall).summary()}"
    assert line in capsys.readouterr().err
