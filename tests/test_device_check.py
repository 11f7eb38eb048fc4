"""The device check is ready to run (issue 36, item 5): ``scripts/device_check.sh`` parses, names only
files that exist, stays within 7 minutes, and its Python parts run here on a CPU with tiny sizes
(``scripts/device_measure.py --dry-run``) writing the figures the summary reads."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device_check.sh"


def _measure():
    spec = importlib.util.spec_from_file_location("device_measure", ROOT / "scripts" / "device_measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_parses_names_what_exists_and_fits_seven_minutes() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    text = SCRIPT.read_text()
    for path in set(re.findall(r"\b((?:scripts|tests)/[\w/]+\.(?:py|sh))", text)):
        assert (ROOT / path).is_file(), f"device_check.sh names {path}, which does not exist"
    assert int(re.search(r"DEADLINE=\$\{DEADLINE:-(\d+)\}", text).group(1)) <= 420
    for part in ("precision --device cuda --dtype bfloat16", "speed --device cuda --dtype bfloat16",
                 "verify_curve_7b.py --device cuda --dtype bfloat16"):
        assert part in text, f"device_check.sh no longer runs {part}"


def test_the_precision_check_runs_on_a_cpu_and_an_error_fails_it(tmp_path: Path, monkeypatch) -> None:
    measure = _measure()
    assert measure.main(["precision", "--dry-run", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "precision-bf16.json").read_text())
    assert result["dtype"] == "bf16" and result["device"] == "cpu" and result["errors"] == 0
    assert result["outputs"] == len(result["rows"]) > 0
    assert {r["method"] for r in result["rows"]} >= {"ar", "recap"}
    # one token that is no greedy choice fails the check (a tie would not)
    monkeypatch.setattr(measure, "precision", lambda args: {**result, "errors": 1})
    assert measure.main(["precision", "--dry-run", "--out", str(tmp_path)]) == 1


def test_the_speed_run_at_7b_sizes_runs_on_a_cpu_with_tiny_sizes(tmp_path: Path) -> None:
    measure = _measure()
    assert measure.main(["speed", "--dry-run", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "speed-7b.json").read_text())
    assert set(result["rows"]) == {"hf", "ar", "recap"}
    assert result["dtype"] == "bf16" and result["max_new_tokens"] == 16
    for name in ("ar", "recap"):  # the engine's outputs checked against generate()'s
        row = result["rows"][name]
        assert row["lossless"] is True and row["tokens"] == result["rows"]["hf"]["tokens"]
        assert row["tokens_per_s"] > 0 and row["passes"] >= 1
    # the real run builds Qwen2.5-VL-7B's text sizes
    assert measure.REAL_DIMS == {"layers": 28, "hidden": 3584, "heads": 28, "kv_heads": 4,
                                 "intermediate": 18944, "vocab": 152064}
