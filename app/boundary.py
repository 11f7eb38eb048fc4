"""The app's boundary: every event handler's errors become one clear sentence, and long jobs are one per visitor.

* ``UserError``: a problem with what the visitor asked for; its message is shown as is.
* ``guarded``: wraps every handler; any exception becomes a ``gr.Error`` sentence (escaped,
  without server paths), never Gradio's generic "the upstream app has raised an exception".
* ``one_job_per_visitor`` (a Gradio validator) and ``job_handler``: a visitor's second long
  job is refused before it enters the queue.
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from app.session import Session
from app.settings import REPO_ROOT, Settings

log = logging.getLogger("recap.app")


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


@contextlib.contextmanager
def _boundary(fn: Callable[..., Any]) -> Iterator[None]:
    """Translate what ``fn`` raises into the ``gr.Error`` a visitor reads."""
    try:
        yield
    except gr.Error:
        raise
    except UserError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing raw reaches a visitor
        raise _unexpected(fn, exc) from None


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Every event handler goes through this: any exception becomes a ``gr.Error`` sentence.

    ``UserError`` keeps its message; anything unexpected (a bug, a RecursionError from a
    hostile file, data out of range sent straight to a hidden event) is logged and named
    in one sentence, never Gradio's generic "the upstream app has raised an exception".
    """
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with _boundary(fn):
                yield from fn(*args, **kwargs)

        gen.recap_guarded = True  # type: ignore[attr-defined]
        return gen

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _boundary(fn):
            return fn(*args, **kwargs)

    call.recap_guarded = True  # type: ignore[attr-defined]
    return call


#: A job still marked queued after this long is taken as lost (its client vanished before it ran).
STALE_JOB_S = 900.0
ALREADY_QUEUED = "a request of yours is already queued or running: wait for it to finish (one at a time per visitor)"


def one_job_per_visitor(*inputs: Any, **named: Any) -> Any:
    """Gradio validator of every long event: refuses a visitor's second job before it enters the queue.

    Runs unqueued when the job is submitted; marks the session (its first input) as having
    a job queued; ``job_handler`` clears the mark when the job ends. Gradio calls it with the
    event's inputs as the handler gets them (``named``: those wired by ``inputs_kwargs``) and
    reads one verdict per input, the positional ones first.
    """
    verdict = [gr.validate(True, "") for _ in range(len(inputs) + len(named))]
    session = inputs[0] if inputs else None
    if isinstance(session, Session):
        with session.queue_lock:
            since = session.queued_since
            if since is not None and time.monotonic() - since < STALE_JOB_S:
                verdict = [gr.validate(False, ALREADY_QUEUED) if i < 2 else v for i, v in enumerate(verdict)]
            else:
                session.queued_since = time.monotonic()
    return verdict[0] if len(verdict) == 1 else verdict  # Gradio takes one output as the value itself


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



def decode_queue(settings: Settings) -> dict[str, Any]:
    """Event options of everything that decodes: one shared queue, ``settings.concurrency`` at once, one job per visitor."""
    return {"concurrency_limit": settings.concurrency, "concurrency_id": "decode", "validator": one_job_per_visitor}
