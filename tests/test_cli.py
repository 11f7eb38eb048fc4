"""The command line: help for every subcommand, and generate end to end on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import recap
from recap.__main__ import main

ROOT = Path(__file__).resolve().parent.parent


def test_help_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "recap", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0
    assert "generate" in out.stdout and "bench" in out.stdout


def test_generate_prints_text_summary_and_writes_a_trace(tiny_dirs, tmp_path, capsys):
    trace = tmp_path / "t.json"
    mem = tmp_path / "m.safetensors"
    argv = ["generate", "--model", str(tiny_dirs["qwen2_5_vl"]), "--prompt", "describe the image .",
            "--max-new-tokens", "12", "--trace", str(trace), "--memory", str(mem)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "12 tokens" in captured.err and "MAT" in captured.err and "tokens/s" in captured.err
    loaded = recap.DecodeTrace.load(trace)
    assert len(loaded.token_ids) == 12 and captured.out.strip() == loaded.text.strip()
    assert json.loads(trace.read_text())["schema"] == "recap-trace"
    assert recap.TokenMemory.load(mem).filled > 0  # the memory was saved, and loads back next time
    assert main(argv) == 0


def test_generate_reports_bad_input_without_a_traceback(tiny_dirs, capsys):
    assert main(["generate", "--model", str(tiny_dirs["qwen2_5_vl"]), "--prompt", " "]) == 2
    assert "error: the prompt is empty" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["--max-new-tokens=0", "--budget=0"])
def test_generate_rejects_out_of_range_settings(tiny_dirs, capsys, bad):
    assert main(["generate", "--model", str(tiny_dirs["qwen2_5_vl"]), "--prompt", "hi", bad]) == 2
    assert "error:" in capsys.readouterr().err
