"""Layout and event wiring of RECAP Studio (the Gradio Blocks).

``build_demo(model_path=None)`` returns the Blocks; ``launch(demo, ...)`` starts it with
the app's CSS. The model is chosen by ``model_path``, else the env var ``RECAP_MODEL``,
else the embedded ``assets/shapes-vlm``; it loads lazily on the first run.

Data flows one way: inputs -> ``app.callbacks`` (a loop over ``recap.iter_steps``)
-> the session's runs (``app.session``) -> views (``app.views``, ``app.figures``).
"""

from __future__ import annotations

import os
from typing import Any

import gradio as gr

import recap
from app.callbacks import make_handlers
from app.components import SafeImage
from app.figures import accepted_length_figure, empty_figure, step_time_figure
from app.session import Session
from app.settings import METHOD_CHOICES, PAPER_URL, Settings, auto_budget_available, load_settings

CSS = """
.recap-error { color: #b91c1c; }
.recap-error:empty { display: none; }
#recap-status p { margin: 0.1em 0; }
"""

HEADER = f"""
# RECAP Studio
Lossless speculative decoding for vision-language models by **prediction recycling**
([paper]({PAPER_URL})). Each step, a drafter proposes a tree of tokens from memories of the
target's own past predictions; the target checks the whole tree in one forward pass and
keeps the longest path it agrees with, plus one token of its own (the *bonus*). The output
is exactly what plain greedy decoding gives, only in fewer steps.
"""


def build_demo(model_path: str | os.PathLike[str] | None = None, settings: Settings | None = None) -> gr.Blocks:
    settings = settings or load_settings(model_path)
    h = make_handlers(settings)
    d = recap.RecapConfig()
    auto_ok = auto_budget_available()

    with gr.Blocks(title="RECAP Studio", analytics_enabled=False) as demo:
        session = gr.State(Session)
        gr.Markdown(HEADER)
        with gr.Tabs() as tabs:
            with gr.Tab("Decode", id="decode"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=1, min_width=320):
                        image = SafeImage(
                            type="filepath",
                            label="Image (upload, paste, or pick an example)",
                            sources=["upload", "clipboard"],
                            height=260,
                            elem_id="recap-image",
                        )
                        prompt = gr.Textbox(
                            label="Prompt",
                            lines=2,
                            max_lines=6,
                            placeholder="Describe the image in detail.",
                            info=f"Up to {settings.max_prompt_chars} characters.",
                            elem_id="recap-prompt",
                        )
                        method = gr.Radio(METHOD_CHOICES, value="recap", label="Method", elem_id="recap-method")
                        max_new = gr.Slider(
                            1, settings.max_new_tokens, value=min(128, settings.max_new_tokens), step=1,
                            label="Max new tokens", elem_id="recap-max-new",
                        )
                        with gr.Row():
                            run_btn = gr.Button("Run", variant="primary", elem_id="recap-run")
                            stop_btn = gr.Button("Stop", variant="stop", elem_id="recap-stop")
                        examples = gr.Gallery(
                            [(e["path"], _example_caption(e)) for e in settings.examples],
                            label="Examples (click one: it fills the image and the prompt)",
                            columns=5, rows=1, height=150, allow_preview=False, object_fit="contain",
                            visible=bool(settings.examples), elem_id="recap-examples", interactive=False,
                        )
                        with gr.Accordion("Advanced settings", open=False):
                            gr.Markdown("Drafter settings (RECAP uses all; Token Recycling and prompt lookup use budget, depth and k).")
                            with gr.Row():
                                budget = gr.Number(d.budget if isinstance(d.budget, int) else 24, label="budget (nodes per tree)",
                                                   precision=0)
                                auto_budget = gr.Checkbox(
                                    False, label="budget: auto", interactive=auto_ok,
                                    info="measure the best budget for this machine" if auto_ok else "not available in this build",
                                )
                            with gr.Row():
                                max_depth = gr.Number(d.max_depth, label="max_depth", precision=0)
                                top_k = gr.Number(d.top_k, label="top_k (k)", precision=0)
                                max_children = gr.Number(d.max_children, label="max_children", precision=0)
                            with gr.Row():
                                spec1 = gr.Number(d.specificity[0], label="specificity s(1): M1")
                                spec2 = gr.Number(d.specificity[1], label="s(2): M2")
                                spec3 = gr.Number(d.specificity[2], label="s(3): M3")
                            with gr.Row():
                                fusion = gr.Dropdown(["entropy", "fixed", "backoff"], value=d.fusion, label="fusion")
                                eps = gr.Number(d.eps, label="eps")
                                depth_discount = gr.Number(d.depth_discount, label="depth_discount")
                            with gr.Row():
                                use_m2 = gr.Checkbox(d.use_m2, label="use_m2")
                                use_m3 = gr.Checkbox(d.use_m3, label="use_m3")
                                suffix = gr.Checkbox(d.suffix, label="suffix matches")
                            with gr.Row():
                                suffix_min_len = gr.Number(d.suffix_min_len, label="suffix_min_len", precision=0)
                                suffix_max_tokens = gr.Number(d.suffix_max_tokens, label="suffix_max_tokens", precision=0)
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
                            memory_method = gr.Radio([("RECAP", "recap"), ("Token Recycling", "tr")], value="recap",
                                                     label="Persistent memory of")
                            memory_md = gr.Markdown("Empty (it fills as you run requests).")
                            with gr.Row():
                                mem_reset = gr.Button("Reset memory", size="sm")
                                mem_save = gr.Button("Download memory", size="sm")
                                mem_upload = gr.UploadButton("Upload memory", file_types=[".safetensors"], size="sm",
                                                             type="filepath")
                            mem_file = gr.File(label="memory file", interactive=False, height=60)
                        with gr.Accordion("Trace files", open=False):
                            gr.Markdown("Download this run's trace as JSON, or upload a trace (e.g. recorded on a GPU) to view it without a model.")
                            trace_file = gr.File(label="trace of the run", interactive=False, height=60)
                            trace_upload = gr.UploadButton("Upload a trace (.json)", file_types=[".json"], size="sm",
                                                           type="filepath")
                    with gr.Column(scale=3, min_width=480):
                        status = gr.Markdown("No run yet. Pick an example or upload an image, type a question and press **Run**.",
                                             elem_id="recap-status")
                        error = gr.Markdown("", elem_classes=["recap-error"], elem_id="recap-error")
                        tree = gr.Plot(empty_figure(), label="Candidate tree of the step", elem_id="recap-tree")
                        step = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False, elem_id="recap-step")
                        text = gr.HighlightedText(
                            label="Output (each token marked by its step: drafted & accepted, or bonus; click a token to see its step)",
                            show_legend=False, show_inline_category=False, combine_adjacent=False, elem_id="recap-output",
                        )
                        with gr.Row():
                            len_chart = gr.Plot(accepted_length_figure(None), label="Accepted length", elem_id="recap-lengths")
                            time_chart = gr.Plot(step_time_figure(None), label="Time per step", elem_id="recap-times")

        examples.select(_pick_example(settings), None, [image, prompt], api_visibility="private")

        main_outputs = [status, error, tree, step, text, len_chart, time_chart]
        advanced = [budget, auto_budget, max_depth, top_k, max_children, spec1, spec2, spec3, fusion, eps, use_m2,
                    use_m3, suffix, suffix_min_len, suffix_max_tokens, depth_discount]
        run_inputs = [session, image, prompt, method, max_new, *advanced]
        decode_kw: dict[str, Any] = {"concurrency_limit": settings.concurrency, "concurrency_id": "decode"}

        run_event = run_btn.click(h["run"], run_inputs, [*main_outputs, trace_file], api_name="run",
                                  trigger_mode="once", **decode_kw)
        prompt.submit(h["run"], run_inputs, [*main_outputs, trace_file], api_visibility="private",
                      trigger_mode="once", **decode_kw)
        mem_inputs = [session, memory_method, top_k]
        run_event.then(h["memory_info"], mem_inputs, memory_md, api_visibility="private")
        stop_btn.click(h["stop"], [session], None, api_name="stop", concurrency_limit=None)
        step.input(h["show_step"], [session, step], main_outputs, api_name="show_step", trigger_mode="always_last")
        text.select(h["select_token"], [session], main_outputs, api_visibility="private")
        trace_upload.upload(h["load_trace"], [session, trace_upload], main_outputs, api_name="load_trace")

        method.change(lambda m: m if m in ("recap", "tr") else gr.skip(), method, memory_method,
                      api_visibility="private")
        memory_method.change(h["memory_info"], mem_inputs, memory_md, api_visibility="private")
        mem_reset.click(h["reset_memory"], mem_inputs, memory_md, api_name="reset_memory")
        mem_save.click(h["save_memory"], mem_inputs, mem_file, api_name="save_memory")
        mem_upload.upload(h["load_memory"], [session, mem_upload, memory_method, top_k], memory_md,
                          api_name="load_memory")
        load_btn.click(h["load_model"], [session, model_box], [model_status, error], api_name="load_model",
                       concurrency_id="decode", concurrency_limit=settings.concurrency)
        demo.load(h["model_status"], [session], model_status, api_visibility="private")

        # API: /decode (image, prompt, method, max new tokens) -> trace JSON string.
        # Its own hidden inputs, so the app (not the components) validates and names what is wrong.
        api_method = gr.Textbox(visible=False, label="method (recap, tr, pld or ar)")
        api_max_new = gr.Number(visible=False, label="max new tokens")
        api_out = gr.Textbox(visible=False, label="trace JSON")
        api_btn = gr.Button(visible=False)
        api_btn.click(h["decode_api"], [session, image, prompt, api_method, api_max_new], api_out, api_name="decode",
                      api_description="Decode one request with default settings; returns the trace as a JSON string "
                      "(recap.DecodeTrace.from_json reads it).", **decode_kw)

        demo.recap_settings = settings  # type: ignore[attr-defined]
        demo.recap_tabs = tabs  # type: ignore[attr-defined]
    return demo


def _example_caption(entry: dict) -> str:
    pair = f"[pair {entry['pair']}] " if entry.get("pair") else ""
    return f"{pair}{entry['prompt']}"


def _pick_example(settings: Settings):
    def pick(evt: gr.SelectData):
        entry = settings.examples[evt.index]
        return entry["path"], entry["prompt"]

    return pick


def launch(demo: gr.Blocks, **kwargs: Any) -> Any:
    """Launch with the app's CSS (Gradio 6 takes css at launch) and a queue."""
    kwargs.setdefault("css", CSS)
    demo.queue(default_concurrency_limit=1)
    return demo.launch(**kwargs)
