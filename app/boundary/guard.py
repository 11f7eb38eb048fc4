"""The app's boundary: every event handler's errors become one clear sentence, and long jobs are one per
visitor.

* ``guarded``: wraps every handler; any exception becomes a ``gr.Error`` sentence (escaped,
  without server paths), never Gradio's generic "the upstream app has raised an exception".
* ``long_job``: the one way a long job runs (a decode, a comparison, the guided demo, the
  walkthrough, a benchmark suite): one at a time per visitor (``app.boundary.jobs.JobGate``),
  a refusal or a ``UserError`` shown the same way by every tab. The handler itself holds no GPU: on
  ZeroGPU only the calls of ``app.state.gpu_calls`` do (``app.boundary.gpu``), and the handler writes
  what they return into the session.
* ``one_job_per_visitor`` (a Gradio validator, in ``decode_queue``): a visitor's second long
  job is refused before it enters the queue.
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from .errors import UserError, redact
from .jobs import JobGate
from .visitors import VISITORS

log = logging.getLogger("recap.app")


def warn(message: str) -> None:
    # Gradio renders a toast's message as HTML: escaped, visitor text in it stays text.
    gr.Warning(html.escape(redact(message), quote=False), duration=8)


def fail(message: str) -> gr.Error:
    """The ``gr.Error`` a handler raises: the sentence (escaped: the modal renders HTML), no path, no
    traceback."""
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

    The wrapper also asks Gradio for the event's request (a first parameter annotated ``gr.Request``,
    which Gradio fills and leaves out of the API) and records the visitor's session among the inputs
    under its session hash (``app.boundary.visitors``), for the unload hook. Called from Python
    without a request, it is the handler itself.
    """
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
            args = _arrived(args)
            with _boundary(fn):
                yield from fn(*args, **kwargs)

        return _takes_request(gen, fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        args = _arrived(args)
        with _boundary(fn):
            return fn(*args, **kwargs)

    return _takes_request(call, fn)


REQUEST = "recap_request"  # the parameter Gradio fills with the event's request


def _takes_request(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` declares ``fn``'s parameters after a positional ``gr.Request`` one (how Gradio is asked
    for the request: it inserts it first, and counts it as no input)."""
    signature = inspect.signature(fn)
    request = inspect.Parameter(REQUEST, inspect.Parameter.POSITIONAL_ONLY, annotation=gr.Request)
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[request, *signature.parameters.values()]
    )
    wrapper.__annotations__ = {**getattr(fn, "__annotations__", {}), REQUEST: gr.Request}
    wrapper.recap_guarded = True  # type: ignore[attr-defined]
    return wrapper


def _arrived(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The handler's own inputs; the request Gradio put first (when it did) records the visitor."""
    if args and isinstance(args[0], gr.Request):
        VISITORS.seen(args[0].session_hash, args[1:])
        return args[1:]
    return args


# --------------------------------------------------------------------------- long jobs

ALREADY_QUEUED = (
    "a request of yours is already queued or running: wait for it to finish (one at a time per visitor)"
)
#: What a visitor reads when a long job of theirs is already running (every tab and API: one sentence).
ALREADY_RUNNING = "a request of yours is already running in this session: wait for it to finish or press Stop"


def _gate(args: tuple[Any, ...]) -> JobGate | None:
    """The visitor's gate: a long handler's first input is its session
    (``app.state.session.Session.jobs``)."""
    gate = getattr(args[0], "jobs", None) if args else None
    return gate if isinstance(gate, JobGate) else None


def one_job_per_visitor(*inputs: Any, **named: Any) -> Any:
    """Gradio validator of every long event: refuses a visitor's second job before it enters the queue.

    Runs unqueued when the job is submitted; marks the session (its first input) as having
    a job queued; ``long_job`` clears the mark when the job ends. Gradio calls it with the
    event's inputs as the handler gets them (``named``: those wired by ``inputs_kwargs``) and
    reads one verdict per input, the positional ones first.
    """
    verdict = [gr.validate(True, "") for _ in range(len(inputs) + len(named))]
    gate = _gate(inputs)
    if gate is not None and not gate.enqueue():
        verdict = [gr.validate(False, ALREADY_QUEUED) if i < 2 else v for i, v in enumerate(verdict)]
    return verdict[0] if len(verdict) == 1 else verdict  # Gradio takes one output as the value itself


Shown = Callable[[str], Any]  # a refusal's or a UserError's sentence -> what the handler's outputs show


def long_job(shown: Shown | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The one handler of every long job (first input: the session). Returns a decorator.

    The job runs holding the visitor's busy lock (``JobGate.hold``; a generator holds it for the
    whole stream); a second job of the same visitor is refused, never queued behind the first.
    A refusal and a ``UserError`` the job raises are one sentence each: with ``shown`` (a UI
    event) a warning toast, and the handler returns ``shown(sentence)`` (what its outputs then
    show: the error in the tab's own panel); without (an API event) a ``gr.Error``. Anything
    else is ``guarded``'s. The visitor's queued mark is cleared when the job ends, however it
    ends (a refused duplicate leaves it: it is the running job's). On ZeroGPU the GPU is held by the
    job's GPU calls only (``app.state.gpu_calls``), never by the handler, which touches the session.
    """

    def refuse(message: str) -> Any:
        if shown is None:
            raise fail(message)
        warn(message)
        return shown(message)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
                gate = _gate(args)
                if gate is None:
                    raise UserError("this event needs its session; reload the page")
                ran = False  # a refused duplicate leaves the queued mark: it is the running job's
                try:
                    with gate.hold() as free:
                        if not free:
                            yield refuse(ALREADY_RUNNING)
                            return
                        ran = True
                        try:
                            yield from fn(*args, **kwargs)
                        except UserError as exc:
                            yield refuse(str(exc))
                finally:
                    if ran:
                        gate.ended()

            return guarded(gen)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            gate = _gate(args)
            if gate is None:
                raise UserError("this event needs its session; reload the page")
            ran = False  # as gen's: only the job that ran clears the mark
            try:
                with gate.hold() as free:
                    if not free:
                        return refuse(ALREADY_RUNNING)
                    ran = True
                    try:
                        return fn(*args, **kwargs)
                    except UserError as exc:
                        return refuse(str(exc))
            finally:
                if ran:
                    gate.ended()

        return guarded(call)

    return decorate


def decode_queue(concurrency: int) -> dict[str, Any]:
    """Event options of everything that decodes: one shared queue, ``concurrency`` at once, one job per
    visitor."""
    return {"concurrency_limit": concurrency, "concurrency_id": "decode", "validator": one_job_per_visitor}
