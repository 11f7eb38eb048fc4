"""The Decode tab's side panels: the model, the session's persistent memory, trace files.

* Model: switch this session to another model (a failure keeps the previous one).
* Memory: the RECAP / Token Recycling memory's summary; reset, download, upload.
* Trace files: the finished run's trace to download; an uploaded trace is shown in the
  main view without a model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

import recap
from app.main_view import MainView, error_view, main_view
from app.services import KEEP, Record, UserError, as_int, get_model, model_name, warn
from app.session import Run, Session
from app.settings import MEMORY_METHODS, METHOD_NAMES, Settings
from app.targets import MODELS
from app.views import error_markdown
from recap.trace import DecodeTrace, TraceError

MAX_TRACE_FILE_BYTES = 64 * 1024 * 1024
MAX_MEMORY_FILE_BYTES = 512 * 1024 * 1024


@dataclass
class ModelView(Record):
    status: Any = KEEP
    error: Any = KEEP


@dataclass
class PanelsUI:
    """The panels' components the Decode tab wires."""

    model: ModelView
    model_box: Any
    load_btn: Any
    memory_method: Any
    memory_md: Any
    mem_reset: Any
    mem_save: Any
    mem_upload: Any
    mem_file: Any
    trace_file: Any
    trace_upload: Any
    mem_empty: Any
    mem_warm: Any


def memory_method(method: Any) -> str:
    return method if method in MEMORY_METHODS else "recap"


class DecodePanels:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ------------------------------------------------------------------ memory
    def memory_info(self, session: Session, method: Any, top_k: Any) -> str:
        method = memory_method(method)
        name = model_name(session, self.settings)
        try:
            k = as_int("top_k", top_k)
        except UserError:
            k = recap.RecapConfig().top_k
        slot = session.slots.get((name, method, k))
        head = f"**{METHOD_NAMES[method]}** persistent 1-token memory (k = {k}) for `{name}`"
        warm_here = session.start_warm and session.warm is not None and session.warm.model == name
        if slot is None:
            if warm_here:
                return f"{head}: starts from the shipped **warm memory** (rows from training scenes) on your first run."
            return f"{head}: empty (it fills as you run requests)."
        mem = slot.memory
        origin = {"warm": "It started from the shipped **warm memory** (decoded training scenes, never the examples).",
                  "file": "It was loaded from a file.", "empty": "It started **empty**."}[slot.origin]
        return (
            f"{head}: **{mem.filled}** of {mem.vocab_size} rows filled, written by "
            f"{len(mem.requests)} request(s). {origin} It persists across this session's runs."
        )

    def start_empty(self, session: Session, method: Any, top_k: Any) -> str:
        """One click: this session's memories start (and are now) empty."""
        session.start_from_empty(model_name(session, self.settings))
        gr.Info("Memories are empty now, and new ones start empty.")
        return self.memory_info(session, method, top_k)

    def start_warm(self, session: Session, method: Any, top_k: Any) -> str:
        session.start_from_warm(model_name(session, self.settings))
        gr.Info("Memories start from the shipped warm memory again (from your next run).")
        return self.memory_info(session, method, top_k)

    def reset_memory(self, session: Session, method: Any, top_k: Any) -> str:
        name = model_name(session, self.settings)
        method = memory_method(method)
        session.reset_memory(name, method)
        gr.Info(f"The {METHOD_NAMES[method]} memory is now empty.")
        return self.memory_info(session, method, top_k)

    def save_memory(self, session: Session, method: Any, top_k: Any):
        name = model_name(session, self.settings)
        method = memory_method(method)
        try:
            k = as_int("top_k", top_k)
            model = get_model(name)
        except UserError as exc:
            warn(str(exc))
            return gr.skip()
        slot = session.slot(name, method, k, model.target.vocab_size)
        path = session.file(f"memory_{method}_k{k}.safetensors")
        slot.memory.save(path)
        return str(path)

    def load_memory(self, session: Session, file: Any, method: Any, top_k: Any) -> str:
        """Replace the method's memory with an uploaded one (same vocabulary only)."""
        path = file.get("path") if isinstance(file, dict) else file
        method = memory_method(method)
        if not path:
            return gr.skip()
        name = model_name(session, self.settings)
        try:
            model = get_model(name)
            if os.path.getsize(path) > MAX_MEMORY_FILE_BYTES:
                raise UserError("the memory file is too large")
            mem = recap.TokenMemory.load(path, vocab_size=model.target.vocab_size)
        except (UserError, recap.MemoryFileError, OSError) as exc:
            msg = f"memory unchanged: {exc}"
            warn(msg)
            return self.memory_info(session, method, top_k) + "\n\n" + error_markdown(msg)
        session.replace_memory(name, method, mem)
        msg = f"Loaded a memory with {mem.filled} filled rows into {METHOD_NAMES[method]}."
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
            name = self.settings.check_model(str(name or ""))
            model = get_model(name, progress)
        except (UserError, ValueError) as exc:
            msg = f"model unchanged ({model_name(session, self.settings)}): {exc}"
            warn(msg)
            return ModelView(status=self.model_status(session), error=error_markdown(msg)).to(self.ui.model)
        session.model_name = model.name
        gr.Info(f"Model ready: {model.name}")
        return ModelView(status=self.model_status(session), error="").to(self.ui.model)

    def model_status(self, session: Session) -> str:
        name = model_name(session, self.settings)
        state = "loaded" if MODELS.loaded(name) else "loads on first run"
        return f"Current model: `{name}` ({state})"

    # ------------------------------------------------------------------ trace files
    def load_trace(self, session: Session, file: Any):
        """View an uploaded trace (no model needed); a bad file leaves the view as it is."""
        path = file.get("path") if isinstance(file, dict) else file
        if not path:
            return error_view().to(self.main_ui)
        try:
            size = os.path.getsize(path)
            if size > MAX_TRACE_FILE_BYTES:
                raise TraceError(f"the file is {size / 1e6:.0f} MB; traces up to {MAX_TRACE_FILE_BYTES // 10**6} MB are read")
            trace = DecodeTrace.load(path)
        except (TraceError, OSError) as exc:
            msg = f"that trace file cannot be shown: {exc}"
            warn(msg)
            return error_view(msg).to(self.main_ui)
        run_id = session.next_run_id()
        session.add_run(Run(run_id, trace, None, None, "upload", f"uploaded trace ({Path(path).name})"))
        gr.Info(f"Showing the uploaded trace: {trace.decode_steps} steps, {len(trace.token_ids)} tokens.")
        return main_view(session).to(self.main_ui)

    # ------------------------------------------------------------------ layout and wiring
    def build(self) -> PanelsUI:
        """The three accordions (call inside the Decode tab's left column)."""
        settings = self.settings
        with gr.Accordion("Model", open=False):
            model_status = gr.Markdown(f"Current model: `{settings.default_model}` (loads on first run)")
            model_box = gr.Dropdown(
                settings.model_choices(),
                value=settings.default_model,
                allow_custom_value=not settings.restricted,
                label="Model (local path or hub id)" if not settings.restricted else "Model",
                info=("Any supported model (" + ", ".join(recap.SUPPORTED_FAMILIES) + ")")
                if not settings.restricted else "This deployment allows only these models.",
            )
            load_btn = gr.Button("Load model")
        with gr.Accordion("Memory", open=False):
            method = gr.Radio([("RECAP", "recap"), ("Token Recycling", "tr")], value="recap",
                              label="Persistent memory of")
            memory_md = gr.Markdown("Empty (it fills as you run requests).")
            with gr.Row():
                mem_reset = gr.Button("Reset memory", size="sm")
                mem_save = gr.Button("Download memory", size="sm")
                mem_upload = gr.UploadButton("Upload memory", file_types=[".safetensors"], size="sm", type="filepath")
            with gr.Row():
                mem_empty = gr.Button("Start from an empty memory", size="sm", elem_id="recap-mem-empty")
                mem_warm = gr.Button("Start from the warm memory", size="sm", visible=bool(settings.warm_memory),
                                     elem_id="recap-mem-warm")
            mem_file = gr.File(label="memory file", interactive=False, height=60)
        with gr.Accordion("Trace files", open=False):
            gr.Markdown("Download this run's trace as JSON, or upload a trace (e.g. recorded on a GPU) to view it without a model.")
            trace_file = gr.File(label="trace of the run", interactive=False, height=60)
            trace_upload = gr.UploadButton("Upload a trace (.json)", file_types=[".json"], size="sm", type="filepath")
        self.ui = PanelsUI(
            model=ModelView(status=model_status, error=None), model_box=model_box, load_btn=load_btn,
            memory_method=method, memory_md=memory_md, mem_reset=mem_reset, mem_save=mem_save, mem_upload=mem_upload,
            mem_file=mem_file, trace_file=trace_file, trace_upload=trace_upload, mem_empty=mem_empty, mem_warm=mem_warm,
        )
        return self.ui

    def wire(self, demo: gr.Blocks, session: gr.State, method: Any, top_k: Any, main: MainView, run_event: Any) -> None:
        """Events of the panels; ``main`` is the Decode tab's main view (the error box, where trace uploads show)."""
        ui = self.ui
        self.main_ui = main
        ui.model.error = main.error
        mem_inputs = [session, ui.memory_method, top_k]
        run_event.then(self.memory_info, mem_inputs, ui.memory_md, api_visibility="private")
        ui.trace_upload.upload(self.load_trace, [session, ui.trace_upload], main.outputs(), api_name="load_trace")
        method.change(lambda m: m if m in MEMORY_METHODS else gr.skip(), method, ui.memory_method,
                      api_visibility="private")
        ui.memory_method.change(self.memory_info, mem_inputs, ui.memory_md, api_visibility="private")
        ui.mem_reset.click(self.reset_memory, mem_inputs, ui.memory_md, api_name="reset_memory")
        ui.mem_save.click(self.save_memory, mem_inputs, ui.mem_file, api_name="save_memory")
        ui.mem_empty.click(self.start_empty, mem_inputs, ui.memory_md, api_name="start_empty_memory")
        ui.mem_warm.click(self.start_warm, mem_inputs, ui.memory_md, api_name="start_warm_memory")
        ui.mem_upload.upload(self.load_memory, [session, ui.mem_upload, ui.memory_method, top_k], ui.memory_md,
                             api_name="load_memory")
        ui.load_btn.click(self.load_model, [session, ui.model_box], ui.model.outputs(), api_name="load_model",
                          concurrency_id="decode", concurrency_limit=self.settings.concurrency)
        demo.load(self.model_status, [session], ui.model.status, api_visibility="private")
        demo.load(self.memory_info, mem_inputs, ui.memory_md, api_visibility="private")  # says warm or empty
