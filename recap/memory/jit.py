"""numba's ``njit`` for the hot path: the one implementation of drafting and of the memory update.

The memories are flat arrays (``recap.memory.rows``) and every algorithm over them (filing rows,
fusion, best-first search, Token Recycling's fill, the calibration counts) is a kernel decorated
here. numba is a hard dependency. With ``NUMBA_DISABLE_JIT=1`` the same source runs as plain
Python (slow, but the same results: the fallback, and what a test runs the lossless suite on).

Kernels compile on first call (``cache=True``: the machine code is kept next to the module, or
under ``NUMBA_CACHE_DIR``), never at import; ``recap.drafting.warm`` compiles them in a
background thread when a model is loaded. No fast-math, so float results are IEEE's, and the GIL
is kept, so two threads never write one memory's arrays at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba

__all__ = ["njit"]

F = TypeVar("F", bound=Callable[..., Any])


def njit(fn: F) -> F:
    """``numba.njit`` with the on-disk cache (per process where no cache location is writable)."""
    try:
        return numba.njit(cache=True)(fn)  # type: ignore[no-any-return]
    except RuntimeError:  # pragma: no cover - no writable cache location
        return numba.njit(fn)  # type: ignore[no-any-return]
