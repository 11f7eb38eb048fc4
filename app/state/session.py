"""Per-browser-session state.

A ``Session`` lives in a ``gr.State`` (one per browser tab / API client), never at
module level, so visitors never see each other's memories or runs. It holds:

* the persistent 1-token memories (``app.state.memories``: one per model, method and k, each
  with the history of the requests that wrote into it), started from the deployment's warm
  memory when one fits (``start_from_empty`` switches the session to empty memories,
  ``start_from_warm`` back; each session loads its own copy, on its first run; before that,
  ``memory_facts`` says what the memory will start from);
* the runs of this session (``app.state.runs``; the latest one is what the views show), the
  conversation of the Decode view (``app.state.conversation``: each turn's run), and what the
  Compare tab, the guided aliasing demo and the aliasing inspector last showed;
* its long-job gate (``jobs``: one job at a time, a stop flag; ``app.boundary.jobs``);
* its files (``files``: thumbnails and downloads, ``app.state.files``).

It is bounded: at most ``Limits.max_runs`` runs and ``Limits.max_uploaded_traces``
uploaded traces (the oldest are dropped); uploaded traces other than the one on screen
are kept packed. ``close()`` (when the visitor's tab or API client disconnects: ``app.boundary.visitors``
finds it by its session hash) drops everything and deletes its files.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import recap

from ..boundary.jobs import JobGate
from ..boundary.visitors import Visitor
from .conversation import Conversation
from .files import SessionFiles
from .memories import MemoryFacts, MemoryKey, MemorySlot, RequestRecord, WarmStart, warm_slot
from .runs import CompareState, GuidedState, InspectorState, Run
from .settings import Limits, ModelSpec


class Session(Visitor):
    """Everything one visitor has: memories, runs, the current view."""

    def __init__(self, limits: Limits | None = None, warm: WarmStart | None = None,
                 files_root: Path | None = None, start: Callable[[Session], None] | None = None) -> None:
        """``files_root``: where the downloads folder goes (Gradio's cache; None: inside ``tmpdir``);
        ``start``: what a new session shows (``app.state.example.open_session``), run on it last."""
        self._opened = (limits, warm, files_root, start)
        self.limits = limits or Limits()
        self.warm = warm
        self.start_warm = warm is not None  # new memories start from ``warm`` (else empty)
        self.model: ModelSpec | None = None  # None: the deployment's default model
        self.slots: dict[MemoryKey, MemorySlot] = {}
        self.runs: list[Run] = []
        self._current: Run | None = None
        self.view_step: int | None = None  # a step the visitor picked (None: follow the latest)
        self.highlight: tuple[int, int] | None = None  # (step, node) picked in the inspector
        self.jobs = JobGate()  # one long job at a time, and its stop flag
        self.compare: CompareState | None = None
        self.guided: GuidedState | None = None
        self.inspector: InspectorState | None = None
        self.walkthrough: Run | None = None
        self.conversation: Conversation | None = None  # the Decode view's turns (``app.state.conversation``)
        self._ids = itertools.count(1)
        self.files = SessionFiles(files_root)
        if start is not None:
            start(self)

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

    def close(self) -> None:
        """The visitor left: forget memories and runs, delete the session's files."""
        self.jobs.stop.set()
        self.slots.clear()
        self.runs.clear()
        self._current = None
        self.compare = self.guided = self.inspector = None
        self.walkthrough = None
        self.conversation = None
        self.files.remove()

    def reopen(self) -> None:
        """The visitor came back after the close (a reconnect under the same session hash, whose state
        Gradio keeps an hour): a new visitor's session again, in place."""
        self.__init__(*self._opened)  # type: ignore[misc]

    # gr.State deep-copies its initial value; a session is created fresh per visitor.
    def __deepcopy__(self, memo: dict) -> Session:
        return self

    # ------------------------------------------------------------------ memories
    def memory_facts(self, model: str, method: str, k: int) -> MemoryFacts:
        """The memory of ``model``, ``method`` and ``k`` as it is, or as it will start (nothing is made
        here)."""
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
        """Keep the thumbnails of the latest ``max_runs`` requests of a memory (older ones: the prompt
        only)."""
        for request in sorted(slot.requests)[: -self.limits.max_runs]:
            record = slot.requests[request]
            # never the shipped warm thumbnails
            if record.image_path and self.files.private(record.image_path):
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

    @property
    def closed(self) -> bool:
        return self.files.closed
