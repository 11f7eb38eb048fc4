"""Loaded models, shared by every visitor (weights are read-only).

The cache is keyed by the model's canonical source and loading options (``ModelSpec.key``: a
resolved path or a hub id, its revision, dtype, device map), so one model typed in several spellings
is loaded once. ``ModelCache.device`` is where models load when an entry names no device map (None:
``recap.load_target``'s default; ``"cuda"`` on ZeroGPU, where models load at start). Two locks:
one guards the cache (loading), and one per model serialises forward passes, because a
model keeps a little per-request state (Qwen's rope deltas are set during a prefill).
Decodes of different visitors take turns step by step (a fair lock: in arrival order)
instead of corrupting each other or one visitor keeping the model.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import recap

from .settings import ModelSpec

T = TypeVar("T")


class FairLock:
    """A lock handed out in arrival order.

    ``threading.Lock`` is not fair: a decode that releases it after a step and asks again at
    once usually wins, so one visitor's long decode could keep the model for many steps in a
    row. Here waiting decodes take turns, one step each.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._held = False

    def __enter__(self) -> FairLock:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while self._held or self._queue[0] is not ticket:
                self._cond.wait()
            self._queue.popleft()
            self._held = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def locked(self) -> bool:
        return self._held


@dataclass
class LoadedModel:
    spec: ModelSpec
    target: recap.Target
    lock: FairLock = field(default_factory=FairLock, repr=False)

    @property
    def name(self) -> str:
        """The short name visitors see."""
        return self.spec.name

    def step(self, iterator: Iterator[T]) -> T:
        """Advance a decode iterator by one step while holding the model's lock."""
        with self.lock:
            return next(iterator)


class ModelCache:
    def __init__(self, device: str | None = None) -> None:
        self._models: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()
        self.device = device  # where models without a device map load (None: load_target's default)

    def get(self, spec: ModelSpec, progress: Any = None) -> LoadedModel:
        """The loaded model; loads it on first use. Raises recap.ModelLoadError / ValueError / OSError."""
        with self._lock:
            hit = self._models.get(spec.key)
            if hit is not None:
                return hit
            if progress is not None:
                progress(0.1, desc=f"loading {spec.name}")
            target = recap.load_target(spec.source, **spec.load_kwargs(self.device))
            loaded = LoadedModel(spec=spec, target=target)
            self._models[spec.key] = loaded
            if progress is not None:
                progress(1.0, desc="model ready")
            return loaded

    def loaded(self, spec: ModelSpec) -> bool:
        return spec.key in self._models

    def __len__(self) -> int:
        return len(self._models)


#: Process-wide cache (read-only weights; safe to share between sessions).
MODELS = ModelCache()


#: Where ZeroGPU's models load at start (its ``spaces`` package lets a model move to CUDA outside a GPU call).
ZERO_GPU_DEVICE = "cuda"


def load_at_start(specs: Iterable[ModelSpec], device: str | None = None) -> list[str]:
    """Load every listed model now, on ``device`` (None: ``ZERO_GPU_DEVICE``; ZeroGPU: at start, not inside
    a GPU call, whose process would drop what it loaded); returns the names that failed (logged; a run
    names the error again)."""
    MODELS.device = device or ZERO_GPU_DEVICE
    failed = []
    for spec in specs:
        try:
            MODELS.get(spec)
        except Exception as exc:  # noqa: BLE001 - one model failing must not keep the others from loading
            logging.getLogger("recap.app").warning("loading %s at start failed: %s", spec.name, exc)
            failed.append(spec.name)
    return failed
