"""The shipped example run: the embedded model's decode of the first example, as a new session runs it.

The app opens on this run (no model work on page load); ``scripts/record_example.py`` writes
it and ``tests/test_example_run.py`` checks it against a fresh decode. A run folder holds
``trace.json.gz`` (the ``DecodeTrace`` JSON, gzipped) and ``run.json`` (the example's image
file and prompt, the method and ``max_new_tokens``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recap.core.assets import EXAMPLE_RUN, EXAMPLES, WARM_MEMORY
from recap.core.config import RecapConfig
from recap.engine.loop import generate
from recap.models.target import DEFAULT_MODEL_DIR, load_target
from recap.shapes.warm_memory import load_warm
from recap.trace.format import DecodeTrace

EXAMPLES_DIR = EXAMPLES
WARM_DIR = WARM_MEMORY
EXAMPLE_RUN_DIR = EXAMPLE_RUN
#: What the Decode tab's Run does by default (its method radio and token slider).
METHOD = "recap"
MAX_NEW_TOKENS = 128
#: The settings of the shipped run: a new app session's (the image-scoped memories on: each session
#: owns its memory) with 24 fixed nodes a step. The library's default sizes each tree by the verify
#: cost measured on the machine that decodes, so a run under it would not repeat from one machine
#: (or one load) to the next; the shipped run must equal a fresh decode anywhere.
SESSION_CONFIG = RecapConfig(scoped_memory=True)
CONFIG = RecapConfig(budget=24, cost_aware=False, scoped_memory=True)


def first_example() -> dict[str, Any]:
    """The first entry of ``assets/examples/examples.json`` (``file``, ``prompt``, ...)."""
    return json.loads((EXAMPLES_DIR / "examples.json").read_text(encoding="utf-8"))[0]


def decode_example(target: Any = None) -> tuple[DecodeTrace, dict[str, Any]]:
    """Decode the first example from a fresh copy of the warm memory; the trace and the run's facts."""
    target = target if target is not None else load_target()
    example = first_example()
    memory = load_warm(WARM_DIR, target.vocab_size).memory
    out = generate(target, EXAMPLES_DIR / example["file"], example["prompt"], method=METHOD,
                   max_new_tokens=MAX_NEW_TOKENS, memory=memory, config=CONFIG, trace=True)
    assert out.trace is not None
    out.trace.model = DEFAULT_MODEL_DIR.name  # the folder name, never this machine's path
    meta = {"image": example["file"], "prompt": example["prompt"], "method": METHOD, "max_new_tokens": MAX_NEW_TOKENS}
    return out.trace, meta


def write_example(directory: Path, trace: DecodeTrace, meta: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    trace.to_json(directory / "trace.json.gz")  # gzipped; the same trace gives the same bytes
    (directory / "run.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def read_example(directory: Path = EXAMPLE_RUN_DIR) -> tuple[DecodeTrace, dict[str, Any]]:
    """The shipped run: its trace (validated like any trace file) and ``run.json``."""
    trace = DecodeTrace.load(directory / "trace.json.gz")
    meta = json.loads((directory / "run.json").read_text(encoding="utf-8"))
    return trace, meta
