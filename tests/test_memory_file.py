"""Memory files: every malformed file is a MemoryFileError naming the file and the field.

A memory file is what a visitor uploads to the app's Memory tab; a file that loads is
used by every later RECAP decode of the session, so ``TokenMemory.load`` checks every value
(ids in the vocabulary, probabilities, provenance, metadata, dtypes and shapes) first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from test_properties import record

import recap
from recap.memory import file as MF
from recap.memory.calibration import Calibration, count
from recap.memory.file import MemoryFileError
from recap.memory.store import RequestMemory, TokenMemory

V, K = 40, 4


def filled_memory() -> TokenMemory:
    """A memory written the way the engine writes it: sorted top-k of softmaxes, two requests."""
    mem = TokenMemory(V, K)
    gen = torch.Generator().manual_seed(0)
    for r in range(2):
        req = RequestMemory(mem, image_key=f"img{r}", prompt=f"prompt {r}")
        probs, ids = torch.softmax(torch.randn(12, V, generator=gen), -1).topk(K, dim=-1)  # (12, K)
        keys = [(None, None, int(t)) for t in torch.randint(0, V, (12,), generator=gen)]
        record(req, keys, ids, probs, step=r + 1, depths=list(range(12)))
    for cls, p, hit in ((0, 0.2, True), (1, 0.5, False), (2, 0.9, True)):
        count(mem.calibration.cells, cls, p, hit)
    return mem


def parts(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata())  # noqa: SIM118


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "memory.safetensors"
    filled_memory().save(path)
    return path


def rewrite(path: Path, tensors: dict[str, Any] | None = None, meta: dict[str, Any] | None = None,
            drop: tuple[str, ...] = ()) -> Path:
    """The file at ``path`` with some tensors / metadata entries replaced (None in meta: removed)."""
    t, m = parts(path)
    t.update(tensors or {})
    for key, value in (meta or {}).items():
        if value is None:
            m.pop(key, None)
        else:
            m[key] = value
    for key in drop:
        del t[key]
    save_file(t, str(path), metadata=m)
    return path


def load_refused(path: Path, match: str, **kw: Any) -> str:
    with pytest.raises(MemoryFileError, match=match) as info:
        TokenMemory.load(path, **kw)
    message = str(info.value)
    assert str(path.parent) not in message  # never a server path
    return message


def edited(path: Path, name: str, index: tuple, value: float) -> dict[str, torch.Tensor]:
    t = parts(path)[0][name].clone()
    t[index] = value
    return {name: t}


def filled_row(path: Path) -> int:
    return int((parts(path)[0]["request"] >= 0).nonzero()[0])


# ----------------------------------------------------------------------------- round trips


def test_round_trip_keeps_every_row_the_requests_and_the_calibration(good):
    mem = filled_memory()
    back = TokenMemory.load(good, vocab_size=V)
    for name in ("ids", "probs", "entropy", "concentration", "request", "step", "depth"):
        assert torch.equal(getattr(back, name), getattr(mem, name)), name
    assert back.requests == mem.requests
    assert torch.equal(back.calibration.counts, mem.calibration.counts)
    assert back.filled == mem.filled > 0


def test_an_empty_memory_round_trips(tmp_path):
    TokenMemory(V, K).save(tmp_path / "m.safetensors")
    assert TokenMemory.load(tmp_path / "m.safetensors").filled == 0


def test_a_file_without_calibration_loads_with_fresh_counts(good):
    rewrite(good, drop=("calibration",))
    assert torch.equal(TokenMemory.load(good).calibration.counts, Calibration().counts)


def test_a_loaded_memory_decodes_losslessly(load_tiny, tmp_path):
    target = load_tiny("qwen2_5_vl")
    mem = TokenMemory.for_target(target)
    first = recap.generate(target, None, "describe the image .", memory=mem, max_new_tokens=16)
    mem.save(tmp_path / "m.safetensors")
    back = TokenMemory.load(tmp_path / "m.safetensors", vocab_size=target.vocab_size)
    again = recap.generate(target, None, "describe the image .", memory=back, max_new_tokens=16)
    plain = recap.generate(target, None, "describe the image .", method="ar", max_new_tokens=16)
    assert again.token_ids == first.token_ids == plain.token_ids


# ----------------------------------------------------------------------------- save


@pytest.mark.parametrize("k", [MF.MAX_MEMORY_K + 1, 1000])
def test_save_refuses_a_k_over_the_limit_and_keeps_the_old_file(good, k):
    before = good.read_bytes()
    with pytest.raises(MemoryFileError,
                       match=rf"k = {k} predictions per row is not saved .* k is at most 64"):
        TokenMemory(V, k).save(good)
    assert good.read_bytes() == before
    assert [p.name for p in good.parent.iterdir()] == [good.name]  # no temporary file left


def test_save_replaces_a_file_atomically(good):
    TokenMemory(V, K).save(good)
    assert TokenMemory.load(good).filled == 0


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("value, shown", [(10**6, 1000000), (-3, -3), (V, V)])
def test_ids_outside_the_vocabulary(good, value, shown):
    row = filled_row(good)
    rewrite(good, edited(good, "ids", (row, 1), value))
    load_refused(
        good, rf"^memory\.safetensors: ids\[{row}, 1\] = {shown} is outside the vocabulary \(0 to {V - 1}\)$"
    )


def test_ids_outside_the_vocabulary_even_in_an_empty_row(good):
    row = int((parts(good)[0]["request"] < 0).nonzero()[0])
    rewrite(good, edited(good, "ids", (row, 0), -1))
    load_refused(good, rf"ids\[{row}, 0\] = -1 is outside the vocabulary")


def test_a_row_listing_a_token_twice(good):
    row = filled_row(good)
    ids = parts(good)[0]["ids"].clone()
    ids[row, 1] = ids[row, 0]
    rewrite(good, {"ids": ids})
    load_refused(good, rf"ids\[{row}\] lists a token twice")


@pytest.mark.parametrize(
    "index, value, match",
    [
        ((0, 0), float("nan"), r"probs\[0, 0\] is nan; probabilities are finite"),
        ((0, 2), float("inf"), r"probs\[0, 2\] is inf"),
        ((0, 3), -0.25, r"probs\[0, 3\] = -0\.25 is not a probability \(0 to 1\)"),
        ((0, 0), 1.5, r"probs\[0, 0\] = 1\.5 is not a probability"),
    ],
)
def test_probabilities_must_be_finite_and_in_range(good, index, value, match):
    rewrite(good, edited(good, "probs", index, value))
    load_refused(good, match)


def test_rows_are_sorted_most_probable_first(good):
    probs = parts(good)[0]["probs"].clone()
    probs[5] = torch.tensor([0.1, 0.5, 0.05, 0.01])
    rewrite(good, {"probs": probs})
    load_refused(good, r"probs\[5\] is not sorted most probable first")


def test_a_row_sums_to_at_most_one(good):
    probs = parts(good)[0]["probs"].clone()
    probs[7] = torch.tensor([0.6, 0.5, 0.0, 0.0])
    rewrite(good, {"probs": probs})
    load_refused(good, r"probs\[7\] sums to 1\.1000; a row's probabilities sum to at most 1")


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("entropy", float("nan"), r"entropy\[ROW\] = nan is outside 0 to 1\.386"),
        ("entropy", -1.0, r"entropy\[ROW\] = -1 is outside"),
        ("entropy", 9.0, r"entropy\[ROW\] = 9 is outside 0 to 1\.386"),
        ("concentration", 2.0, r"concentration\[ROW\] = 2 is outside 0 to 1"),
        ("step", -1, r"step\[ROW\] = -1 is negative"), ("depth", -4, r"depth\[ROW\] = -4 is negative"),
        ("request", 2, r"request\[ROW\] = 2 names no request \(the file lists 2; -1 marks an empty row\)"),
        ("request", -7, r"request\[ROW\] = -7 names no request"),
    ],
)
def test_row_statistics_and_provenance(good, name, value, match):
    row = filled_row(good)
    rewrite(good, edited(good, name, (row,), value))
    load_refused(good, match.replace("ROW", str(row)))


@pytest.mark.parametrize(
    "index, value, match",
    [
        ((0, 0, 0), -1.0, r"calibration\[0, 0, 0\] = -1\.0; counts are finite and non-negative"),
        ((1, 2, 0), float("nan"), r"calibration\[1, 2, 0\] = nan"),
        ((2, 3, 1), 5.0, r"calibration\[2, 3\] counts more accepted than proposed"),
    ],
)
def test_calibration_counts(good, index, value, match):
    rewrite(good, edited(good, "calibration", index, value))
    load_refused(good, match)


# ----------------------------------------------------------------------------- tensors


@pytest.mark.parametrize(
    "tensors, match",
    [
        ({"ids": torch.zeros(V, K, dtype=torch.float32)},
         rf"tensor 'ids' must be I64 of shape \[{V}, {K}\], got F32 "
         rf"of shape \[{V}, {K}\]"),
        ({"probs": torch.zeros(V, K + 1)},
         rf"tensor 'probs' must be F32 of shape \[{V}, {K}\], got F32 of shape "
         rf"\[{V}, {K + 1}\]"),
        ({"request": torch.zeros(V, dtype=torch.int64)}, r"tensor 'request' must be I32"),
        ({"entropy": torch.zeros(V + 1)}, r"tensor 'entropy' must be F32 of shape \[40\]"),
        ({"calibration": torch.zeros(3, 11, 2, dtype=torch.float64)},
         r"tensor 'calibration' must be F64 of shape "
         r"\[3, 10, 2\]"),
    ],
)
def test_wrong_dtypes_and_shapes(good, tensors, match):
    rewrite(good, tensors)
    load_refused(good, match)


def test_a_missing_tensor(good):
    rewrite(good, drop=("depth",))
    load_refused(good, r"^memory\.safetensors: tensor 'depth' is missing$")


@pytest.mark.parametrize("content",
                         [b"", b"hello, not a tensor file", b"\xff" * 64, json.dumps({"a": 1}).encode()])
def test_a_file_that_is_not_safetensors(tmp_path, content):
    path = tmp_path / "upload.safetensors"
    path.write_bytes(content)
    load_refused(path, r"^upload\.safetensors is not a RECAP memory file \(safetensors\)")


def test_a_missing_file_is_named_without_its_folder(tmp_path):
    load_refused(tmp_path / "gone.safetensors", r"^memory file not found: gone\.safetensors$")


# ----------------------------------------------------------------------------- metadata


@pytest.mark.parametrize(
    "meta, match",
    [
        ({"k": "0"}, r"metadata 'k' must be an integer from 1 to 64, got the string '0'"),
        ({"k": str(10**12)}, r"metadata 'k' must be an integer from 1 to 64, got the string '1000000000000'"),
        ({"k": "4.0"}, r"metadata 'k' must be an integer"), ({"k": " 4"}, r"metadata 'k' must be an integer"),
        ({"k": "-4"}, r"metadata 'k' must be an integer"), ({"k": None}, r"metadata 'k' is missing"),
        ({"vocab_size": "-3"}, r"metadata 'vocab_size' must be an integer from 1 to 1048576"),
        ({"vocab_size": str(2**40)}, r"metadata 'vocab_size' must be an integer from 1 to 1048576"),
        ({"vocab_size": "41"}, r"tensor 'ids' must be I64 of shape \[41, 4\]"),
        ({"format": "pickle"}, r"is not a RECAP token memory \(format the string 'pickle'"),
        ({"format": None}, r"is not a RECAP token memory \(format null"),
        ({"version": "2"}, r"unsupported memory version the string '2'"),
        ({"requests": "["}, r"metadata 'requests': not a JSON document"),
        ({"requests": "[" * 100_000 + "]" * 100_000}, r"metadata 'requests': the JSON is nested too deeply"),
        ({"requests": '{"a": 1}'},
         r"metadata 'requests' must be a list of \[image key, prompt\], got an object"),
        ({"requests": '[["k", "p"], ["k"]]'},
         r"metadata requests\[1\]: expected \[image key or null, prompt\]"),
        ({"requests": '[[1, "p"], ["k", "p"]]'},
         r"metadata requests\[0\]\[0\]: expected an image key .* got the integer 1"),
        ({"requests": '[["k", NaN], ["k", "p"]]'},
         r"metadata requests\[0\]\[1\]: expected a prompt .* got NaN"),
        ({"requests": json.dumps([["k", "x" * 5000], ["k", "p"]])},
         r"requests\[0\]\[1\]: expected a prompt of at most "
         r"4000 characters, got 5000 characters"),
        ({"requests": '[["k", "\\ud800"], ["k", "p"]]'},
         r"requests\[0\]\[1\]: expected a prompt .* got text that is "
         r"not valid Unicode"),
        ({"requests": "[]"}, r"request\[\d+\] = [01] names no request \(the file lists 0"),
    ],
)
def test_malformed_metadata(good, meta, match):
    rewrite(good, meta=meta)
    load_refused(good, match)


def test_metadata_is_checked_before_any_tensor_is_read(good):
    """A huge k in the metadata is refused from the metadata alone, not after reading (V, k) tensors."""
    rewrite(good, {"ids": torch.zeros(V, 1), "probs": torch.zeros(2)}, meta={"k": "1000000"})
    load_refused(good, r"metadata 'k' must be an integer from 1 to 64, got the string '1000000'$")


def test_another_vocabulary_is_refused_naming_both_sizes(good):
    load_refused(good,
                 rf"^memory\.safetensors was made for a vocabulary of {V} tokens; this model has {V + 1}$",
                 vocab_size=V + 1)


def test_limits():
    assert MF.MAX_MEMORY_K == recap.RecapConfig.MAX_TOP_K  # every memory a decode can use can be saved
    assert MF.MAX_VOCAB_SIZE >= 262_144  # today's largest VLM vocabularies
