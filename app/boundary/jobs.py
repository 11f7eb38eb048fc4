"""One long job at a time per visitor: the gate a session holds (no Gradio here).

A long job (a decode, a comparison, the guided demo, the walkthrough, a benchmark suite) passes
two marks, both set and cleared by ``app.boundary.guard`` only:

* ``queued_since``: set by the queue's validator when the job is submitted, so a second job is
  refused before it even waits in the queue (``STALE_JOB_S``: a mark left by a client that
  vanished before its job ran is ignored after that long);
* ``busy``: held while the job runs (``hold``), so a job that slips past the validator (an API
  client calling twice at once) is refused, never queued behind the first.

``stop`` asks the running job to stop after its current step (the decode loop reads it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

#: A job still marked queued after this long is taken as lost (its client vanished before it ran).
STALE_JOB_S = 900.0


class JobGate:
    """A visitor's marks: queued, running, asked to stop."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self.stop = threading.Event()
        self._queue_lock = threading.Lock()
        self.queued_since: float | None = None

    @property
    def running(self) -> bool:
        return self.busy.locked()

    def enqueue(self) -> bool:
        """Mark a job queued; False (nothing marked) when one is already queued or running."""
        with self._queue_lock:
            since = self.queued_since
            if since is not None and time.monotonic() - since < STALE_JOB_S:
                return False
            self.queued_since = time.monotonic()
            return True

    @contextlib.contextmanager
    def hold(self) -> Iterator[bool]:
        """Hold the busy lock for one job: yields True, or False (holding nothing) when a job already holds
        it.

        The lock and the stop flag are cleared when the block ends, however it ends (a generator
        handler's block ends when Gradio closes the stream).
        """
        if not self.busy.acquire(blocking=False):
            yield False
            return
        self.stop.clear()
        try:
            yield True
        finally:
            self.stop.clear()
            self.busy.release()

    def ended(self) -> None:
        """The submitted job has ended (run or refused): the visitor may submit the next."""
        self.queued_since = None

    def ask_stop(self) -> bool:
        """Ask the running job to stop after its current step; False when none is running."""
        if not self.running:
            return False
        self.stop.set()
        return True
