"""ZeroGPU, as Hugging Face Spaces documents it: ``on_gpu(duration=...)`` is ``spaces.GPU`` where the
``spaces`` package imports, and a plain function everywhere else (no Gradio here: the state layer uses it).

What ZeroGPU asks of an app (docs/deploy.md, "ZeroGPU"):

* the models load at start (``zero_gpu()`` tells the app to; a function decorated here gets a GPU
  for its call only);
* each call asks for a duration, here a callable receiving the call's own arguments (its bounds:
  tokens asked, suite size), as ``spaces.GPU(duration=callable)`` accepts;
* a decorated function runs in another process on ZeroGPU: it returns (or yields) its results and
  the caller writes them into the session, since a mutation made there would be lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

try:  # on a Space the package is there; elsewhere (and in the tests, unless they insert a stand-in) not
    import spaces  # type: ignore[import-not-found]
except ImportError:
    spaces = None


def zero_gpu() -> bool:
    """Whether this process runs on ZeroGPU hardware: the ``spaces`` package imports and the Space set
    ``SPACES_ZERO_GPU`` (the package alone is no sign: it installs on any Space that lists it)."""
    return spaces is not None and os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true")


def on_gpu(*, duration: Callable[..., int]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``spaces.GPU(duration=duration)`` where ``spaces`` imports (it is effect-free off ZeroGPU), else the
    function itself. ``duration`` receives the call's arguments and returns whole seconds."""
    if spaces is None:
        return lambda fn: fn
    return spaces.GPU(duration=duration)
