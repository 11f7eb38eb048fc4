"""The persistent memory file: ``TokenMemory``'s tables as safetensors, and their check at load (this module
knows tensors and metadata, not the memory store: ``recap.memory.store`` reads and writes through it).

A file holds the M1 table (``ids`` / ``probs`` (V, k); ``entropy``, ``concentration``,
``request``, ``step``, ``depth`` (V,)), the calibration counts (3, BINS, 2) and string
metadata: ``format``, ``version``, ``vocab_size``, ``k`` and ``requests`` (a JSON list of
``[image_key or null, prompt]``, one per request that wrote into it). Never pickle.

``load_tables`` checks everything before ``TokenMemory.load`` builds the memory, so a rejected file changes
nothing: the metadata first (before any tensor is read), then each tensor's dtype and
shape (before reading its data), then its values: token ids in the vocabulary and distinct
within a row, probabilities finite in [0, 1], sorted most probable first and summing to at
most 1, entropies and concentrations in range, provenance pointing at a listed request.
Every failure is a ``MemoryFileError`` that names the file (by its name only, never a
server path) and the field, e.g. ``memory.safetensors: ids[17, 3] = 1000000 is outside the
vocabulary (0 to 70)``.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from recap.core.config import RecapConfig
from recap.core.jsontext import SchemaError, describe, is_unicode, parse_json
from recap.core.limits import MAX_PROMPT_CHARS
from recap.memory.calibration import Calibration

MEMORY_FORMAT = "recap-token-memory"
MEMORY_VERSION = 1


class MemoryFileError(ValueError):
    """A memory file that cannot be used (foreign vocabulary, corrupt, wrong format)."""


@dataclass
class MemoryTables:
    """What a memory file holds: the dense tables, the calibration counts and the requests' provenance."""

    vocab_size: int
    k: int
    tensors: dict[str, torch.Tensor]  # TABLES' names, and "calibration" where the file has it
    requests: list[tuple[str | None, str]]  # (image key, prompt) per request


#: Most predictions per row (k) saved or loaded: the drafters' own ceiling on top_k. A row
#: costs 12 bytes per prediction, so a 152k-token vocabulary at k = 64 is a 117 MB file.
MAX_MEMORY_K = RecapConfig.MAX_TOP_K
#: Largest vocabulary a memory file may be made for (2^20; today's VLMs have 32k-262k).
MAX_VOCAB_SIZE = 1 << 20
#: Most requests in the provenance table.
MAX_REQUESTS = 100_000
#: Longest image key in the provenance table (keys are short fingerprints).
MAX_IMAGE_KEY_CHARS = 256
#: Float rounding allowed on probability sums and bounds (float32 top-k of a softmax).
PROB_TOLERANCE = 1e-4

_DECIMAL = re.compile(r"[0-9]{1,10}")
# Tensors the file holds: name -> (safetensors dtype, torch dtype, shape as a function of (V, k)).
TABLES: dict[str, tuple[str, torch.dtype, Any]] = {
    "ids": ("I64", torch.int64, lambda v, k: (v, k)),
    "probs": ("F32", torch.float32, lambda v, k: (v, k)),
    "entropy": ("F32", torch.float32, lambda v, k: (v,)),
    "concentration": ("F32", torch.float32, lambda v, k: (v,)),
    "request": ("I32", torch.int32, lambda v, k: (v,)),
    "step": ("I32", torch.int32, lambda v, k: (v,)),
    "depth": ("I32", torch.int32, lambda v, k: (v,)),
}
_CALIBRATION = ("F64", torch.float64, (3, Calibration.BINS, 2))


def save_tables(tables: MemoryTables, path: str | Path) -> None:
    """Write ``tables`` to ``path`` atomically (a failed write leaves an older file as it was)."""
    from safetensors.torch import save_file

    if not 1 <= tables.k <= MAX_MEMORY_K:
        mb = tables.vocab_size * tables.k * 12 / 1e6
        raise MemoryFileError(f"a memory with k = {tables.k} predictions per row is not saved "
                              f"(the file would be {mb:.0f} MB); k is at most {MAX_MEMORY_K}")
    if not 1 <= tables.vocab_size <= MAX_VOCAB_SIZE:
        raise MemoryFileError(f"a memory for {tables.vocab_size} tokens is not saved; at most "
                              f"{MAX_VOCAB_SIZE}")
    meta = {"format": MEMORY_FORMAT, "version": str(MEMORY_VERSION), "vocab_size": str(tables.vocab_size),
            "k": str(tables.k),
            "requests": json.dumps([[key, prompt] for key, prompt in tables.requests], ensure_ascii=False)}
    tensors = {name: tables.tensors[name].contiguous() for name in (*TABLES, "calibration")}
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=meta)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_tables(path: str | Path, *, vocab_size: int | None = None) -> MemoryTables:
    """Read and check a memory file; its tables, or ``MemoryFileError``."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    name = path.name
    if not path.is_file():
        raise MemoryFileError(f"memory file not found: {name}")
    try:
        with safe_open(str(path), framework="pt") as f:
            v, k, requests = _read_metadata(f.metadata() or {}, name, vocab_size)
            tensors = {}
            present = set(f.keys())
            for key, (st_dtype, dtype, shape) in [*((n, (a, b, c(v, k))) for n, (a, b, c) in TABLES.items()),
                                                  ("calibration", _CALIBRATION)]:
                if key not in present:
                    if key == "calibration":  # older files: calibration starts fresh
                        continue
                    raise MemoryFileError(f"{name}: tensor {key!r} is missing")
                sl = f.get_slice(key)
                if sl.get_dtype() != st_dtype or tuple(sl.get_shape()) != shape:
                    raise MemoryFileError(f"{name}: tensor {key!r} must be {st_dtype} of shape {list(shape)},"
                                          f" got {sl.get_dtype()} of shape {list(sl.get_shape())}")
                tensors[key] = f.get_tensor(key)
                if tensors[key].dtype != dtype:  # safetensors maps dtype names 1:1; a guard, not a conversion
                    raise MemoryFileError(f"{name}: tensor {key!r} has dtype {tensors[key].dtype}")
    except (SafetensorError, OSError) as exc:
        raise MemoryFileError(f"{name} is not a RECAP memory file (safetensors): {_reason(exc)}") from None
    _check_values(tensors, v, k, len(requests), name)
    return MemoryTables(v, k, tensors, list(requests))


def _reason(exc: BaseException) -> str:
    """An exception's text without any file path in it (the visitor's path is not theirs to see)."""
    text = str(exc).split("\n")[0]
    return re.sub(r"(/[^\s:'\"]+)+", "<file>", text)[:200] or type(exc).__name__


Requests = list[tuple[str | None, str]]  # (image key, prompt) per request


def _read_metadata(meta: dict[str, str], name: str, vocab_size: int | None) -> tuple[int, int, Requests]:
    if meta.get("format") != MEMORY_FORMAT:
        raise MemoryFileError(f"{name} is not a RECAP token memory (format {describe(meta.get('format'))}, "
                              f"expected {MEMORY_FORMAT!r})")
    if meta.get("version") != str(MEMORY_VERSION):
        raise MemoryFileError(f"{name}: unsupported memory version {describe(meta.get('version'))} "
                              f"(this build reads {MEMORY_VERSION})")
    v = _meta_int(meta, "vocab_size", MAX_VOCAB_SIZE, name)
    k = _meta_int(meta, "k", MAX_MEMORY_K, name)
    if vocab_size is not None and v != vocab_size:
        raise MemoryFileError(f"{name} was made for a vocabulary of {v} tokens; this model has {vocab_size}")
    try:
        raw = parse_json(meta.get("requests", "[]"))
    except SchemaError as exc:
        raise MemoryFileError(f"{name}: metadata 'requests': {exc}") from None
    if type(raw) is not list:
        raise MemoryFileError(f"{name}: metadata 'requests' must be a list of [image key, prompt], got "
                              f"{describe(raw)}")
    if len(raw) > MAX_REQUESTS:
        raise MemoryFileError(f"{name}: metadata 'requests' lists {len(raw)} requests; at most "
                              f"{MAX_REQUESTS}")
    requests = []
    for i, item in enumerate(raw):
        at = f"{name}: metadata requests[{i}]"
        if type(item) is not list or len(item) != 2:
            raise MemoryFileError(f"{at}: expected [image key or null, prompt], got {describe(item)}")
        key, prompt = item
        if key is not None and (type(key) is not str or len(key) > MAX_IMAGE_KEY_CHARS
                                or not is_unicode(key)):
            raise MemoryFileError(f"{at}[0]: expected an image key (a short string) or null, got "
                                  f"{describe(key)}")
        if type(prompt) is not str or len(prompt) > MAX_PROMPT_CHARS or not is_unicode(prompt):
            what = describe(prompt) if type(prompt) is not str else (
                f"{len(prompt)} characters" if is_unicode(prompt) else "text that is not valid Unicode")
            raise MemoryFileError(f"{at}[1]: expected a prompt of at most {MAX_PROMPT_CHARS} characters, "
                                  f"got {what}")
        requests.append((key, prompt))
    return v, k, requests


def _meta_int(meta: dict[str, str], key: str, hi: int, name: str) -> int:
    raw = meta.get(key)
    if raw is None:
        raise MemoryFileError(f"{name}: metadata {key!r} is missing")
    if not _DECIMAL.fullmatch(raw) or not 1 <= int(raw) <= hi:
        raise MemoryFileError(f"{name}: metadata {key!r} must be an integer from 1 to {hi}, got "
                              f"{describe(raw)}")
    return int(raw)


def _refuse(name: str, bad: torch.Tensor, say: Callable[[tuple[int, ...]], str]) -> None:
    """``MemoryFileError`` naming the file and ``say(index)`` of the first True of ``bad``, if any."""
    hit = bad.nonzero()
    if len(hit):
        raise MemoryFileError(f"{name}: {say(tuple(hit[0].tolist()))}")


def _where(key: str, index: tuple[int, ...]) -> str:
    return f"{key}[{', '.join(map(str, index))}]"


def _check_values(t: dict[str, torch.Tensor], v: int, k: int, n_requests: int, name: str) -> None:
    ids, probs, request, calib = t["ids"], t["probs"], t["request"], t.get("calibration")
    _refuse(name, (ids < 0) | (ids >= v),
            lambda at: f"{_where('ids', at)} = {int(ids[at])} is outside the vocabulary (0 to {v - 1})")
    s = ids.sort(dim=1).values  # (V, k)
    _refuse(name, (s[:, 1:] == s[:, :-1]).any(dim=1) & (request >= 0),  # (V,): filled rows only
            lambda at: f"ids[{at[0]}] lists a token twice ({ids[at[0]].tolist()})")
    _refuse(name, ~torch.isfinite(probs),
            lambda at: f"{_where('probs', at)} is {float(probs[at])}; probabilities are finite")
    _refuse(name, (probs < 0) | (probs > 1 + PROB_TOLERANCE),
            lambda at: f"{_where('probs', at)} = {float(probs[at]):g} is not a probability (0 to 1)")
    _refuse(name, probs[:, 1:] > probs[:, :-1] + PROB_TOLERANCE,
            lambda at: f"probs[{at[0]}] is not sorted most probable first ({probs[at[0]].tolist()})")
    _refuse(name, probs.double().sum(dim=1) > 1 + PROB_TOLERANCE, lambda at: f"probs[{at[0]}] sums to "
            f"{float(probs[at[0]].double().sum()):.4f}; a row's probabilities sum to at most 1")
    log_k = math.log(k) if k > 1 else 0.0
    for key, lo, hi in (("entropy", 0.0, log_k), ("concentration", 0.0, 1.0)):
        x = t[key]
        bad = ~torch.isfinite(x) | (x < lo - PROB_TOLERANCE) | (x > hi + PROB_TOLERANCE)
        _refuse(name, bad, lambda at, key=key, x=x, lo=lo, hi=hi: f"{_where(key, at)} = {float(x[at]):g} is "
                f"outside {lo:g} to {hi:.4g}")
    _refuse(name, (request < -1) | (request >= n_requests), lambda at: f"{_where('request', at)} = "
            f"{int(request[at])} names no request (the file lists {n_requests}; -1 marks an empty row)")
    for key in ("step", "depth"):
        _refuse(name, t[key] < 0, lambda at, key=key: f"{_where(key, at)} = {int(t[key][at])} is negative")
    if calib is not None:
        _refuse(name, ~torch.isfinite(calib) | (calib < 0), lambda at: f"{_where('calibration', at)} = "
                f"{float(calib[at])}; counts are finite and non-negative")
        _refuse(name, calib[..., 1] > calib[..., 0],
                lambda at: f"calibration[{at[0]}, {at[1]}] counts more accepted than proposed")
