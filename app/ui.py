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
from app import bench_tab
from app import compare as cmp
from app import inspector as ins
from app import memory_view as mv
from app import walkthrough as wt
from app.aliasing import VERDICTS
from app.callbacks import make_handlers
from app.components import SafeImage
from app.figures import accepted_length_figure, compare_lengths_figure, empty_figure, step_time_figure
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
    hc, hi, hw, hm = (cmp.make_handlers(settings), ins.make_handlers(settings), wt.make_handlers(settings),
                      mv.make_handlers(settings))
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
                            columns=4, height=210, allow_preview=False, object_fit="contain",
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

            with gr.Tab("Compare", id="compare"):
                gr.Markdown(
                    "Runs **RECAP, Token Recycling, prompt lookup and autoregressive** decoding on the image, prompt, "
                    "max new tokens and advanced settings of the Decode tab. RECAP and Token Recycling each use their own "
                    "session memory. Times are the engine's compute time, one method after the other on this machine."
                )
                compare_btn = gr.Button("Compare all four methods", variant="primary", elem_id="recap-compare-run")
                compare_badge = gr.Markdown(elem_id="recap-compare-badge")
                compare_table = gr.Dataframe(headers=cmp.TABLE_HEADERS, interactive=False, elem_id="recap-compare-table")
                compare_chart = gr.Plot(compare_lengths_figure({}), label="Accepted length per step", elem_id="recap-compare-chart")
                with gr.Row():
                    cmp_a = gr.Dropdown(METHOD_CHOICES, value="recap", label="left tree")
                    cmp_b = gr.Dropdown(METHOD_CHOICES, value="tr", label="right tree")
                    cmp_step = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False)
                with gr.Row():
                    tree_a = gr.Plot(empty_figure("Run a comparison first."), label="left", elem_id="recap-compare-tree-a")
                    tree_b = gr.Plot(empty_figure("Run a comparison first."), label="right", elem_id="recap-compare-tree-b")
                with gr.Accordion("Raw numbers (JSON)", open=False):
                    compare_json = gr.JSON()
            with gr.Tab("Aliasing", id="aliasing") as alias_tab:
                gr.Markdown(
                    "A 1-token memory (M1) remembers what followed each token *the last time*, under whatever image that "
                    "was. Here are the decoding states (expanded tree nodes) of your runs where **M1's prediction differed "
                    "from the target's token**, with where that row came from and whether RECAP's contextual memories "
                    "(M2, M3) fixed it. Choose a row to see it in its tree."
                )
                with gr.Row():
                    guided_btn = gr.Button("Guided demo: image A, then image B (same question)", variant="primary",
                                           elem_id="recap-guided-run")
                guided_md = gr.Markdown(elem_id="recap-guided-summary")
                with gr.Row():
                    alias_run = gr.Dropdown([], label="Run", scale=2)
                    alias_verdict = gr.Dropdown([ins.ALL, *VERDICTS], value=ins.ALL, label="Verdict")
                    alias_path = gr.Checkbox(False, label="accepted paths only")
                    alias_other = gr.Checkbox(False, label="M1 written under another image only")
                alias_summary = gr.Markdown(elem_id="recap-alias-summary")
                alias_table = gr.Dataframe(headers=ins.HEADERS, interactive=False, elem_id="recap-alias-table",
                                           max_height=360)
                with gr.Row():
                    with gr.Column(scale=1, min_width=260):
                        alias_img = gr.Image(label="image of the request that wrote M1's row", interactive=False,
                                             height=200, type="filepath")
                        alias_details = gr.Markdown()
                    with gr.Column(scale=2):
                        alias_tree = gr.Plot(empty_figure("Choose a row."), label="tree of that step",
                                             elem_id="recap-alias-tree")
                with gr.Accordion("Guided demo numbers (JSON)", open=False):
                    guided_json = gr.JSON()
            with gr.Tab("How it works", id="how") as how_tab:
                gr.Markdown(wt.TEXT)
                gr.HTML(wt.legend_markdown())
                walk_btn = gr.Button("Decode the example", elem_id="recap-walk-run")
                walk_md = gr.Markdown()
                walk_step = gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False)
                walk_plot = gr.Plot(empty_figure("Press the button to decode the example."), elem_id="recap-walk-tree")
            with gr.Tab("Memory", id="memory") as memory_tab:
                gr.Markdown("The session's persistent 1-token memory (M1): one top-k row per vocabulary token, "
                            "kept across your runs. Search a token by its text or id to see its whole row.")
                with gr.Row():
                    mv_method = gr.Radio([("RECAP", "recap"), ("Token Recycling", "tr")], value="recap", label="memory of")
                    mv_query = gr.Textbox(label="search a token (text or id)", scale=2, elem_id="recap-memory-query")
                    mv_refresh = gr.Button("Refresh", size="sm")
                mv_stats = gr.Markdown(elem_id="recap-memory-stats")
                with gr.Row():
                    mv_rows = gr.Dataframe(headers=mv.ROW_HEADERS, interactive=False, max_height=420, scale=3)
                    with gr.Column(scale=2):
                        mv_detail_md = gr.Markdown()
                        mv_detail = gr.Dataframe(headers=mv.DETAIL_HEADERS, interactive=False)
            with gr.Tab("Benchmark", id="bench"):
                bench_tab.build_tab(settings, session)

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

        # ---- Compare tab
        cmp_outputs = [compare_badge, compare_table, compare_chart, cmp_step, tree_a, tree_b, compare_json]
        compare_btn.click(hc["compare_ui"], [session, image, prompt, max_new, cmp_a, cmp_b, *advanced], cmp_outputs,
                          api_visibility="private", trigger_mode="once", **decode_kw
                          ).then(hi["sync_main"], [session], main_outputs, api_visibility="private")
        gr.on([cmp_a.change, cmp_b.change, cmp_step.input], hc["compare_trees"], [session, cmp_a, cmp_b, cmp_step],
              [tree_a, tree_b], api_visibility="private", trigger_mode="always_last")
        api_compare_out = gr.Textbox(visible=False, label="comparison JSON")
        api_compare_btn = gr.Button(visible=False)
        api_compare_btn.click(hc["compare_api"], [session, image, prompt, api_max_new], api_compare_out,
                              api_name="compare",
                              api_description="Run recap, tr, pld and ar (default settings) on one request; returns "
                              "JSON: identical (bool), methods.{m}.{tokens, steps, tokens_per_step, seconds, speedup, "
                              "token_ids, accepted_lengths}.", **decode_kw)

        # ---- Aliasing tab
        alias_filters = [alias_verdict, alias_path, alias_other]
        alias_outputs = [alias_run, alias_summary, alias_table]
        alias_tab.select(lambda s, *f: hi["refresh"](s, None, *f), [session, *alias_filters], alias_outputs,
                         api_visibility="private")
        gr.on([alias_run.input, alias_verdict.input, alias_path.input, alias_other.input], hi["refresh"],
              [session, alias_run, *alias_filters], alias_outputs, api_visibility="private")
        alias_table.select(hi["select_state"], [session], [alias_details, alias_img, alias_tree],
                           api_visibility="private").then(hi["sync_main"], [session], main_outputs,
                                                          api_visibility="private")
        guided_btn.click(hi["guided_demo"], [session],
                         [guided_md, alias_run, alias_other, alias_summary, alias_table, guided_json],
                         api_name="guided_demo", trigger_mode="once", **decode_kw
                         ).then(hi["sync_main"], [session], main_outputs, api_visibility="private")

        # ---- How it works tab
        gr.on([how_tab.select, walk_btn.click], hw["build"], [session], [walk_md, walk_step, walk_plot],
              api_visibility="private", trigger_mode="once", **decode_kw)
        walk_step.input(hw["show"], [session, walk_step], walk_plot, api_visibility="private",
                        trigger_mode="always_last")

        # ---- Memory tab
        mv_inputs = [session, mv_method, top_k, mv_query]
        mv_outputs = [mv_stats, mv_rows, mv_detail_md, mv_detail]
        gr.on([memory_tab.select, mv_refresh.click, mv_query.submit, mv_method.change], hm["view"], mv_inputs,
              mv_outputs, api_name="memory_view")

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
    kwargs.setdefault("max_file_size", "600mb")  # memory files of large vocabularies; images are checked by the app
    demo.queue(default_concurrency_limit=1)
    return demo.launch(**kwargs)
