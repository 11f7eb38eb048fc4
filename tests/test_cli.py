"""The command line: help for every subcommand, and generate end to end on a tiny model."""

from __future__ import annotations

import json
import os
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


HEAVY = ("torch", "transformers", "gradio")


@pytest.mark.parametrize("argv", [["--help"], ["generate", "--help"], ["bench", "--help"], ["app", "--help"]])
def test_help_imports_no_heavy_package(argv: list[str]) -> None:
    """A help text needs argparse only: torch and transformers load when a command runs."""
    code = (
        "import sys, recap.__main__ as m\n"
        "try:\n    m.main(sys.argv[1:])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        f"print('HEAVY', [name for name in {HEAVY!r} if name in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []"


def test_import_recap_is_light_and_its_names_load_on_use() -> None:
    code = (
        "import sys, recap\n"
        "before = 'torch' in sys.modules\n"
        "from recap import TokenMemory, load_target\n"
        "print(before, 'torch' in sys.modules, sorted(recap.__all__) == sorted(n for n in dir(recap) if n in "
        "recap.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "True", "True"], out.stderr


def test_a_wrong_method_or_suite_is_refused_naming_the_choices(capsys) -> None:
    """The parser's own refusal (exit status 2, the choices named), in this process: what
    ``python -m recap`` runs (its process start is covered by the help tests above)."""
    for argv, listed in (
        (["generate", "--prompt", "x", "--method", "nope"], "recap"), (["bench", "--suite", "nope"], "quick"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "nope" in err and listed in err


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


def test_generate_takes_device_and_dtype_as_bench_does(tiny_dirs, capsys):
    base = ["generate", "--model", str(tiny_dirs["qwen2_5_vl"]), "--prompt", "describe the image .",
            "--max-new-tokens", "4"]
    assert main([*base, "--device", "cpu", "--dtype", "float32"]) == 0
    assert "4 tokens" in capsys.readouterr().err
    for flags, says in ((["--dtype", "float8"], "error: unknown dtype 'float8'"),
                        (["--device", "nope"], "error: unknown device 'nope'"),):
        assert main([*base, *flags]) == 2  # load_target's own refusal: the flag reached it
        assert says in capsys.readouterr().err


def test_generate_check_compares_with_generate_and_fails_on_a_difference_that_is_no_tie(
    tiny_dirs, capsys, monkeypatch
):
    base = ["generate", "--model", str(tiny_dirs["qwen2_vl"]), "--prompt", "hi", "--max-new-tokens", "6"]
    assert main([*base, "--check"]) == 0
    assert "check: identical to generate()" in capsys.readouterr().err
    assert main([*base, "--check", "--dtype", "bfloat16"]) == 0  # identical, or a tie it names
    err = capsys.readouterr().err
    assert "check: identical to generate()" in err or "check: bf16 tie at token" in err
    real = recap.generate

    def off_by_one(*args, **kwargs):  # a wrong token where generate() is certain: no tie
        out = real(*args, **kwargs)
        out.token_ids = [(out.token_ids[0] + 1) % 64, *out.token_ids[1:]]
        return out

    monkeypatch.setattr(recap, "generate", off_by_one)
    assert main([*base, "--check"]) == 1
    assert "check: fp32 differs from generate() at token 1 (not lossless)" in capsys.readouterr().err
    assert main([*base, "--check", "--temperature", "0.7"]) == 2  # sampled: not what the check compares
    assert "compares greedy decodes" in capsys.readouterr().err


def test_version_and_exit_statuses_are_documented_and_distinct(tiny_dirs, tmp_path, capsys):
    from recap.__main__ import EPILOG, EXIT_RUNTIME, EXIT_USAGE, version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and version() in capsys.readouterr().out
    assert all(str(code) in EPILOG for code in (0, 1, 2, 3))
    model = ["--model", str(tiny_dirs["qwen2_5_vl"])]
    assert main(["generate", *model, "--prompt", " "]) == EXIT_USAGE  # bad input
    assert main(["generate", "--model", str(tmp_path / "none"), "--prompt", "hi"]) == EXIT_RUNTIME
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)  # not writable: the trace cannot be written (root ignores the bits: a folder instead)
    out = locked / "trace.json" if os.geteuid() != 0 else tmp_path
    code = main(["generate", *model, "--prompt", "hi", "--max-new-tokens", "2", "--trace", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_RUNTIME and "Traceback" not in err and str(out) in err
