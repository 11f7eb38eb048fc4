"""Small component variants."""

from __future__ import annotations

import types
from typing import Any

import gradio as gr


def _path_first_preprocess(self: gr.Image, payload: Any) -> Any:
    if payload is None:
        return None
    if getattr(payload, "path", None) and not (getattr(payload, "url", None) or "").startswith("data:"):
        return str(payload.path)
    return gr.Image.preprocess(self, payload)


def SafeImage(**kwargs: Any) -> gr.Image:  # noqa: N802 - reads like a component
    """A ``gr.Image`` (type "filepath") that hands the upload's path to the app unopened.

    The stock component opens every upload with PIL while preprocessing, so a file that
    is not an image, or a decompression bomb, fails inside Gradio with a generic error.
    Here the app validates the file itself (``recap.models.load_image``) and says what
    is wrong. (An instance-level override: subclassing a component makes Gradio write a
    .pyi stub next to this module.)
    """
    kwargs["type"] = "filepath"
    image = gr.Image(**kwargs)
    image.preprocess = types.MethodType(_path_first_preprocess, image)  # type: ignore[method-assign]
    return image
