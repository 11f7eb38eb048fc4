"""What a visitor sent (UI or API, any type) -> a value of the right type, or a ``UserError`` naming the
field.

Inputs reach the handlers unconverted (``app.widgets.components.loose``), so a wrong type is
named here. The checks against this deployment's ceilings are ``app.state.requests``; the
forms (``app.widgets.config_form``, ``app.widgets.sampling_form``) check their fields with the
converters below.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import UserError


def as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise UserError(f"{name} must be a whole number, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{name} must be a whole number, got {value!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise UserError(f"{name} must be a whole number, got {value!r}")
    return int(f)


def as_bool(name: str, value: Any) -> bool:
    """A checkbox value: True or False only (an API caller's 1 or "yes" is refused, not guessed)."""
    if not isinstance(value, bool):
        raise UserError(f"{name} must be true or false, got {value!r}")
    return value


def as_float(name: str, value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(f):
        raise UserError(f"{name} must be a finite number, got {value!r}")
    return f


def event_index(evt: Any) -> int | None:
    """The index a select event carries (a row / token / gallery item), or None when it is missing or
    malformed.

    Handlers take ``gr.EventData`` (not ``gr.SelectData``, which Gradio builds itself and
    breaks on hostile event data before the app sees it) and read the index here.
    """
    data = getattr(evt, "_data", None)
    index = data.get("index") if isinstance(data, dict) else None
    if isinstance(index, (list, tuple)):
        index = index[0] if index else None
    return index if isinstance(index, int) and not isinstance(index, bool) else None
