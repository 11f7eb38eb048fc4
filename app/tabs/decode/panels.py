"""The Decode tab's side panels: the model, the session's persistent memory, trace files.

* Model: switch this session to another model (a failure keeps the previous one).
* Memory: the summary of a memory-keeping method's memory; reset, download, upload.
* Trace files: the finished run's trace to download (gzipped JSON); an uploaded trace (JSON
  or gzipped JSON, ``app.state.trace_files``) is shown in the main view without a model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

import recap
from recap.trace.format import TraceError

from ...boundary.errors import UserError
from ...boundary.guard import guarded, log, warn
from ...boundary.validation import as_int
from ...presenters.text import error_html, error_markdown, md_text, memory_markdown
from ...state.decoding import get_model, session_model, session_spec
from ...state.requests import check_top_k
from ...state.runs import Run
from ...state.session import Session
from ...state.settings import DEFAULT_METHOD, Settings, memory_choices, memory_methods, method_labels
from ...state.steps import telling_step
from ...state.targets import MODELS
from ...state.trace_files import read_trace
from ...widgets.components import loose
from ...widgets.main_view import MainView, error_view, render_run
from ...widgets.records import KEEP, Record


@dataclass
class ModelView(Record):
    """The model panel's status line, and the Decode tab's error box (``wire`` sets its component)."""

    status: gr.Markdown | str = KEEP
    error: gr.HTML | str | None = KEEP


@dataclass
class PanelsUI:
    """The panels' components the Decode tab wires."""

    model: ModelView
    model_box: gr.Dropdown
    load_btn: gr.Button
    memory_method: gr.Radio
    memory_md: gr.Markdown
    mem_reset: gr.Button
    mem_save: gr.Button
    mem_upload: gr.UploadButton
    mem_file: gr.File
    trace_file: gr.File
    trace_upload: gr.UploadButton
    mem_empty: gr.Button
    mem_warm: gr.Button


def memory_method(method: Any) -> str:
    return method if method in memory_methods() else DEFAULT_METHOD.name


def follow_method(method: Any) -> Any:
    """The memory panel follows the Decode method when it has a memory."""
    return method if method in memory_methods() else gr.skip()


def check_memory_k(path: str, max_top_k: int) -> None:
    """A memory file's k within this deployment's ceiling, read from its header (nothing is allocated)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, "pt") as f:
            meta = dict(f.metadata() or {})
    except SafetensorError:  # only what safetensors says of a header; any other failure is a real error
        raise UserError("the memory file is not a safetensors file (a RECAP memory is one: "
                        "TokenMemory.save writes it)") from None
    except OSError as exc:
        raise UserError(f"the memory file cannot be read ({type(exc).__name__})") from None
    try:
        k = int(meta.get("k", ""))
    except ValueError:
        raise UserError(f"the memory file's k is {str(meta.get('k'))[:20]!r}, not a whole number") from None
    if not 1 <= k <= max_top_k:
        raise UserError(
            f"the memory file holds k = {k} predictions per row; this deployment allows 1 to {max_top_k}"
        )


class DecodePanels:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ------------------------------------------------------------------ memory
    def memory_info(self, session: Session, method: Any, top_k: Any) -> str:
        """The memory panel: the method's memory as it is, or (before any run) what it will start from."""
        method = memory_method(method)
        spec = session_spec(session, self.settings)
        try:
            k = as_int("top_k", top_k)
        except UserError:
            k = recap.RecapConfig().top_k
        head = f"**{method_labels()[method]}** persistent 1-token memory (k = {k}) for {md_text(spec.name)}"
        return f"{head}: {memory_markdown(session.memory_facts(spec.source, method, k))}"

    def start_empty(self, session: Session, method: Any, top_k: Any) -> str:
        """One click: this session's memories start (and are now) empty."""
        session.start_from_empty(session_spec(session, self.settings).source)
        gr.Info("Memories are empty now, and new ones start empty.")
        return self.memory_info(session, method, top_k)

    def start_warm(self, session: Session, method: Any, top_k: Any) -> str:
        session.start_from_warm(session_spec(session, self.settings).source)
        gr.Info("Memories start from the shipped warm memory again (from your next run).")
        return self.memory_info(session, method, top_k)

    def reset_memory(self, session: Session, method: Any, top_k: Any) -> str:
        method = memory_method(method)
        session.reset_memory(session_spec(session, self.settings).source, method)
        gr.Info(f"The {method_labels()[method]} memory is now empty.")
        return self.memory_info(session, method, top_k)

    def save_memory(self, session: Session, method: Any, top_k: Any) -> str:
        """The method's memory (k = top_k, at most ``max_top_k``) as a safetensors file; one file per
        session."""
        method = memory_method(method)
        # a UserError becomes gr.Error: nothing allocated, nothing written
        k = check_top_k(self.settings, top_k)
        model = session_model(session, self.settings)
        slot = session.slot(model.spec.source, method, k, model.target.vocab_size)
        path = session.files.download(f"memory_{method}_k{k}.safetensors", replaces="memory_*")
        slot.memory.save(path)
        return str(path)

    def load_memory(self, session: Session, file: Any, method: Any, top_k: Any) -> str:
        """Replace the method's memory with an uploaded one (same vocabulary only)."""
        path = file.get("path") if isinstance(file, dict) else file
        method = memory_method(method)
        if not path:
            return gr.skip()
        lim = self.settings.limits
        try:
            model = session_model(session, self.settings)
            if os.path.getsize(path) > lim.max_upload_mb * 10**6:
                raise UserError(f"the memory file is over {lim.max_upload_mb} MB")
            check_memory_k(path, lim.max_top_k)  # before the library allocates vocab x k
            mem = recap.TokenMemory.load(path, vocab_size=model.target.vocab_size)
        except (UserError, ValueError, OSError) as exc:  # MemoryFileError is a ValueError
            msg = f"memory unchanged: {exc}"
            warn(msg)
            return self.memory_info(session, method, top_k) + "\n\n" + error_markdown(msg)
        except Exception as exc:  # noqa: BLE001 - a hostile file must not reach the session
            log.exception("memory upload failed")
            msg = f"memory unchanged: the file is not a usable RECAP memory ({type(exc).__name__})"
            warn(msg)
            return self.memory_info(session, method, top_k) + "\n\n" + error_markdown(msg)
        session.replace_memory(model.spec.source, method, mem)
        msg = f"Loaded a memory with {mem.filled} filled rows into {method_labels()[method]}."
        try:
            wanted_k = as_int("top_k", top_k)
        except UserError:
            wanted_k = mem.k
        if mem.k != wanted_k:
            msg += f" It holds k = {mem.k} predictions per row: runs use it when top_k = {mem.k}."
        gr.Info(msg)
        return self.memory_info(session, method, mem.k)

    # ------------------------------------------------------------------ model
    def load_model(self, session: Session, name: Any, progress=gr.Progress()):  # noqa: B008
        """Switch this session to another model; a failure keeps the previous one."""
        try:
            spec = self.settings.check_model(str(name or ""))
            model = get_model(spec, self.settings, progress)
        except (UserError, ValueError) as exc:
            msg = f"model unchanged ({session_spec(session, self.settings).name}): {exc}"
            warn(msg)
            return ModelView(status=self.model_status(session), error=error_html(msg)).to(self.ui.model)
        session.model = model.spec
        gr.Info(f"Model ready: {md_text(model.name)}")
        return ModelView(status=self.model_status(session), error="").to(self.ui.model)

    def model_status(self, session: Session) -> str:
        spec = session_spec(session, self.settings)
        state = "loaded" if MODELS.loaded(spec) else "loads on first run"
        return f"Current model: {md_text(spec.name)} ({state})"

    # ------------------------------------------------------------------ trace files
    def load_trace(self, session: Session, file: Any):
        """View an uploaded trace (no model needed); a bad file leaves the session and the view as they
        are."""
        path = file.get("path") if isinstance(file, dict) else file
        if not path or not isinstance(path, str) or not os.path.isfile(path):
            return error_view("the trace file did not arrive; upload it again").to(self.main_ui)
        name = Path(path).name
        try:
            trace = read_trace(path, self.settings.limits)
            run = Run(session.next_run_id(), trace, None, None, "upload", f"uploaded trace ({name})")
            render_run(run)  # drawn before it is kept: a trace whose last step cannot be drawn is refused
            view = render_run(run, telling_step(trace))  # it opens on its most telling step
        except (TraceError, OSError) as exc:
            msg = f"that trace file cannot be shown: {exc}"
            warn(msg)
            return error_view(msg).to(self.main_ui)
        except Exception as exc:  # noqa: BLE001 - any other failure: refused, the session untouched
            log.exception("trace upload failed")
            msg = f"that trace file cannot be shown: it is not a valid RECAP trace ({type(exc).__name__})"
            warn(msg)
            return error_view(msg).to(self.main_ui)
        session.add_run(run)
        session.view_step = telling_step(trace)
        gr.Info(f"Showing the uploaded trace: {trace.decode_steps} steps, {len(trace.token_ids)} tokens.")
        return view.to(self.main_ui)

    # ------------------------------------------------------------------ layout and wiring
    def build(self) -> PanelsUI:
        """The three accordions (call inside the Decode tab's left column)."""
        settings = self.settings
        with gr.Accordion("Model", open=False):
            model_status = gr.Markdown(
                f"Current model: {md_text(settings.default_spec.name)} (loads on first run)"
            )
            model_box = loose(gr.Dropdown(
                settings.model_choices(),
                value=settings.default_spec.name,
                allow_custom_value=not settings.restricted,
                label="Model (local path or hub id)" if not settings.restricted else "Model",
                info=("Any supported model (" + ", ".join(recap.SUPPORTED_FAMILIES) + ")")
                if not settings.restricted else "This deployment allows only these models.",
            ))  # loose: the app answers an unknown name with one sentence, whatever was typed
            load_btn = gr.Button("Load model")
        with gr.Accordion("Memory", open=False):
            method = loose(
                gr.Radio(memory_choices(), value=DEFAULT_METHOD.name, label="Persistent memory of")
            )
            # filled on page load (warm, empty or a file)
            memory_md = gr.Markdown(elem_id="recap-memory-info")
            with gr.Row():
                mem_reset = gr.Button("Reset memory", size="sm")
                mem_save = gr.Button("Download memory", size="sm")
                mem_upload = gr.UploadButton(
                    "Upload memory",
                    file_types=[".safetensors"],
                    size="sm",
                    type="filepath",
                    elem_id="recap-memory-upload",
                )
            with gr.Row():
                mem_empty = gr.Button("Start from an empty memory", size="sm", elem_id="recap-mem-empty")
                mem_warm = gr.Button(
                    "Start from the warm memory",
                    size="sm",
                    visible=bool(settings.warm_memory),
                    elem_id="recap-mem-warm",
                )
            mem_file = gr.File(label="memory file", interactive=False, height=60)
        with gr.Accordion("Trace files", open=False):
            gr.Markdown(
                "Download this run's trace (gzipped JSON: `gunzip` gives the JSON), or upload a trace "
                "(JSON or gzipped, e.g. recorded on a GPU) to view it without a model."
            )
            trace_file = gr.File(label="trace of the run (.json.gz)", interactive=False, height=60,
                                 elem_id="recap-trace-file")
            trace_upload = gr.UploadButton(
                "Upload a trace (.json, .json.gz)",
                file_types=[".json", ".gz"],
                size="sm",
                type="filepath",
                elem_id="recap-trace-upload",
            )
        self.ui = PanelsUI(
            model=ModelView(status=model_status, error=None),
            model_box=model_box,
            load_btn=load_btn,
            memory_method=method,
            memory_md=memory_md,
            mem_reset=mem_reset,
            mem_save=mem_save,
            mem_upload=mem_upload,
            mem_file=mem_file,
            trace_file=trace_file,
            trace_upload=trace_upload,
            mem_empty=mem_empty,
            mem_warm=mem_warm,
        )
        return self.ui

    def wire(
        self, demo: gr.Blocks, session: gr.State, method: Any, top_k: Any, main: MainView, run_event: Any
    ) -> None:
        """Events of the panels; ``main`` is the Decode tab's main view (the error box, where trace uploads
        show)."""
        ui = self.ui
        self.main_ui = main
        ui.model.error = main.error
        mem_inputs = [session, ui.memory_method, top_k]
        run_event.then(guarded(self.memory_info), mem_inputs, ui.memory_md, api_visibility="private")
        ui.trace_upload.upload(
            guarded(self.load_trace), [session, ui.trace_upload], main.outputs(), api_name="load_trace"
        )
        method.change(guarded(follow_method), method, ui.memory_method,
                      api_visibility="private")
        ui.memory_method.change(guarded(self.memory_info), mem_inputs, ui.memory_md, api_visibility="private")
        ui.mem_reset.click(guarded(self.reset_memory), mem_inputs, ui.memory_md, api_name="reset_memory")
        ui.mem_save.click(guarded(self.save_memory), mem_inputs, ui.mem_file, api_name="save_memory")
        ui.mem_upload.upload(
            guarded(self.load_memory),
            [session, ui.mem_upload, ui.memory_method, top_k],
            ui.memory_md,
            api_name="load_memory",
        )
        ui.mem_empty.click(guarded(self.start_empty), mem_inputs, ui.memory_md, api_name="start_empty_memory")
        ui.mem_warm.click(guarded(self.start_warm), mem_inputs, ui.memory_md, api_name="start_warm_memory")
        ui.load_btn.click(
            guarded(self.load_model),
            [session, ui.model_box],
            ui.model.outputs(),
            api_name="load_model",
            concurrency_id="decode",
            concurrency_limit=self.settings.concurrency,
        )
        # page load: cheap, no model work (so no queue slot: concurrency_limit=None)
        demo.load(guarded(self.model_status), [session], ui.model.status, api_visibility="private",
                  concurrency_limit=None)
        demo.load(guarded(self.memory_info), mem_inputs, ui.memory_md, api_visibility="private",
                  concurrency_limit=None)
