"""Per-browser-session state.

A ``Session`` lives in a ``gr.State`` (one per browser tab / API client), never at
module level, so visitors never see each other's memories or runs. It holds:

* the persistent 1-token memories (one per model, method and k: RECAP and Token
  Recycling each keep their own, so comparisons stay fair), each with the history of
  the requests that wrote into it (by memory request number: image thumbnail, prompt,
  trace), which the aliasing inspector uses to show where a recycled prediction came
  from;
* the runs of this session (the latest one is what the views show), and what the
  Compare tab, the guided aliasing demo and the aliasing inspector last showed
  (``CompareState``, ``GuidedState``, ``InspectorState``);
* a stop flag and a busy lock: ``job()`` holds the lock for one run, so a second Run while
  one is running is refused, not queued.

It is bounded: at most ``Limits.max_runs`` runs and ``Limits.max_uploaded_traces``
uploaded traces (the oldest are dropped); uploaded traces other than the one on screen
are kept packed (compressed JSON, about a tenth of the parsed size). ``close()`` (when
the visitor's tab or API client disconnects) drops everything and deletes its files.

A new memory starts from the deployment's warm memory (``WarmStart``: rows decoded from
training scenes, ``recap.shapes.warm_memory``) when one is configured for the model, so a
first visitor's first run already drafts trees; ``start_from_empty`` switches the session
to empty memories (and ``start_from_warm`` back). Each session loads its own copy, on its
first run; before that, ``memory_facts`` says what the memory will start from.

Downloads (``download``) go to a folder of their own in Gradio's cache (``files_root``), which
Gradio serves without a copy: each is on disk once. Its name is random (Gradio serves anything
in its cache by path); private files (request thumbnails) stay in ``tmpdir``, outside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import secrets
import shutil
import tempfile
import threading
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

import recap
from app.aliasing import AliasingState
from app.settings import Limits, ModelSpec
from recap.memory.file import MemoryFileError
from recap.shapes.warm_memory import WarmMemory, load_warm
from recap.trace.format import DecodeTrace

THUMBNAIL_PX = 256

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
    """A memory's rows, requests and origin; ``made`` False: not made yet, these are what it will start from."""

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


class Run:
    """One decode shown in the views (live, finished, stopped, or loaded from a file)."""

    def __init__(self, run_id: int, trace: DecodeTrace, image_path: str | None = None, slot: MemorySlot | None = None,
                 source: str = "run", label: str = "") -> None:
        self.run_id = run_id
        self._trace: DecodeTrace | None = trace
        self._packed: bytes | None = None
        self.image_path = image_path  # thumbnail of the request's image
        self.slot = slot  # the persistent memory it drafted from (tr / recap)
        self.source = source  # "run", "upload", "compare", "guided", "walkthrough"
        self.label = label
        self.method = trace.method
        self._has_steps = bool(trace.steps)

    @property
    def trace(self) -> DecodeTrace:
        if self._trace is None:
            assert self._packed is not None
            self._trace = DecodeTrace.from_json(zlib.decompress(self._packed))
        return self._trace

    @property
    def has_steps(self) -> bool:
        return bool(self._trace.steps) if self._trace is not None else self._has_steps

    def pack(self) -> None:
        """Keep the trace as compressed JSON until it is shown again (uploaded traces: nothing writes to them)."""
        if self._trace is not None:
            self._has_steps = bool(self._trace.steps)
            self._packed = self._packed or zlib.compress(self._trace.to_json().encode("utf-8"), 6)
            self._trace = None

    @property
    def packed(self) -> bool:
        return self._trace is None


@dataclass
class CompareState:
    """The latest comparison (Compare tab): each method's run, and the numbers its API returns."""

    runs: dict[str, Run]  # by method name
    summary: dict[str, Any]  # JSON-ready: what /compare returns (``app.compare_tab.summarize``)


@dataclass
class GuidedState:
    """The latest guided aliasing demo: image A then image B per method, and the numbers its API returns."""

    runs: dict[str, dict[str, Run]]  # method name -> "A" / "B" -> run
    summary: dict[str, Any]  # JSON-ready: what /guided_demo returns (``app.aliasing_tab.guided_runs``)


@dataclass
class InspectorState:
    """The rows the aliasing inspector lists: the states shown, of which run (a row's index picks one)."""

    run_id: int
    states: list[AliasingState]


class Session:
    """Everything one visitor has: memories, runs, the current view."""

    def __init__(self, limits: Limits | None = None, warm: WarmStart | None = None,
                 files_root: Path | None = None) -> None:
        """``files_root``: where the downloads folder goes (Gradio's cache; None: inside ``tmpdir``)."""
        self.limits = limits or Limits()
        self.warm = warm
        self.start_warm = warm is not None  # new memories start from ``warm`` (else empty)
        self.model: ModelSpec | None = None  # None: the deployment's default model
        self.slots: dict[MemoryKey, MemorySlot] = {}
        self.runs: list[Run] = []
        self._current: Run | None = None
        self.view_step: int | None = None  # a step the visitor picked (None: follow the latest)
        self.highlight: tuple[int, int] | None = None  # (step, node) picked in the inspector
        self.stop = threading.Event()
        self.busy = threading.Lock()
        self.queue_lock = threading.Lock()
        self.queued_since: float | None = None  # a long job of this visitor is queued or running (see services)
        self.compare: CompareState | None = None
        self.guided: GuidedState | None = None
        self.inspector: InspectorState | None = None
        self.walkthrough: Run | None = None
        self._ids = itertools.count(1)
        self.closed = False
        self.tmpdir = Path(tempfile.mkdtemp(prefix="recap-session-"))
        root = files_root if files_root is not None else self.tmpdir
        self.downloads = root / f"recap-{secrets.token_hex(16)}"  # made on the first download
        self._finalizer = weakref.finalize(self, _remove, (str(self.tmpdir), str(self.downloads)))

    @property
    def current(self) -> Run | None:
        return self._current

    @current.setter
    def current(self, run: Run | None) -> None:
        """The run the views show; the previous one, if it was an upload, is packed again."""
        previous = self._current
        self._current = run
        if previous is not None and previous is not run and previous.source == "upload":
            previous.pack()

    @contextlib.contextmanager
    def job(self) -> Iterator[bool]:
        """Hold the busy lock for one run: yields True, or False (holding nothing) when a run already holds it.

        ``with session.job() as free: if not free: <refuse>``; the lock is released when the block
        ends, however it ends (a generator handler's block ends when Gradio closes the stream).
        """
        if not self.busy.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            self.busy.release()

    def close(self) -> None:
        """The visitor left: forget memories and runs, delete the session's files."""
        self.closed = True
        self.stop.set()
        self.slots.clear()
        self.runs.clear()
        self._current = None
        self.compare = self.guided = self.inspector = None
        self.walkthrough = None
        self._finalizer()

    # gr.State deep-copies its initial value; a session is created fresh per visitor.
    def __deepcopy__(self, memo: dict) -> Session:
        return self

    # ------------------------------------------------------------------ memories
    def memory_facts(self, model: str, method: str, k: int) -> MemoryFacts:
        """The memory of ``model``, ``method`` and ``k`` as it is, or as it will start (nothing is made here)."""
        slot = self.slots.get((model, method, k))
        if slot is not None:
            mem = slot.memory
            return MemoryFacts(mem.filled, mem.vocab_size, len(mem.requests), slot.origin, made=True)
        warm = self.warm
        template = warm.template() if self.start_warm and warm is not None and model == warm.model else None
        if template is not None and template.memory.k == k:
            mem = template.memory
            return MemoryFacts(mem.filled, mem.vocab_size, len(mem.requests), "warm", made=False)
        return MemoryFacts(0, None, 0, "empty", made=False)

    def slot(self, model: str, method: str, k: int, vocab_size: int) -> MemorySlot:
        key = (model, method, k)
        slot = self.slots.get(key)
        if slot is None or slot.memory.vocab_size != vocab_size:
            slot = self._new_slot(model, method, k, vocab_size)
            self.slots[key] = slot
        return slot

    def _new_slot(self, model: str, method: str, k: int, vocab_size: int) -> MemorySlot:
        """A fresh memory: a copy of the warm memory when it fits this model and k, else empty."""
        warm = self.warm
        if self.start_warm and warm is not None and model == warm.model:
            loaded = warm.fresh(vocab_size)
            if loaded is not None and loaded.memory.k == k:
                return warm_slot(loaded, method)
        return MemorySlot(recap.TokenMemory(vocab_size, k))

    def start_from_empty(self, model: str) -> int:
        """New memories of this session start empty; this model's memories are emptied now."""
        self.start_warm = False
        return self.reset_memory(model)

    def start_from_warm(self, model: str) -> int:
        """New memories start from the warm memory again; this model's are replaced now."""
        self.start_warm = self.warm is not None
        dropped = [key for key in self.slots if key[0] == model]
        for key in dropped:
            del self.slots[key]
        return len(dropped)

    def reset_memory(self, model: str, method: str | None = None) -> int:
        """Forget the memories of ``model`` (one method, or all); returns how many were reset."""
        n = 0
        for key in list(self.slots):
            if key[0] == model and (method is None or key[1] == method):
                slot = self.slots[key]
                slot.memory.reset()
                slot.requests.clear()
                slot.origin = "empty"
                n += 1
        return n

    def trim_history(self, slot: MemorySlot) -> None:
        """Keep the thumbnails of the latest ``max_runs`` requests of a memory (older ones: the prompt only)."""
        for request in sorted(slot.requests)[: -self.limits.max_runs]:
            record = slot.requests[request]
            if record.image_path and Path(record.image_path).parent == self.tmpdir:  # never the shipped warm thumbnails
                Path(record.image_path).unlink(missing_ok=True)
                record.image_path = None
            record.trace = None

    def replace_memory(self, model: str, method: str, memory: recap.TokenMemory) -> MemorySlot:
        slot = MemorySlot(memory, origin="file")
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
        uploads = [r for r in self.runs if r.source == "upload"]
        for old in uploads[: -self.limits.max_uploaded_traces]:
            self.runs.remove(old)
        del self.runs[: -self.limits.max_runs]
        self.current = run
        self.view_step = None
        self.highlight = None
        return run

    def thumbnail(self, image: Image.Image | None, run_id: int) -> str | None:
        """Save a small copy of a request's image for provenance views."""
        if image is None or self.closed:
            return None
        thumb = image.copy()
        thumb.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        path = self.tmpdir / f"request_{run_id}.png"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        thumb.save(path)
        return str(path)

    def download(self, name: str, replaces: str) -> Path:
        """A path for a file handed to the visitor; the earlier downloads matching the glob ``replaces``
        are deleted first (one download of each kind per session: a session's files stay few)."""
        if self.closed:
            raise RuntimeError("this session has ended: reload the page")
        self.downloads.mkdir(parents=True, exist_ok=True)
        for old in self.downloads.glob(replaces):
            old.unlink(missing_ok=True)
        return self.downloads / name


def _remove(folders: tuple[str, ...]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
