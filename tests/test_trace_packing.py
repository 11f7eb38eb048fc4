"""Gzipped trace files: written by ``to_json(path.gz)``, read by ``DecodeTrace.load`` within the bound."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import recap
from recap.shapes.example_run import EXAMPLE_RUN_DIR
from recap.trace import format as trace_format
from recap.trace.packing import PackingError, gunzip_bounded, pack


@pytest.fixture(scope="module")
def trace() -> recap.DecodeTrace:
    return recap.DecodeTrace.load(EXAMPLE_RUN_DIR / "trace.json.gz")


def test_a_gz_path_is_written_gzipped_and_loads_back(trace: recap.DecodeTrace, tmp_path: Path) -> None:
    packed, plain = tmp_path / "t.json.gz", tmp_path / "t.json"
    trace.to_json(packed)
    trace.to_json(plain)
    assert packed.read_bytes()[:2] == b"\x1f\x8b" and len(packed.read_bytes()) < plain.stat().st_size / 4
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert recap.DecodeTrace.load(packed).to_dict() == recap.DecodeTrace.load(plain).to_dict()
    assert pack(trace.to_json()) == packed.read_bytes()  # the same trace, the same bytes


def test_gzip_is_recognised_by_content_not_name(trace: recap.DecodeTrace, tmp_path: Path) -> None:
    odd = tmp_path / "trace.json"  # gzipped under a plain name
    odd.write_bytes(pack(trace.to_json()))
    assert recap.DecodeTrace.load(odd).token_ids == trace.token_ids


def test_a_gzip_bomb_is_refused_past_the_ceiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 3_000_000))
    monkeypatch.setattr(trace_format, "MAX_TRACE_BYTES", 1_000_000)
    with pytest.raises(recap.TraceError, match="bomb.json.gz: the file unpacks to over 1 MB"):
        recap.DecodeTrace.load(bomb)


@pytest.mark.parametrize(("raw", "message"), [
    (gzip.compress(b"{}")[:-6], "cut short"),
    (gzip.compress(b"{}") + gzip.compress(b"{}"), "more than one"),
    (b"\x1f\x8b not gzip at all", "not a readable gzip"),
])
def test_broken_gzip_is_named(raw: bytes, message: str, tmp_path: Path) -> None:
    with pytest.raises(PackingError, match=message):
        gunzip_bounded(raw, 1000)
    path = tmp_path / "broken.json.gz"
    path.write_bytes(raw)
    with pytest.raises(recap.TraceError, match=f"broken.json.gz: .*{message}"):
        recap.DecodeTrace.load(path)
