"""The compiled hot path's switch: numba kernels when numba is installed, the pure-Python reference else.

Two implementations of the memories' write path and of RECAP's drafting exist side by side:

* the **reference**: plain Python over ``Entry`` objects and dicts (``recap.memory.store``,
  ``recap.drafting.tree``, ``recap.memory.fusion``), the definition of what is drafted;
* the **kernels**: the same algorithms over flat preallocated arrays, one compiled call per
  step for the draft and one for the update (``recap.memory.rows``, ``flatwrite``, ``flatfuse``;
  ``recap.drafting.fastdraft``, ``fasttr``, ``fastupdate``, and ``fastglue``, which hands their
  results to the rest of the library as the reference's objects).

Both produce the same trees, scores, fused probabilities and memory rows, bit for bit (the
tests run both; ``scripts/tree_digest.py`` digests agree). Which one a request uses is fixed
when its ``RequestMemory`` is made: ``enabled()`` then. ``RECAP_KERNELS=0`` in the environment
turns the kernels off for the process; ``use_kernels(False)`` does for a block (tests).

numba compiles each kernel once per machine and caches the machine code next to the module
(``cache=True``; ``NUMBA_CACHE_DIR`` moves it; without a writable place it compiles per
process). ``recap.drafting.fastglue`` runs every kernel once when it is imported (``warm``), so
the first request pays nothing: the cost (about 0.4 s from the cache, some seconds to compile)
is paid where the engine is imported, i.e. when a model is loaded. Without numba everything
runs the reference.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["AVAILABLE", "enabled", "njit", "plain_sum", "use_kernels"]

F = TypeVar("F", bound=Callable[..., Any])

try:  # numba is optional: without it the reference path runs, only slower
    import numba as _numba
except ImportError:  # pragma: no cover - exercised where numba is absent
    _numba = None

#: Whether numba is importable here.
AVAILABLE: bool = _numba is not None
_state = {"on": AVAILABLE and os.environ.get("RECAP_KERNELS", "1") != "0"}


def enabled() -> bool:
    """Whether new request memories (and their drafters) use the compiled kernels."""
    return _state["on"]


@contextmanager
def use_kernels(on: bool) -> Iterator[None]:
    """Within the block, new request memories use the kernels (``on``) or the reference path.

    Asking for the kernels where numba is absent raises ``RuntimeError``.
    """
    if on and not AVAILABLE:
        raise RuntimeError("the compiled kernels need numba (pip install numba)")
    before = _state["on"]
    _state["on"] = on
    try:
        yield
    finally:
        _state["on"] = before


def njit(fn: F) -> F:
    """numba's ``njit`` with an on-disk cache, or the function itself where numba is absent (never
    called then: ``enabled()`` is False). No fast-math, so float results are IEEE's, as Python's;
    the GIL is kept, so two threads never write one memory's arrays at once (as with the dicts)."""
    if _numba is None:  # pragma: no cover
        return fn
    try:
        return _numba.njit(cache=True)(fn)  # type: ignore[no-any-return]
    except RuntimeError:  # pragma: no cover - no writable cache location: compile in each process
        return _numba.njit(fn)  # type: ignore[no-any-return]


def plain_sum(values: Iterable[float]) -> float:
    """``sum(values)`` added left to right, as on Python <= 3.11 and in the kernels (from 3.12,
    ``sum`` of floats compensates rounding: the reference path must not depend on the version)."""
    total = 0.0
    for v in values:
        total += v
    return total
