"""Loaded models, shared by every visitor (weights are read-only).

The cache is keyed by the model's path or hub id. Two locks: one guards the cache
(loading), and one per model serialises forward passes, because a model keeps a
little per-request state (Qwen's rope deltas are set during a prefill). Decodes of
different visitors interleave step by step instead of corrupting each other.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import recap

T = TypeVar("T")


@dataclass
class LoadedModel:
    name: str
    target: recap.Target
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def step(self, iterator: Iterator[T]) -> T:
        """Advance a decode iterator by one step while holding the model's lock."""
        with self.lock:
            return next(iterator)


class ModelCache:
    def __init__(self) -> None:
        self._models: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    def get(self, name: str, progress: Any = None) -> LoadedModel:
        """The loaded model ``name``; loads it on first use. Raises recap.ModelLoadError / ValueError."""
        with self._lock:
            hit = self._models.get(name)
            if hit is not None:
                return hit
            if progress is not None:
                progress(0.1, desc=f"loading {name}")
            target = recap.load_target(name)
            loaded = LoadedModel(name=name, target=target)
            self._models[name] = loaded
            if progress is not None:
                progress(1.0, desc="model ready")
            return loaded

    def loaded(self, name: str) -> bool:
        return name in self._models


#: Process-wide cache (read-only weights; safe to share between sessions).
MODELS = ModelCache()
