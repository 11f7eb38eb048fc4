"""The shipped example run (assets/example-run) is what a new session's first Run gives today."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

import recap
from recap.shapes.example_run import (
    CONFIG,
    EXAMPLE_RUN_DIR,
    decode_example,
    first_example,
    read_example,
)


def without_timings(data: Any) -> Any:
    """A trace's dict with every measured duration removed (what a fresh decode must reproduce)."""
    if isinstance(data, dict):
        return {k: without_timings(v) for k, v in data.items() if k not in ("timings", "draft_s", "verify_s", "update_s")}
    if isinstance(data, list):
        return [without_timings(v) for v in data]
    return data


def as_json(data: object) -> object:
    """``data`` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(data))


def assert_same(a: object, b: object, at: str) -> None:
    """Equal structure, ids and texts; floats equal to 1e-4 (thread counts move their last bits)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), at
        assert a == pytest.approx(b, abs=1e-4), at
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), at
        for key in a:
            assert_same(a[key], b[key], f"{at}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), at
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{at}[{i}]")
    else:
        assert a == b, at


@pytest.fixture(scope="module")
def shipped() -> tuple[recap.DecodeTrace, dict]:
    return read_example()


def test_the_shipped_run_equals_a_fresh_decode(shipped: tuple[recap.DecodeTrace, dict], shapes_cpu) -> None:
    """Re-record with `python scripts/record_example.py` when this fails after a deliberate change."""
    trace, _ = shipped
    fresh, _ = decode_example(shapes_cpu)
    assert fresh.token_ids == trace.token_ids
    assert_same(as_json(without_timings(fresh.to_dict())), as_json(without_timings(trace.to_dict())), "trace")


def test_the_shipped_run_is_the_first_example_at_24_fixed_nodes(
    shipped: tuple[recap.DecodeTrace, dict],
) -> None:
    trace, meta = shipped
    example = first_example()
    assert (meta["image"], meta["prompt"]) == (example["file"], example["prompt"])
    assert trace.prompt == example["prompt"] and trace.method == meta["method"] == "recap"
    fixed = recap.RecapConfig(budget=24, cost_aware=False, scoped_memory=True)  # the app's, at 24 fixed nodes
    assert trace.config == as_json(CONFIG.to_dict()) == as_json(fixed.to_dict())
    assert trace.request > 0  # decoded from the warm memory, as a new session's first run is
    assert trace.model == "shapes-vlm"  # a folder name, not the recording machine's path


def test_the_shipped_files_are_compressed_json() -> None:
    raw = (EXAMPLE_RUN_DIR / "trace.json.gz").read_bytes()
    text = gzip.decompress(raw)
    assert len(raw) < len(text) / 4
    assert json.loads(text)["method"] == "recap"
