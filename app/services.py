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

import functools
import html
import inspect
import logging
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

import recap
from app.session import RequestRecord, Run, Session
from app.settings import MEMORY_METHODS, METHOD_NAMES, REPO_ROOT, ModelSpec, Settings, auto_budget_available
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


def redact(text: str) -> str:
    """``text`` with the server's own folders (the app, temp and home directories) replaced by short tags."""
    roots = sorted({(str(REPO_ROOT), "<app>"), (str(Path(tempfile.gettempdir()).resolve()), "<tmp>"),
                    (tempfile.gettempdir(), "<tmp>"), (str(Path.home()), "~")}, key=lambda r: -len(r[0]))
    for root, tag in roots:
        if len(root) > 1:
            text = text.replace(root, tag)
    return text


def warn(message: str) -> None:
    # Gradio renders a toast's message as HTML: escaped, visitor text in it stays text.
    gr.Warning(html.escape(redact(message), quote=False), duration=8)


def fail(message: str) -> gr.Error:
    """The ``gr.Error`` a handler raises: the sentence (escaped: the modal renders HTML), no path, no traceback."""
    return gr.Error(html.escape(redact(message), quote=False), print_exception=False)


def _unexpected(fn: Callable[..., Any], exc: BaseException) -> gr.Error:
    log.exception("handler %s failed", getattr(fn, "__qualname__", fn))
    if isinstance(exc, RecursionError):
        detail = "the input is nested too deeply"
    elif isinstance(exc, MemoryError):
        detail = "the input is too large for this server"
    else:
        detail = f"{type(exc).__name__}: {str(exc)[:200]}"
    return fail(f"this request could not be handled ({detail}); what you had on screen is unchanged")


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Every event handler goes through this: any exception becomes a ``gr.Error`` sentence.

    ``UserError`` keeps its message; anything unexpected (a bug, a RecursionError from a
    hostile file, data out of range sent straight to a hidden event) is logged and named
    in one sentence, never Gradio's generic "the upstream app has raised an exception".
    """
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except gr.Error:
                raise
            except UserError as exc:
                raise fail(str(exc)) from None
            except Exception as exc:  # noqa: BLE001 - the boundary: nothing raw reaches a visitor
                raise _unexpected(fn, exc) from None

        gen.recap_guarded = True  # type: ignore[attr-defined]
        return gen

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except UserError as exc:
            raise fail(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the boundary: nothing raw reaches a visitor
            raise _unexpected(fn, exc) from None

    call.recap_guarded = True  # type: ignore[attr-defined]
    return call


#: A job still marked queued after this long is taken as lost (its client vanished before it ran).
STALE_JOB_S = 900.0
ALREADY_QUEUED = "a request of yours is already queued or running: wait for it to finish (one at a time per visitor)"


def one_job_per_visitor(*inputs: Any) -> list[Any]:
    """Gradio validator of every long event: refuses a visitor's second job before it enters the queue.

    Runs unqueued when the job is submitted; marks the session (its first input) as having
    a job queued; ``job_handler`` clears the mark when the job ends.
    """
    ok = [gr.validate(True, "") for _ in inputs]
    session = inputs[0] if inputs else None
    if not isinstance(session, Session):
        return ok
    with session.queue_lock:
        since = session.queued_since
        if since is not None and time.monotonic() - since < STALE_JOB_S:
            return [gr.validate(False, ALREADY_QUEUED) if i < 2 else v for i, v in enumerate(ok)]
        session.queued_since = time.monotonic()
    return ok


def _release(args: tuple[Any, ...]) -> None:
    if args and isinstance(args[0], Session):
        args[0].queued_since = None


def job_handler(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A long handler (first input: the session): guarded, clears the visitor's queued mark, GPU on ZeroGPU."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            finally:
                _release(args)

        return on_gpu(guarded(gen))

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            _release(args)

    return on_gpu(guarded(call))


gpu_handler = job_handler  # the name the tabs use for decoding handlers


def decode_queue(settings: Settings) -> dict[str, Any]:
    """Event options of everything that decodes: one shared queue, ``settings.concurrency`` at once, one job per visitor."""
    return {"concurrency_limit": settings.concurrency, "concurrency_id": "decode", "validator": one_job_per_visitor}


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


def parse_config(values: Sequence[Any], settings: Settings | None = None) -> recap.RecapConfig:
    """Advanced settings (in ``CONFIG_FIELDS`` order) -> RecapConfig within the deployment's limits.

    UserError names the field (and the ceiling, for a value over one).
    """
    if len(values) != len(CONFIG_FIELDS):
        raise UserError(f"expected {len(CONFIG_FIELDS)} advanced settings, got {len(values)}")
    v = dict(zip(CONFIG_FIELDS, values))
    auto = bool(v["auto_budget"])
    if auto and not auto_budget_available():
        raise UserError("budget 'auto' is not available in this build of the library; set a number of nodes")
    try:
        config = recap.RecapConfig(
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
    if settings is not None:
        check_limits(config, settings)
    return config


def check_limits(config: recap.RecapConfig, settings: Settings) -> None:
    """The tree's size knobs within this deployment's ceilings (``Limits``)."""
    lim = settings.limits
    budget = lim.max_budget if config.budget == "auto" else int(config.budget)
    for name, value, ceiling in (("budget", budget, lim.max_budget), ("max_depth", config.max_depth, lim.max_depth),
                                 ("max_children", config.max_children, lim.max_children),
                                 ("top_k", config.top_k, lim.max_top_k)):
        if value > ceiling:
            raise UserError(f"advanced settings: {name} is {value}; this deployment allows at most {ceiling}")
    work = budget * config.max_depth * config.max_children
    if work > lim.max_tree_work:
        raise UserError(
            f"advanced settings: budget x max_depth x max_children is {work}; this deployment allows at most "
            f"{lim.max_tree_work} (lower one of them)"
        )


def check_top_k(settings: Settings, value: Any) -> int:
    k = as_int("top_k", value)
    if not 1 <= k <= settings.limits.max_top_k:
        raise UserError(f"top_k must be between 1 and {settings.limits.max_top_k}, got {k}")
    return k


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
    if isinstance(image, Image.Image):
        img = image
    else:
        if not isinstance(image, (str, Path)) or not Path(image).is_file():
            raise UserError("the image file did not arrive; upload it again")
        name = Path(image).name
        side = settings.limits.max_image_side
        try:
            with Image.open(image) as opened:
                if max(opened.size) > side:
                    opened.draft("RGB", (side, side))
                    opened.thumbnail((side, side))
                    img = opened.copy()
                else:
                    opened.load()
                    img = opened.copy()
        except Image.DecompressionBombError as exc:
            raise UserError(f"image {name} is too large to open safely: {exc}") from None
        except (OSError, ValueError, SyntaxError) as exc:
            raise UserError(f"{name} is not a readable image: {exc}") from None
    try:
        return load_image(img)
    except recap.InputError as exc:
        raise UserError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"that file is not a usable image: {exc}") from None


# --------------------------------------------------------------------------- model access


def session_spec(session: Session, settings: Settings) -> ModelSpec:
    return session.model or settings.default_spec


def get_model(spec: ModelSpec, settings: Settings, progress: Any = None) -> LoadedModel:
    """The loaded model; UserError when it cannot load (in public mode without the server's details)."""
    try:
        return MODELS.get(spec, progress)
    except Exception as exc:  # noqa: BLE001 - any loader failure is one clear sentence
        log.warning("loading the model %s (%s) failed: %s", spec.name, spec.source, exc)
        if settings.public:
            raise UserError(f"the model {spec.name} could not be loaded (the server log has the details)") from None
        raise UserError(f"the model could not be loaded: {exc}") from None


def session_model(session: Session, settings: Settings) -> LoadedModel:
    return get_model(session_spec(session, settings), settings)


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
        slot = memory_slot or session.slot(model.spec.source, method, config.top_k, target.vocab_size)
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
                rec.trace.model = model.name  # the short name: traces and views never carry a server path
                run = Run(run_id, rec.trace, thumb, slot, source, label or f"run {run_id} · {METHOD_NAMES[method]}")
                if add:
                    session.add_run(run)
                if slot is not None:
                    slot.requests[rec.request] = RequestRecord(
                        rec.request, method, prompt, thumb, rec.trace.image_key, None, run_id
                    )
                    session.trim_history(slot)
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
