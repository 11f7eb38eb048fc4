"""What every tab shares: validation, model access, the decode run, errors and output records.

* Validation turns what a visitor sent (UI or API, any type) into checked values, or a
  ``UserError`` whose message names the field; tabs show it as a warning plus the error
  box (UI events) or raise it as ``gr.Error`` (API events).
* ``decode_run`` is the one decode loop of the app: a thin loop over
  ``recap.iter_steps(..., trace=True)`` that keeps the session's memories and history and
  yields the growing ``Run`` after every verification step.
* ``Record`` is the base of the tabs' typed output records: a dataclass whose fields name an
  event's output components. One instance holds the components (the layout), another the
  values a handler returns; ``values.to(ui)`` lines them up for Gradio, and a field left at
  ``KEEP`` leaves its component as it is.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import gradio as gr
from PIL import Image

import recap
from app.session import RequestRecord, Run, Session
from app.settings import MEMORY_METHODS, METHOD_NAMES, Settings, auto_budget_available
from app.targets import MODELS, LoadedModel
from recap.engine import MAX_NEW_TOKENS_LIMIT
from recap.models import load_image

log = logging.getLogger("recap.app")

#: Advanced-settings inputs, in the order the UI (and the /run API) passes them.
CONFIG_FIELDS = (
    "budget",
    "auto_budget",
    "max_depth",
    "top_k",
    "max_children",
    "specificity_1",
    "specificity_2",
    "specificity_3",
    "fusion",
    "eps",
    "use_m2",
    "use_m3",
    "suffix",
    "suffix_min_len",
    "suffix_max_tokens",
    "depth_discount",
)


class UserError(Exception):
    """A problem with what the visitor asked for; the message is shown as is."""


try:  # ZeroGPU Spaces: hold a GPU only while decoding.
    import spaces  # type: ignore[import-not-found]

    on_gpu = spaces.GPU
except ImportError:  # everywhere else: plain functions

    def on_gpu(fn: Any = None, **_: Any) -> Any:
        return fn if fn is not None else (lambda f: f)


def warn(message: str) -> None:
    gr.Warning(message, duration=8)


def decode_queue(settings: Settings) -> dict[str, Any]:
    """Event options of everything that decodes: one shared queue, ``settings.concurrency`` at once."""
    return {"concurrency_limit": settings.concurrency, "concurrency_id": "decode"}


# --------------------------------------------------------------------------- output records


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: A record field left at KEEP leaves its component as it is (``gr.skip()``).
KEEP: Any = _Keep()


@dataclass
class Record:
    """Base of a tab's typed output record (subclasses are dataclasses with ``= KEEP`` defaults)."""

    def outputs(self) -> list[Any]:
        """The components, in field order (call on the instance that holds the layout)."""
        return [getattr(self, f.name) for f in fields(self)]

    def to(self, ui: Record) -> list[Any]:
        """These values in the order of ``ui.outputs()`` (``ui`` is the same record type)."""
        if type(ui) is not type(self):
            raise TypeError(f"{type(self).__name__} values wired to {type(ui).__name__} components")
        return [gr.skip() if getattr(self, f.name) is KEEP else getattr(self, f.name) for f in fields(self)]


# --------------------------------------------------------------------------- validation


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


def as_float(name: str, value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(f):
        raise UserError(f"{name} must be a finite number, got {value!r}")
    return f


def parse_config(values: Sequence[Any]) -> recap.RecapConfig:
    """Advanced settings (in ``CONFIG_FIELDS`` order) -> RecapConfig; UserError names the field."""
    if len(values) != len(CONFIG_FIELDS):
        raise UserError(f"expected {len(CONFIG_FIELDS)} advanced settings, got {len(values)}")
    v = dict(zip(CONFIG_FIELDS, values))
    auto = bool(v["auto_budget"])
    if auto and not auto_budget_available():
        raise UserError("budget 'auto' is not available in this build of the library; set a number of nodes")
    try:
        return recap.RecapConfig(
            budget="auto" if auto else as_int("budget", v["budget"]),
            max_depth=as_int("max_depth", v["max_depth"]),
            top_k=as_int("top_k", v["top_k"]),
            max_children=as_int("max_children", v["max_children"]),
            specificity=(
                as_float("specificity s(1)", v["specificity_1"]),
                as_float("specificity s(2)", v["specificity_2"]),
                as_float("specificity s(3)", v["specificity_3"]),
            ),
            fusion=str(v["fusion"]),
            eps=as_float("eps", v["eps"]),
            use_m2=bool(v["use_m2"]),
            use_m3=bool(v["use_m3"]),
            suffix=bool(v["suffix"]),
            suffix_min_len=as_int("suffix_min_len", v["suffix_min_len"]),
            suffix_max_tokens=as_int("suffix_max_tokens", v["suffix_max_tokens"]),
            depth_discount=as_float("depth_discount", v["depth_discount"]),
        )
    except ValueError as exc:  # RecapConfig names the field
        raise UserError(f"advanced settings: {exc}") from None


def check_request(settings: Settings, prompt: Any, method: Any, max_new_tokens: Any) -> tuple[str, str, int]:
    if method not in METHOD_NAMES:
        raise UserError(f"unknown method {method!r}; choose one of {', '.join(METHOD_NAMES)}")
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError("the prompt is empty: type a question about the image")
    if len(prompt) > settings.max_prompt_chars:
        raise UserError(
            f"the prompt has {len(prompt)} characters; the limit is {settings.max_prompt_chars}"
        )
    n = as_int("max new tokens", max_new_tokens)
    hi = min(settings.max_new_tokens, MAX_NEW_TOKENS_LIMIT)
    if not 1 <= n <= hi:
        raise UserError(f"max new tokens must be between 1 and {hi}, got {n}")
    return prompt, method, n


def open_image(image: Any) -> Image.Image | None:
    """The request's image (None: text only). Huge images are shrunk, bombs refused."""
    if image is None or image == "":
        return None
    if isinstance(image, dict):  # a FileData dict from an API client
        image = image.get("path")
    try:
        return load_image(image)
    except recap.InputError as exc:
        raise UserError(str(exc)) from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise UserError(f"that file is not a usable image: {exc}") from None


# --------------------------------------------------------------------------- model access


def model_name(session: Session, settings: Settings) -> str:
    return session.model_name or settings.default_model


def get_model(name: str, progress: Any = None) -> LoadedModel:
    try:
        return MODELS.get(name, progress)
    except (recap.ModelLoadError, ValueError, OSError) as exc:
        raise UserError(f"the model could not be loaded: {exc}") from None


def session_model(session: Session, settings: Settings) -> LoadedModel:
    return get_model(model_name(session, settings))


# --------------------------------------------------------------------------- the decode loop


def decode_run(
    session: Session,
    settings: Settings,
    image: Image.Image | None,
    prompt: str,
    method: str,
    max_new_tokens: int,
    config: recap.RecapConfig,
    *,
    source: str = "run",
    label: str = "",
    memory_slot: Any = None,
    model: LoadedModel | None = None,
    add: bool = True,
) -> Iterator[Run]:
    """Decode one request; yield the (growing) Run after every verification step.

    Uses the session's persistent memory for the method (or ``memory_slot``), records
    the request in that memory's history, honours the session's stop flag (the trace
    then ends with stop_reason "stopped"), and adds the run to the session (unless
    ``add`` is false).
    """
    model = model or session_model(session, settings)
    target = model.target
    slot = None
    if method in MEMORY_METHODS:
        slot = memory_slot or session.slot(model.name, method, config.top_k, target.vocab_size)
    run_id = session.next_run_id()
    thumb = session.thumbnail(image, run_id)
    iterator = recap.iter_steps(
        target,
        image,
        prompt,
        method=method,
        max_new_tokens=max_new_tokens,
        memory=slot.memory if slot else None,
        config=config,
        trace=True,
    )
    run: Run | None = None
    try:
        while True:
            try:
                rec = model.step(iterator)
            except StopIteration:
                break
            except (recap.InputError, ValueError) as exc:
                raise UserError(str(exc)) from None
            if run is None:
                assert rec.trace is not None
                run = Run(run_id, rec.trace, thumb, slot, source, label or f"run {run_id} · {METHOD_NAMES[method]}")
                if add:
                    session.add_run(run)
                if slot is not None:
                    slot.requests[rec.request] = RequestRecord(
                        rec.request, method, prompt, thumb, rec.trace.image_key, rec.trace, run_id
                    )
            yield run
            if rec.done:
                break
            if session.stop.is_set():
                run.trace.stop_reason = "stopped"
                yield run
                break
    finally:
        iterator.close()


def decode_to_end(session: Session, settings: Settings, image: Image.Image | None, prompt: str, method: str,
                  max_new_tokens: int, config: recap.RecapConfig, **kwargs: Any) -> Run:
    """``decode_run`` to its end; the finished Run."""
    run = None
    for run in decode_run(session, settings, image, prompt, method, max_new_tokens, config, **kwargs):  # noqa: B007
        pass
    if run is None:
        raise UserError("the decode produced no step")
    return run
