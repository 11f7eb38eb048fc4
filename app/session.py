"""Per-browser-session state.

A ``Session`` lives in a ``gr.State`` (one per browser tab / API client), never at
module level, so visitors never see each other's memories or runs. It holds:

* the persistent 1-token memories (one per model, method and k: RECAP and Token
  Recycling each keep their own, so comparisons stay fair), each with the history of
  the requests that wrote into it (by memory request number: image thumbnail, prompt,
  trace), which the aliasing inspector uses to show where a recycled prediction came
  from;
* the runs of this session (the latest one is what the views show);
* a stop flag and a busy lock (a second Run while one is running is ignored).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

import recap
from recap.trace import DecodeTrace

THUMBNAIL_PX = 256
MAX_RUNS = 50  # runs kept per session (oldest dropped first; their memory rows stay)

MemoryKey = tuple[str, str, int]  # (model name, method, k)


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

    @property
    def label(self) -> str:
        run = f"run {self.run_id}" if self.run_id is not None else "loaded from file"
        return f"request {self.request} ({run}, {self.method})"


@dataclass
class MemorySlot:
    memory: recap.TokenMemory
    requests: dict[int, RequestRecord] = field(default_factory=dict)


@dataclass
class Run:
    """One decode shown in the views (live, finished, stopped, or loaded from a file)."""

    run_id: int
    trace: DecodeTrace
    image_path: str | None = None
    slot: MemorySlot | None = None  # the persistent memory it drafted from (tr / recap)
    source: str = "run"  # "run", "upload", "compare", "guided"
    label: str = ""

    @property
    def method(self) -> str:
        return self.trace.method


class Session:
    """Everything one visitor has: memories, runs, the current view."""

    def __init__(self) -> None:
        self.model_name: str | None = None  # None: the deployment's default model
        self.slots: dict[MemoryKey, MemorySlot] = {}
        self.runs: list[Run] = []
        self.current: Run | None = None
        self.view_step: int | None = None  # a step the visitor picked (None: follow the latest)
        self.highlight: tuple[int, int] | None = None  # (step, node) picked in the inspector
        self.stop = threading.Event()
        self.busy = threading.Lock()
        self.compare: dict | None = None  # the latest comparison (see app.compare)
        self.guided: dict | None = None  # the latest guided aliasing demo (see app.inspector)
        self.inspector: dict | None = None  # rows the aliasing inspector shows
        self.walkthrough: Run | None = None
        self._ids = itertools.count(1)
        self.tmpdir = Path(tempfile.mkdtemp(prefix="recap-session-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.tmpdir), True)

    # gr.State deep-copies its initial value; a session is created fresh per visitor.
    def __deepcopy__(self, memo: dict) -> Session:
        return self

    # ------------------------------------------------------------------ memories
    def slot(self, model: str, method: str, k: int, vocab_size: int) -> MemorySlot:
        key = (model, method, k)
        slot = self.slots.get(key)
        if slot is None or slot.memory.vocab_size != vocab_size:
            slot = MemorySlot(recap.TokenMemory(vocab_size, k))
            self.slots[key] = slot
        return slot

    def reset_memory(self, model: str, method: str | None = None) -> int:
        """Forget the memories of ``model`` (one method, or all); returns how many were reset."""
        n = 0
        for key in list(self.slots):
            if key[0] == model and (method is None or key[1] == method):
                slot = self.slots[key]
                slot.memory.reset()
                slot.requests.clear()
                n += 1
        return n

    def replace_memory(self, model: str, method: str, memory: recap.TokenMemory) -> MemorySlot:
        slot = MemorySlot(memory)
        for i, info in enumerate(memory.requests):
            slot.requests[i] = RequestRecord(i, method, info.prompt, None, info.image_key)
        self.slots[(model, method, memory.k)] = slot
        return slot

    # ------------------------------------------------------------------ runs
    def run_by_id(self, run_id: int | None) -> Run | None:
        for run in self.runs:
            if run.run_id == run_id:
                return run
        return None

    def next_run_id(self) -> int:
        return next(self._ids)

    def add_run(self, run: Run) -> Run:
        self.runs.append(run)
        del self.runs[:-MAX_RUNS]
        self.current = run
        self.view_step = None
        self.highlight = None
        return run

    def thumbnail(self, image: Image.Image | None, run_id: int) -> str | None:
        """Save a small copy of a request's image for provenance views."""
        if image is None:
            return None
        thumb = image.copy()
        thumb.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        path = self.tmpdir / f"request_{run_id}.png"
        thumb.save(path)
        return str(path)

    def file(self, name: str) -> Path:
        return self.tmpdir / name
