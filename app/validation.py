"""What a visitor sent (UI or API, any type) -> checked values, or a ``UserError`` naming the field.

Inputs reach the handlers unconverted (``app.components.loose``), so a wrong type or a value
out of range is named here, with the allowed range and this deployment's ceilings
(``app.settings.Limits``). The advanced settings are checked by ``app.config_form`` with the
converters below.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from PIL import Image

import recap
from app.boundary import UserError
from app.settings import Settings, method_labels
from recap.engine.loop import MAX_NEW_TOKENS_LIMIT
from recap.models.inputs import load_image


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
    """The index a select event carries (a row / token / gallery item), or None when it is missing or malformed.

    Handlers take ``gr.EventData`` (not ``gr.SelectData``, which Gradio builds itself and
    breaks on hostile event data before the app sees it) and read the index here.
    """
    data = getattr(evt, "_data", None)
    index = data.get("index") if isinstance(data, dict) else None
    if isinstance(index, (list, tuple)):
        index = index[0] if index else None
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def check_top_k(settings: Settings, value: Any) -> int:
    k = as_int("top_k", value)
    if not 1 <= k <= settings.limits.max_top_k:
        raise UserError(f"top_k must be between 1 and {settings.limits.max_top_k}, got {k}")
    return k


def check_request(settings: Settings, prompt: Any, method: Any, max_new_tokens: Any) -> tuple[str, str, int]:
    names = method_labels()
    if method not in names:
        raise UserError(f"unknown method {method!r}; choose one of {', '.join(names)}")
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError("the prompt is empty: type a question about the image")
    if len(prompt) > settings.max_prompt_chars:
        raise UserError(
            f"the prompt has {len(prompt)} characters; the limit is {settings.max_prompt_chars}"
        )
    n = as_int("max new tokens", max_new_tokens)
    hi = min(settings.limits.max_new_tokens, MAX_NEW_TOKENS_LIMIT)
    if not 1 <= n <= hi:
        raise UserError(f"max new tokens must be between 1 and {hi}, got {n}")
    return prompt, method, n


def open_image(image: Any, settings: Settings) -> Image.Image | None:
    """The request's image (None: text only), shrunk on receipt to ``max_image_side``; bombs refused.

    JPEGs are decoded at a reduced scale (``draft``); other formats are decoded once and
    shrunk at once, so no full-size copy outlives this call.
    """
    if image is None or image == "":
        return None
    if isinstance(image, dict):  # a FileData dict from an API client
        image = image.get("path")
    if not isinstance(image, Image.Image) and (not isinstance(image, (str, Path)) or not Path(image).is_file()):
        raise UserError("the image file did not arrive; upload it again")
    try:
        return load_image(image, max_side=settings.limits.max_image_side)
    except recap.InputError as exc:
        raise UserError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"that file is not a usable image: {exc}") from None
