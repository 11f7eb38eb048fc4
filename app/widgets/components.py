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
    Here the app validates the file itself (``recap.models.inputs.load_image``) and says what
    is wrong. (An instance-level override: subclassing a component makes Gradio write a
    .pyi stub next to this module.)
    """
    kwargs["type"] = "filepath"
    image = gr.Image(**kwargs)
    image.preprocess = types.MethodType(_path_first_preprocess, image)  # type: ignore[method-assign]
    return image


def _raw_preprocess(self: Any, payload: Any) -> Any:
    return payload


def loose(component: Any) -> Any:
    """The component hands the app what the browser or API client sent, unconverted and unchecked.

    Stock Number / Slider / Radio / Dropdown preprocessing rejects a wrong type or a value
    outside the choices inside Gradio (a generic error, or an HTTP 400 without a message
    when the event has a validator). The app's own validation (``app.boundary.validation``) names the
    field and the allowed range instead.
    """
    component.preprocess = types.MethodType(_raw_preprocess, component)
    return component
