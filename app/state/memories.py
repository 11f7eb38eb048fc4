"""A session's persistent memories: each with the history of the requests that wrote into it, and the warm
start.

One memory per model, method and k (``MemoryKey``): RECAP and Token Recycling each keep their own,
so comparisons stay fair. Each ``MemorySlot`` records, by memory request number, the request that
wrote into it (image thumbnail, prompt, trace), which the aliasing inspector shows as provenance.
A new memory starts from the deployment's warm memory (``WarmStart``: rows decoded from training
scenes, ``recap.shapes.warm_memory``), read once per vocabulary and cloned for every session.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path

import recap
from recap.memory.file import MemoryFileError
from recap.shapes.warm_memory import WarmMemory, load_warm
from recap.trace.format import DecodeTrace

MemoryKey = tuple[str, str, int]  # (model source, method, k)


@dataclass
class RequestRecord:
    """One request that wrote into a memory: what the inspector shows as provenance."""

    request: int
    method: str
    prompt: str
    image_path: str | None  # thumbnail PNG in the session's temp dir (None: text-only / unknown)
    image_key: str | None
    trace: DecodeTrace | None = None
    run_id: int | None = None
    note: str = ""  # where it came from when not a run of this session (e.g. the warm start)

    @property
    def label(self) -> str:
        run = f"run {self.run_id}" if self.run_id is not None else (self.note or "loaded from file")
        return f"request {self.request} ({run}, {self.method})"


@dataclass
class MemorySlot:
    memory: recap.TokenMemory
    requests: dict[int, RequestRecord] = field(default_factory=dict)
    origin: str = "empty"  # what it started from: "empty", "warm" (the shipped warm memory) or "file"


def warm_slot(loaded: WarmMemory, method: str) -> MemorySlot:
    """A slot over a warm memory, its requests' provenance (training scene, thumbnail) in the history."""
    slot = MemorySlot(loaded.memory, origin="warm")
    for r in loaded.requests:
        thumb = loaded.thumbnail_path(r.request)
        slot.requests[r.request] = RequestRecord(r.request, method, r.prompt, str(thumb) if thumb else None,
                                                 r.image_key, note=f"warm start, training scene {r.seed}")
    return slot


@dataclass(frozen=True)
class MemoryFacts:
    """A memory's rows, requests and origin; ``made`` False: not made yet, these are what it will start
    from."""

    filled: int
    vocab_size: int | None  # None: an empty memory not made yet (its model's vocabulary is not known here)
    requests: int
    origin: str  # as ``MemorySlot.origin``
    made: bool


@dataclass(frozen=True)
class WarmStart:
    """Where new memories of one model start from (a ``recap.shapes.warm_memory`` folder).

    The folder is read and checked once per vocabulary size; every new memory (``fresh``)
    is a ``clone()`` of that template, so a visitor's session never re-reads it.
    """

    directory: Path
    model: str  # the model name the warm memory was built with (the deployment's default)
    _templates: dict[int, WarmMemory | None] = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def fresh(self, vocab_size: int) -> WarmMemory | None:
        """A new warm memory for this vocabulary (its own copy), or None when the folder is broken."""
        with self._lock:  # clones are taken under the lock too
            template = self._template(vocab_size)
            return None if template is None else dataclasses.replace(template, memory=template.memory.clone())

    def template(self, vocab_size: int | None = None) -> WarmMemory | None:
        """The shared template (read it, never write it), for this vocabulary or (None) the folder's own."""
        with self._lock:
            return self._template(vocab_size)

    def _template(self, vocab_size: int | None) -> WarmMemory | None:
        if vocab_size not in self._templates:  # one read per vocabulary
            try:
                self._templates[vocab_size] = load_warm(self.directory, vocab_size)
            except MemoryFileError:
                self._templates[vocab_size] = None  # a broken warm folder: start empty rather than fail
        return self._templates[vocab_size]
