"""A model as the app names it: ``ModelSpec``, and the one parser of what names it (the model box,
``RECAP_MODEL`` and each entry of ``RECAP_ALLOWED_MODELS``).

An entry is a local path or a hub id, optionally followed by loading options, as
``recap.load_target`` and the command line take them::

    Qwen/Qwen2.5-VL-7B-Instruct@a1b2c3d dtype=auto device_map=auto
    Qwen/Qwen2.5-VL-7B-Instruct revision=v1.1 dtype=bfloat16

``@REV`` after a hub id (or ``revision=REV``) picks a branch, tag or commit; ``dtype=`` is a torch
dtype's name or ``auto`` (the checkpoint's); ``device_map=`` is transformers' (``auto``,
``balanced``, ``sequential``, ``cpu``, ``cuda:1``). No token: a secret typed into a box would travel
with the page; the server's ``HF_TOKEN`` (huggingface_hub reads it itself) opens gated models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The options an entry may carry, and the dtypes ``dtype=`` takes.
OPTIONS = ("revision", "dtype", "device_map")
DTYPES = ("auto", "float32", "bfloat16", "float16")
_TRAILING_OPTION = re.compile(r"\s+([A-Za-z_]+)=(\S+)\s*$")


@dataclass(frozen=True)
class ModelSpec:
    """A model as visitors see it (``name``) and as the server loads it (``source`` and its loading options,
    never shown)."""

    name: str  # short name, e.g. "shapes-vlm", "qwen2-vl-2b-instruct"
    source: str  # canonical source: an absolute resolved path, or a hub id
    revision: str | None = None  # a hub id's branch, tag or commit (None: its default branch)
    dtype: str | None = None  # a torch dtype's name or "auto" (None: load_target's default)
    device_map: str | None = None  # transformers' device_map (None: one device)

    @property
    def key(self) -> str:
        """One loaded model per key: the source and its options (two revisions of one id are two models)."""
        options = " ".join(f"{k}={v}" for k, v in self.options().items())
        return f"{self.source} {options}".strip()

    def options(self) -> dict[str, str]:
        """The loading options given (``revision``, ``dtype``, ``device_map``)."""
        return {k: v for k in OPTIONS if (v := getattr(self, k)) is not None}

    def load_kwargs(self, device: str | None = None) -> dict[str, Any]:
        """``recap.load_target``'s arguments besides the source; ``device`` (None: its default) unless a
        device map places the layers."""
        out: dict[str, Any] = dict(self.options())
        if device is not None and self.device_map is None:
            out["device"] = device
        return out


def is_local(source: str) -> bool:
    """The library's rule: a hub id is "org/name" (one slash, no leading "/", "." or "~"); anything else is
    a path."""
    return source.startswith(("/", ".", "~")) or source.count("/") > 1 or Path(source).exists()


def canonical_source(source: str) -> str:
    """One spelling per model: local paths resolved (``./a/../a/`` and ``a`` are one model); hub ids as
    typed."""
    source = source.strip()
    if is_local(source):
        return str(Path(source).expanduser().resolve())
    return source


def short_name(source: str) -> str:
    return (Path(source.rstrip("/")).name or source).lower()


def parse_entry(text: str) -> ModelSpec:
    """An entry (``SOURCE[@REV] [revision=R] [dtype=D] [device_map=M]``) as a ModelSpec named by its short
    name; ValueError naming a bad option."""
    text = (text or "").strip()
    options: dict[str, str] = {}
    while (m := _TRAILING_OPTION.search(text)) is not None:
        key, value = m.group(1), m.group(2)
        if key not in OPTIONS:
            raise ValueError(f"unknown model option {key!r}; a model may be followed by {', '.join(OPTIONS)}")
        if key in options:
            raise ValueError(f"the model option {key} is given twice")
        options[key] = value
        text = text[: m.start()].rstrip()
    if not text:
        raise ValueError("choose a model first")
    if "@" in text and not is_local(text):
        text, at = text.rsplit("@", 1)
        if not at or not text:
            raise ValueError("a model's @revision needs a hub id before it and a branch, tag or commit "
                             "after it")
        if options.setdefault("revision", at) != at:
            raise ValueError(f"the model has two revisions: @{at} and revision={options['revision']}")
    if options.get("dtype", "auto") not in DTYPES:
        raise ValueError(f"unknown dtype {options['dtype']!r} for a model; use one of {', '.join(DTYPES)}")
    if "revision" in options and is_local(text):
        raise ValueError("a revision applies to a hub id, not to a local folder")
    source = canonical_source(text)
    return ModelSpec(short_name(source), source, **options)


def model_specs(default: str, allowed: tuple[str, ...]) -> tuple[ModelSpec, ...]:
    """The default model first, then the allowed ones (each an entry); short names made unique."""
    out: list[ModelSpec] = []
    for raw in (default, *allowed):
        spec = parse_entry(raw)
        if any(s.key == spec.key for s in out):
            continue
        name = spec.name
        taken = {s.name for s in out}
        n = 2
        while name in taken:
            name = f"{spec.name}-{n}"
            n += 1
        out.append(ModelSpec(name, spec.source, spec.revision, spec.dtype, spec.device_map))
    return tuple(out)
