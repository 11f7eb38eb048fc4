"""A request checked against this deployment's ceilings (``app.state.settings.Limits``), or a ``UserError``.

The method, prompt and max new tokens of a decode, a memory's k, and the request's image (shrunk
on receipt, bombs refused). The types are checked by ``app.boundary.validation``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image

import recap
from recap.engine.loop import MAX_NEW_TOKENS_LIMIT
from recap.models.inputs import load_image

from ..boundary.errors import UserError
from ..boundary.validation import as_int
from .settings import Settings, method_labels


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
    if not isinstance(image, Image.Image) and (
        not isinstance(image, (str, Path)) or not Path(image).is_file()
    ):
        raise UserError("the image file did not arrive; upload it again")
    try:
        return load_image(image, max_side=settings.limits.max_image_side)
    except recap.InputError as exc:
        raise UserError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"that file is not a usable image: {exc}") from None
