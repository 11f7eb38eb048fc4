"""The shipped example run the Decode tab opens on: a finished run on screen before the first click.

``assets/example-run`` holds the embedded model's decode of the first example exactly as a new
session's first Run gives it (``recap.shapes.example_run``; ``tests/test_example_run.py`` checks
it against a fresh decode, so it cannot go stale). The app opens on it only when its default
model is the embedded one (``Settings.example_run``). Nothing here needs the model: the trace is
read once per process and shared by every session (read only: nothing writes to a shown trace),
and each new session (``open_session``) holds it as its current run, on its most telling step,
until the visitor's own Run replaces it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from recap.memory.file import MemoryFileError
from recap.shapes.example_run import WARM_DIR, read_example
from recap.shapes.warm_memory import load_warm
from recap.trace.format import DecodeTrace, TraceError

from .memories import MemorySlot, RequestRecord, WarmStart, warm_slot
from .runs import Run
from .session import Session
from .settings import EXAMPLES_DIR, Limits, Settings, method_labels
from .steps import telling_step

SOURCE = "example"  # the ``Run.source`` of the shipped run (the views mark it)


# eq=False: hashed by identity (one per process), so views of it can be cached
@dataclass(frozen=True, eq=False)
class ShippedExample:
    """The shipped run and the request it answers (the Decode tab's inputs open on them)."""

    trace: DecodeTrace
    image: str  # the example's image (assets/examples)
    prompt: str
    # the memory it drafted from: the warm memory's requests (thumbnails), and its own
    provenance: MemorySlot | None

    def run(self, run_id: int) -> Run:
        label = f"shipped example · {method_labels().get(self.trace.method, self.trace.method)}"
        return Run(run_id, self.trace, self.image, self.provenance, SOURCE, label)

    @property
    def step(self) -> int | None:
        """The step it opens on (``app.state.steps.telling_step``)."""
        return telling_step(self.trace)


@functools.cache
def _load(directory: str) -> ShippedExample | None:
    """The example of a run folder, read once per process; None when the folder or its image is unusable."""
    try:
        trace, meta = read_example(Path(directory))
        image = EXAMPLES_DIR / str(meta["image"])
        prompt = str(meta["prompt"])
    except (OSError, ValueError, KeyError, TypeError, TraceError):  # a broken asset: open as without one
        return None
    if not image.is_file() or not trace.steps:
        return None
    try:  # it drafted from a fresh copy of assets/warm-memory (recap.shapes.example_run): only read here
        slot: MemorySlot | None = warm_slot(load_warm(WARM_DIR), trace.method)
    except MemoryFileError:
        slot = None  # the views then name its rows' requests without their images
    if slot is not None:
        slot.requests[trace.request] = RequestRecord(
            trace.request, trace.method, prompt, str(image), trace.image_key, note="the shipped example run"
        )
    return ShippedExample(trace, str(image), prompt, slot)


def shipped_example(settings: Settings) -> ShippedExample | None:
    """The example this deployment opens on (None: the default model is not the embedded one, or no asset)."""
    return _load(settings.example_run) if settings.example_run else None


def open_session(limits: Limits, warm: WarmStart | None, example: ShippedExample | None,
                 files_root: Path | None = None) -> Session:
    """A new visitor's session: memories that start warm (``warm``), and the shipped run on screen (again
    when it reopens: ``Session.reopen``)."""
    return Session(limits, warm, files_root, None if example is None else functools.partial(_show, example))


def _show(example: ShippedExample, session: Session) -> None:
    session.add_run(example.run(session.next_run_id()))
    session.view_step = example.step
