"""ZeroGPU as Spaces documents it (issue 36, item 4), with a stand-in ``spaces`` package in a fresh
interpreter (the app reads ``spaces`` when its modules import):

* with ``SPACES_ZERO_GPU`` set, the listed models load when the app is built, before any handler;
* ``spaces.GPU`` wraps exactly the GPU calls (``app.state.gpu_calls``: one decode, one benchmark
  suite), never a Gradio handler, and each asks for a duration computed from its own arguments;
* the stand-in runs each call as ZeroGPU does, in isolation: its arguments and everything it yields or
  returns cross a pickle round trip, so a mutation made inside is lost; the session still gets the
  run, every step and the memory, because the caller writes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = '''
import functools, inspect, pickle

REGISTERED = {}   # qualname -> the duration callable
ASKED = []        # (qualname, seconds) per call


def _cross(value):  # what crossing to ZeroGPU's process and back does to a value
    return pickle.loads(pickle.dumps(value))


def GPU(fn=None, *, duration=60):
    def decorate(f):
        REGISTERED[f.__qualname__] = duration

        def asked(args, kwargs):
            ASKED.append((f.__qualname__, duration(*args, **kwargs) if callable(duration) else duration))

        if inspect.isgeneratorfunction(f):
            @functools.wraps(f)
            def gen(*args, **kwargs):
                asked(args, kwargs)
                for item in f(*_cross(args), **_cross(kwargs)):
                    yield _cross(item)
            return gen

        @functools.wraps(f)
        def call(*args, **kwargs):
            asked(args, kwargs)
            return _cross(f(*_cross(args), **_cross(kwargs)))
        return call
    return decorate(fn) if fn is not None else decorate
'''

SCRIPT = r'''
import json
import sys
import spaces
import app.state.targets as targets

targets.ZERO_GPU_DEVICE = "cpu"  # the app's own seam: this machine has no CUDA
import recap
from app.state.settings import load_settings
from app.state.targets import MODELS
from app.ui import build_demo

settings = load_settings()
demo = build_demo(settings=settings)
loaded_at_start = MODELS.loaded(settings.default_spec)
registered_after_build = sorted(spaces.REGISTERED)

if len(sys.argv) > 1 and sys.argv[1] == "build-only":
    print(json.dumps({"loaded_at_start": loaded_at_start, "registered": registered_after_build}))
    raise SystemExit(0)

from app.state import gpu_calls
from app.state.decoding import decode_to_end
from app.state.session import Session

session = Session(settings.limits)
config = recap.RecapConfig()
run = decode_to_end(session, settings, None, "describe the image .", "recap", 40, config=config)
slot = run.slot
suite_seconds = gpu_calls.bench_seconds(settings.default_spec, "quick")
print(json.dumps({
    "loaded_at_start": loaded_at_start,
    "registered": registered_after_build,
    "asked": spaces.ASKED,
    "tokens": sum(len(s.emitted) for s in run.trace.steps),
    "steps": len(run.trace.steps),
    "runs": len(session.runs),
    "memory_rows": int(slot.memory.filled),
    "requests": len(slot.requests),
    "suite_seconds": suite_seconds,
    "quick_requests": len(__import__("recap.bench.suite", fromlist=["build_suite"]).build_suite("quick")),
}))
'''


def _run(tmp_path: Path, zero_gpu: bool, *args: str) -> dict:
    (tmp_path / "spaces.py").write_text(STAND_IN)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "RECAP_PUBLIC": "0",
           "SPACES_ZERO_GPU": "1" if zero_gpu else "", "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_zero_gpu_loads_at_start_wraps_the_gpu_calls_only_and_the_session_gets_what_they_return(
    tmp_path: Path,
) -> None:
    from app.state.gpu_calls import BENCH_TOKENS, DECODE_BASE_S, MAX_DURATION_S, SECONDS_PER_TOKEN

    out = _run(tmp_path, zero_gpu=True)
    assert out["loaded_at_start"], "on ZeroGPU the default model loads when the app is built"
    assert out["registered"] == ["bench_suite", "decode_steps"]  # no Gradio handler holds the GPU
    # one decode of 40 tokens asked for its own bound: base + 40 tokens
    assert out["asked"] == [["decode_steps", round(DECODE_BASE_S + 40 * SECONDS_PER_TOKEN)]]
    from recap.bench.suite import HF_METHODS, all_methods

    tokens = out["quick_requests"] * (len(all_methods()) + len(HF_METHODS)) * BENCH_TOKENS
    expected = min(MAX_DURATION_S, round(DECODE_BASE_S + tokens * SECONDS_PER_TOKEN))
    assert out["suite_seconds"] == expected
    # every value crossed a pickle round trip, yet the session holds the run, its steps and its memory
    assert out["runs"] == 1 and out["steps"] >= 1 and out["requests"] == 1
    assert out["memory_rows"] != 0, "the memory the GPU call returned (with this decode's rows) is the slot's"


def test_off_zero_gpu_nothing_loads_at_start(tmp_path: Path) -> None:
    out = _run(tmp_path, False, "build-only")
    assert not out["loaded_at_start"]  # the first run loads it, as before
    assert out["registered"] == ["bench_suite", "decode_steps"]  # spaces.GPU is effect-free off ZeroGPU
