"""Event handlers of the main view: run / stop, step navigation, memory and trace files.

Every handler turns bad input into a clear message (``gr.Warning`` plus the error box)
and leaves what is already shown untouched (``gr.skip()``); nothing here raises a
traceback into the UI. API-only handlers raise ``gr.Error`` with the same messages.

The decode itself is ``decode_run``: a thin loop over ``recap.iter_steps(..., trace=True)``
that keeps the session's memories and history; the UI streams what it yields.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

import recap
from app.figures import accepted_length_figure, empty_figure, step_time_figure, tree_figure
from app.session import RequestRecord, Run, Session
from app.settings import MEMORY_METHODS, METHOD_NAMES, Settings, auto_budget_available
from app.targets import MODELS, LoadedModel
from app.views import error_markdown, find_step, highlighted, status_markdown, step_of_token
from recap.engine import MAX_NEW_TOKENS_LIMIT
from recap.models import load_image
from recap.trace import DecodeTrace, TraceError

log = logging.getLogger("recap.app")

MAX_TRACE_FILE_BYTES = 64 * 1024 * 1024
MAX_MEMORY_FILE_BYTES = 512 * 1024 * 1024

#: Advanced-settings inputs, in the order the UI passes them.
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


# --------------------------------------------------------------------------- validation


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise UserError(f"{name} must be a whole number, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a whole number, got {value!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise UserError(f"{name} must be a whole number, got {value!r}")
    return int(f)


def _as_float(name: str, value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
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
            budget="auto" if auto else _as_int("budget", v["budget"]),
            max_depth=_as_int("max_depth", v["max_depth"]),
            top_k=_as_int("top_k", v["top_k"]),
            max_children=_as_int("max_children", v["max_children"]),
            specificity=(
                _as_float("specificity s(1)", v["specificity_1"]),
                _as_float("specificity s(2)", v["specificity_2"]),
                _as_float("specificity s(3)", v["specificity_3"]),
            ),
            fusion=str(v["fusion"]),
            eps=_as_float("eps", v["eps"]),
            use_m2=bool(v["use_m2"]),
            use_m3=bool(v["use_m3"]),
            suffix=bool(v["suffix"]),
            suffix_min_len=_as_int("suffix_min_len", v["suffix_min_len"]),
            suffix_max_tokens=_as_int("suffix_max_tokens", v["suffix_max_tokens"]),
            depth_discount=_as_float("depth_discount", v["depth_discount"]),
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
    n = _as_int("max new tokens", max_new_tokens)
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


def model_name(session: Session, settings: Settings) -> str:
    return session.model_name or settings.default_model


def get_model(name: str, progress: Any = None) -> LoadedModel:
    try:
        return MODELS.get(name, progress)
    except (recap.ModelLoadError, ValueError, OSError) as exc:
        raise UserError(f"the model could not be loaded: {exc}") from None


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
    model = model or get_model(model_name(session, settings))
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


# --------------------------------------------------------------------------- rendering


def shown_step(session: Session) -> int | None:
    run = session.current
    if run is None or not run.trace.steps:
        return None
    if session.view_step is None:
        return run.trace.steps[-1].step
    return min(max(session.view_step, 1), len(run.trace.steps))


def main_view(session: Session, *, running: bool = False, note: str = "", error: str = "") -> tuple:
    """Values of MAIN_OUTPUTS for the session's current run."""
    run = session.current
    trace = run.trace if run else None
    step_no = shown_step(session)
    step = find_step(trace, step_no) if trace is not None else None
    if step is not None:
        hl = session.highlight[1] if session.highlight and session.highlight[0] == step.step else None
        tree = tree_figure(step, highlight=hl)
    else:
        tree = empty_figure()
    n = len(trace.steps) if trace else 0
    slider = gr.Slider(minimum=1, maximum=max(n, 2), value=step_no or 1, step=1, interactive=n > 1)
    value, colors = highlighted(trace, step_no)
    return (
        status_markdown(trace, running=running, source=run.source if run else "run", note=note),
        error_markdown(error),
        tree,
        slider,
        gr.HighlightedText(value=value, color_map=colors),
        accepted_length_figure(trace, current=step_no),
        step_time_figure(trace),
    )


N_MAIN = 7


def skip_main(error: str = "") -> tuple:
    """Leave every view as it is; only show ``error`` (if any) in the error box."""
    return (gr.skip(), error_markdown(error) if error else gr.skip(), *([gr.skip()] * (N_MAIN - 2)))


def trace_file(session: Session, run: Run | None) -> str | None:
    if run is None:
        return None
    path = session.file(f"trace_run{run.run_id}_{run.method}.json")
    run.trace.to_json(path)
    return str(path)


def warn(message: str) -> None:
    gr.Warning(message, duration=8)


# --------------------------------------------------------------------------- handlers


def make_handlers(settings: Settings) -> dict[str, Any]:
    """Handlers bound to the deployment's settings (the UI wires them)."""

    @on_gpu
    def run(session: Session, image: Any, prompt: Any, method: Any, max_new_tokens: Any, *advanced: Any):
        """Decode with the chosen method; streams the tree, text and counters step by step."""
        if not session.busy.acquire(blocking=False):
            warn("A run is already in progress in this session: wait for it or press Stop.")
            yield (*skip_main(), gr.skip())
            return
        try:
            try:
                prompt, method, n = check_request(settings, prompt, method, max_new_tokens)
                config = parse_config(advanced)
                img = open_image(image)
                name = model_name(session, settings)
                if not MODELS.loaded(name):
                    gr.Info(f"Loading the model {name} (first run)…")
                model = get_model(name)
            except UserError as exc:
                warn(str(exc))
                yield (*skip_main(str(exc)), gr.skip())
                return
            note = ""
            if img is None:
                note = "No image: this is a text-only run."
                gr.Info(note)
            session.stop.clear()
            last = last_charts = 0.0
            run_obj = None
            try:
                for run_obj in decode_run(session, settings, img, prompt, method, n, config, model=model):  # noqa: B007
                    now = time.perf_counter()
                    if now - last >= settings.stream_interval:
                        last = now
                        view = main_view(session, running=True, note=note)
                        if now - last_charts >= 4 * settings.stream_interval:
                            last_charts = now  # charts redraw less often: the browser has 3 plots to render
                        else:
                            view = (*view[:5], gr.skip(), gr.skip())
                        yield (*view, gr.skip())
            except UserError as exc:
                warn(str(exc))
                yield (*skip_main(str(exc)), gr.skip())
                return
            except Exception as exc:  # noqa: BLE001 - never a traceback in the UI
                log.exception("decode failed")
                msg = f"the decode failed: {type(exc).__name__}: {exc}"
                warn(msg)
                yield (*skip_main(msg), gr.skip())
                return
            if run_obj is not None and run_obj.trace.stop_reason == "stopped":
                gr.Info("Stopped: the partial run stays on screen.")
            yield (*main_view(session, note=note), trace_file(session, run_obj))
        finally:
            session.stop.clear()
            session.busy.release()

    def stop(session: Session):
        """Ask the running decode of this session to stop after its current step."""
        if session.busy.locked():
            session.stop.set()
            gr.Info("Stopping after the current step…")
        return None

    def show_step(session: Session, step: Any):
        """Show another step of the current run (slider)."""
        run_obj = session.current
        if run_obj is None or not run_obj.trace.steps:
            return skip_main()
        try:
            k = _as_int("step", step)
        except UserError as exc:
            return skip_main(str(exc))
        latest = len(run_obj.trace.steps)
        session.view_step = None if (k >= latest and session.busy.locked()) else min(max(k, 1), latest)
        return main_view(session, running=session.busy.locked())

    def select_token(session: Session, evt: gr.SelectData):
        """Clicking an output token jumps to the step that produced it."""
        run_obj = session.current
        if run_obj is None or evt is None:
            return skip_main()
        index = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        step = step_of_token(run_obj.trace, int(index)) if index is not None else None
        if step is None:
            return skip_main()
        session.view_step = step
        return main_view(session, running=session.busy.locked())

    def load_trace(session: Session, file: Any):
        """View an uploaded trace (no model needed); a bad file leaves the view as it is."""
        path = file.get("path") if isinstance(file, dict) else file
        if not path:
            return skip_main()
        try:
            size = os.path.getsize(path)
            if size > MAX_TRACE_FILE_BYTES:
                raise TraceError(f"the file is {size / 1e6:.0f} MB; traces up to {MAX_TRACE_FILE_BYTES // 10**6} MB are read")
            trace = DecodeTrace.load(path)
        except (TraceError, OSError) as exc:
            msg = f"that trace file cannot be shown: {exc}"
            warn(msg)
            return skip_main(msg)
        run_id = session.next_run_id()
        session.add_run(Run(run_id, trace, None, None, "upload", f"uploaded trace ({Path(path).name})"))
        gr.Info(f"Showing the uploaded trace: {trace.decode_steps} steps, {len(trace.token_ids)} tokens.")
        return main_view(session)

    def memory_method(method: str) -> str:
        return method if method in MEMORY_METHODS else "recap"

    def memory_info(session: Session, method: Any, top_k: Any) -> str:
        method = memory_method(method)
        name = model_name(session, settings)
        try:
            k = _as_int("top_k", top_k)
        except UserError:
            k = recap.RecapConfig().top_k
        slot = session.slots.get((name, method, k))
        head = f"**{METHOD_NAMES[method]}** persistent 1-token memory (k = {k}) for `{name}`"
        if slot is None:
            return f"{head}: empty (it fills as you run requests)."
        mem = slot.memory
        return (
            f"{head}: **{mem.filled}** of {mem.vocab_size} rows filled, written by "
            f"{len(mem.requests)} request(s). It persists across this session's runs."
        )

    def reset_memory(session: Session, method: Any, top_k: Any):
        name = model_name(session, settings)
        method = memory_method(method)
        session.reset_memory(name, method)
        gr.Info(f"The {METHOD_NAMES[method]} memory is now empty.")
        return memory_info(session, method, top_k)

    def save_memory(session: Session, method: Any, top_k: Any):
        name = model_name(session, settings)
        method = memory_method(method)
        try:
            k = _as_int("top_k", top_k)
            model = get_model(name)
        except UserError as exc:
            warn(str(exc))
            return gr.skip()
        slot = session.slot(name, method, k, model.target.vocab_size)
        path = session.file(f"memory_{method}_k{k}.safetensors")
        slot.memory.save(path)
        return str(path)

    def load_memory(session: Session, file: Any, method: Any, top_k: Any):
        """Replace the method's memory with an uploaded one (same vocabulary only)."""
        path = file.get("path") if isinstance(file, dict) else file
        method = memory_method(method)
        if not path:
            return gr.skip()
        name = model_name(session, settings)
        try:
            model = get_model(name)
            if os.path.getsize(path) > MAX_MEMORY_FILE_BYTES:
                raise UserError("the memory file is too large")
            mem = recap.TokenMemory.load(path, vocab_size=model.target.vocab_size)
        except (UserError, recap.MemoryFileError, OSError) as exc:
            msg = f"memory unchanged: {exc}"
            warn(msg)
            return memory_info(session, method, top_k) + "\n\n" + error_markdown(msg)
        session.replace_memory(name, method, mem)
        msg = f"Loaded a memory with {mem.filled} filled rows into {METHOD_NAMES[method]}."
        try:
            wanted_k = _as_int("top_k", top_k)
        except UserError:
            wanted_k = mem.k
        if mem.k != wanted_k:
            msg += f" It holds k = {mem.k} predictions per row: runs use it when top_k = {mem.k}."
        gr.Info(msg)
        return memory_info(session, method, mem.k)

    def load_model(session: Session, name: Any, progress=gr.Progress()):  # noqa: B008
        """Switch this session to another model; a failure keeps the previous one."""
        try:
            name = settings.check_model(str(name or ""))
            model = get_model(name, progress)
        except (UserError, ValueError) as exc:
            msg = f"model unchanged ({model_name(session, settings)}): {exc}"
            warn(msg)
            return model_status(session), error_markdown(msg)
        session.model_name = model.name
        gr.Info(f"Model ready: {model.name}")
        return model_status(session), ""

    def model_status(session: Session) -> str:
        name = model_name(session, settings)
        state = "loaded" if MODELS.loaded(name) else "loads on first run"
        return f"Current model: `{name}` ({state})"

    @on_gpu
    def decode_api(session: Session, image: Any, prompt: Any, method: Any, max_new_tokens: Any) -> str:
        """API: decode one request with default settings; returns the trace as a JSON string."""
        if not session.busy.acquire(blocking=False):
            raise gr.Error("a request is already running in this session", print_exception=False)
        try:
            try:
                prompt, method, n = check_request(settings, prompt, method, max_new_tokens)
                img = open_image(image)
                run_obj = None
                for run_obj in decode_run(session, settings, img, prompt, method, n, recap.RecapConfig()):  # noqa: B007
                    pass
            except UserError as exc:
                raise gr.Error(str(exc), print_exception=False) from None
            assert run_obj is not None
            return run_obj.trace.to_json()
        finally:
            session.busy.release()

    return {
        "run": run,
        "stop": stop,
        "show_step": show_step,
        "select_token": select_token,
        "load_trace": load_trace,
        "memory_info": memory_info,
        "reset_memory": reset_memory,
        "save_memory": save_memory,
        "load_memory": load_memory,
        "load_model": load_model,
        "model_status": model_status,
        "decode_api": decode_api,
    }
