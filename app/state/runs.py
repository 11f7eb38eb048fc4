"""The runs a session shows: a decode (live, finished, stopped, or loaded from a file), and what tabs last
showed.

A ``Run`` keeps its trace parsed while it is shown and packed (compressed JSON, about a tenth of
the parsed size) otherwise (uploaded traces: nothing writes to them). ``CompareState``,
``GuidedState`` and ``InspectorState`` are what the Compare tab, the guided aliasing demo and the
aliasing inspector last showed.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from recap.trace.format import DecodeTrace

from .aliasing import AliasingState
from .memories import MemorySlot


class Run:
    """One decode shown in the views (live, finished, stopped, or loaded from a file)."""

    def __init__(
        self,
        run_id: int,
        trace: DecodeTrace,
        image_path: str | None = None,
        slot: MemorySlot | None = None,
        source: str = "run",
        label: str = "",
    ) -> None:
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
        """Keep the trace as compressed JSON until it is shown again (uploaded traces: nothing writes to
        them)."""
        if self._trace is not None:
            self._has_steps = bool(self._trace.steps)
            self._packed = self._packed or zlib.compress(self._trace.to_json().encode("utf-8"), 6)
            self._trace = None

    @property
    def packed(self) -> bool:
        return self._trace is None

    def follow(self, trace: DecodeTrace) -> None:
        """A live decode's latest trace: the same object in this process; on ZeroGPU each step's copy from
        the GPU's process (``app.state.gpu_calls``)."""
        if trace is not self._trace:
            self._trace, self._packed = trace, None
            self._has_steps = bool(trace.steps)


@dataclass
class CompareState:
    """The latest comparison (Compare tab): each method's run, and the numbers its API returns."""

    runs: dict[str, Run]  # by method name
    summary: dict[str, Any]  # JSON-ready: what /compare returns (``app.tabs.compare.summarize``)


@dataclass
class GuidedState:
    """The latest guided aliasing demo: image A then image B per method, and the numbers its API returns."""

    runs: dict[str, dict[str, Run]]  # method name -> "A" / "B" -> run
    summary: dict[str, Any]  # JSON-ready: what /guided_demo returns (``app.tabs.aliasing.guided_runs``)


@dataclass
class InspectorState:
    """The rows the aliasing inspector lists: the states shown, of which run (a row's index picks one)."""

    run_id: int
    states: list[AliasingState]
