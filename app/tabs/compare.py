"""Compare tab: the same request with every method, side by side.

Each method drafts from its own session memory (the persistent memories of the methods that
keep one are separate), and every method's output must be token-identical (the engine
is lossless): a badge says so, loudly when not. Timing is the engine's compute time
(prefill + draft + verify + update), measured one method after the other on this machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

import recap
import recap.methods

from ..boundary.guard import decode_queue, guarded, long_job
from ..presenters.acceptance import trace_stats
from ..presenters.charts import compare_lengths_figure
from ..presenters.compare_figures import method_figures
from ..presenters.text import compute_seconds, error_markdown, listed, sampling_summary
from ..presenters.tree import drafted_text, empty_figure, tree_figure
from ..state.decoding import OFF, Sampling, decode_to_end, session_model
from ..state.requests import check_request, open_image
from ..state.runs import CompareState, Run
from ..state.session import Session
from ..state.settings import (
    DEFAULT_METHOD,
    REFERENCE_METHOD,
    Settings,
    app_methods,
    method_choices,
    method_labels,
)
from ..state.steps import find_step, telling_step
from ..widgets.components import loose
from ..widgets.config_form import SESSION_CONFIG, parse_config
from ..widgets.main_view import MainView, main_view
from ..widgets.records import KEEP, Record
from ..widgets.sampling_form import build_widgets as build_sampling
from ..widgets.sampling_form import parse_sampling, split
from .compare_precision import Verdict, precision_verdicts
from .decode.tab import DecodeInputs

REF = REFERENCE_METHOD.name
TABLE_HEADERS = [
    "method",
    "tokens",
    "steps",
    "tokens / step",
    "time (s)",
    "tokens / s",
    f"speedup over {REF}",
]


COMPARE_SAMPLING = (
    "Sample to see losslessness under sampling: every method decodes with the **same seed**, each from a "
    "generator "
    "of its own, so the target makes the same draws for every method and every output is the same text. Each "
    "token is a draw from the model's distribution after the exact text before it; a drafted token is kept "
    "only "
    "when the draw is that token, so the drafter changes how many tokens a step yields, never which."
)


def table_order() -> tuple[str, ...]:
    """The table's rows: every registered method, richest first."""
    return tuple(m.name for m in app_methods())


def run_order() -> tuple[str, ...]:
    """The decoding order: the reference first (every other method is checked against it), then registry
    order."""
    return (REF, *(m.name for m in recap.methods.registered() if m.name != REF))


def run_all(session: Session, settings: Settings, image: Any, prompt: Any, max_new_tokens: Any, *,
            config: recap.RecapConfig, progress: Any = None, sampling: Sampling = OFF) -> CompareState:
    """Decode the request with every method (the reference first); the session's new comparison.

    Every method draws with ``sampling``'s seed from a generator of its own, so under sampling
    they all make the same draws: the same tokens, as the badge checks.
    """
    prompt, _, n = check_request(settings, prompt, REF, max_new_tokens)
    img = open_image(image, settings)
    model = session_model(session, settings)
    runs: dict[str, Run] = {}
    order, labels = run_order(), method_labels()
    for i, method in enumerate(order):
        if progress is not None:
            progress(i / len(order), desc=f"decoding with {labels[method]}")
        runs[method] = decode_to_end(session, settings, img, prompt, method, n, config=config, model=model,
                                     source="compare", label=f"compare · {labels[method]}", sampling=sampling)
    verdicts = precision_verdicts(model, img, prompt, runs, REF)  # bf16 / fp16: a tie or an error
    session.compare = CompareState(runs, summarize(runs, verdicts))
    session.current = runs[DEFAULT_METHOD.name]
    session.view_step = telling_step(session.current.trace)  # the Decode view opens on its most telling step
    return session.compare


def summarize(runs: dict[str, Run], verdicts: dict[str, Verdict] | None = None) -> dict[str, Any]:
    """Numbers of a comparison (what the table, the badge and the API show); ``verdicts``: bf16 / fp16
    differences from the reference checked as ties or errors (``app.tabs.compare_precision``)."""
    ref = runs[REF].trace
    ref_time = compute_seconds(ref)
    order = table_order()
    out: dict[str, Any] = {
        "identical": True,
        "lossless": True,
        "reference": REF,
        "methods": {},
        "sampling": asdict(ref.sampling) if ref.sampling is not None else None,
    }
    for method in order:
        if method not in runs:
            continue
        t = runs[method].trace
        secs = compute_seconds(t)
        same = t.token_ids == ref.token_ids
        lossless, precision = (verdicts or {}).get(method, (same, ""))
        out["identical"] &= same
        out["lossless"] &= lossless
        out["methods"][method] = {
            "tokens": len(t.token_ids),
            "steps": t.decode_steps,
            "tokens_per_step": round(t.mat, 4),
            "seconds": round(secs, 6),
            "tokens_per_second": round(len(t.token_ids) / secs, 3) if secs > 0 else 0.0,
            "speedup": round(ref_time / secs, 4) if secs > 0 else 0.0,
            "identical_to_ar": same,
            "lossless": lossless,  # identical, or a bf16 / fp16 tie
            "precision": precision,  # the tie's (or the error's) sentence; "" when identical
            "acceptance": trace_stats(t).to_dict(),  # recap.trace.stats: the same numbers as the library's
            "accepted_lengths": [s.accepted_length for s in t.steps],
            "budget": t.budget,  # the run's node budget (a cost-aware tree's cap)
            "drafted": [s.tree_size for s in t.steps],
            "token_ids": list(t.token_ids),
            "run_id": runs[method].run_id,
        }
    return out


def badge(summary: dict[str, Any]) -> str:
    """Whether the outputs agree (under sampling: with one seed)."""
    sampled = summary.get("sampling")
    if summary["identical"] and sampled:
        return (
            f"### ✅ All {len(summary['methods'])} outputs are token-identical under sampling (lossless)\n\n"
            f"Sampled with {sampling_summary(sampled)}: one seed for every method, so every method drew "
            "the same tokens. Each draw comes from the model's own distribution after the exact text before "
            "it, so the drafter changes the speed, never the text."
        )
    if summary["identical"]:
        return f"### ✅ All {len(summary['methods'])} outputs are token-identical (lossless)"
    if summary.get("lossless"):  # bf16 / fp16: every difference a tie within the dtype's rounding
        ties = [f"{method_labels().get(m, m)}: {v['precision']}" for m, v in summary["methods"].items()
                if not v["identical_to_ar"]]
        return (f"### ✅ All {len(summary['methods'])} outputs are lossless; "
                f"{len(ties)} differ by a reduced-precision tie\n\n" + "\n".join(f"- {t}" for t in ties))
    labels = method_labels()
    bad = [labels.get(m, m) + (f" ({v['precision']})" if v.get("precision") else "")
           for m, v in summary["methods"].items() if not v.get("lossless", v["identical_to_ar"])]
    return (
        f"### ❌ WARNING: outputs differ from {REFERENCE_METHOD.label.lower()} decoding for "
        + ", ".join(bad)
        + ". Speculative decoding must be lossless: this is a bug, please report it."
    )


def table(summary: dict[str, Any]) -> list[list[Any]]:
    rows = []
    labels = method_labels()
    for method, v in summary["methods"].items():
        rows.append([labels.get(method, method), v["tokens"], v["steps"], round(v["tokens_per_step"], 2),
                     round(v["seconds"], 3), round(v["tokens_per_second"], 1), f"{v['speedup']:.2f}x"])
    return rows


def trees(session: Session, method_a: str, method_b: str, step: Any) -> tuple[go.Figure, go.Figure]:
    comp = session.compare
    if comp is None:
        return empty_figure("Run a comparison first."), empty_figure("Run a comparison first.")
    try:
        k = int(step)
    except (TypeError, ValueError, OverflowError):
        k = 1
    figs = []
    labels = method_labels()
    for method in (method_a, method_b):
        run = comp.runs.get(method)
        if run is None or not run.trace.steps:
            figs.append(empty_figure(f"no run for {labels.get(method, 'that method')}"))
            continue
        st = find_step(run.trace, k)
        note = "" if st.step == k else f" (it finished at step {st.step})"
        title = (f"{labels[method]} · step {st.step}{note}: {drafted_text(st, run.trace.budget)}, "
                 f"{len(st.emitted)} tokens")
        figs.append(tree_figure(st, title=title, uirevision=f"compare-{method}", max_height=700))
    return figs[0], figs[1]


@dataclass
class CompareView(Record):
    """A comparison: the lossless badge, the numbers table, the accepted-length chart, two trees, raw JSON."""

    badge: gr.Markdown | str = KEEP
    table: gr.Dataframe = KEEP
    chart: gr.Plot | go.Figure = KEEP
    step: gr.Slider = KEEP
    tree_a: gr.Plot | go.Figure = KEEP
    tree_b: gr.Plot | go.Figure = KEEP
    # per method, side by side (``app.presenters.compare_figures``)
    depth: gr.Plot | go.Figure = KEEP
    histogram: gr.Plot | go.Figure = KEEP
    times: gr.Plot | go.Figure = KEEP
    costs: gr.Markdown | str = KEEP
    numbers: gr.JSON | dict[str, Any] = KEEP  # last: API callers read it as the last output


@dataclass
class TreesView(Record):
    """The two trees at the chosen step."""

    tree_a: gr.Plot | go.Figure = KEEP
    tree_b: gr.Plot | go.Figure = KEEP


class CompareTab:
    """Layout, handlers and wiring of the Compare tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def compare_ui(
        self, session: Session, image: Any, prompt: Any, max_new: Any, progress=gr.Progress(),  # noqa: B008
        *, method_a: Any, method_b: Any, **named: Any,
    ):
        """Run every method; fill the badge, table, chart and the two trees (``method_a`` / ``method_b``:
        the trees shown; ``named``: the Decode tab's advanced settings and this tab's Sampling group, by
        name). A long job: ``long_job(self.failed)``."""
        advanced, knobs = split(named)
        config = parse_config(advanced, self.settings)
        comp = run_all(session, self.settings, image, prompt, max_new, config=config, progress=progress,
                       sampling=parse_sampling(knobs))
        summary = comp.summary
        n = max(v["steps"] for v in summary["methods"].values())
        left = comp.runs.get(str(method_a)) or comp.runs[DEFAULT_METHOD.name]
        first = telling_step(left.trace) or 1  # the left tree's most telling step; the slider goes anywhere
        fig_a, fig_b = trees(session, method_a, method_b, first)
        figs = method_figures({m: r.trace for m, r in comp.runs.items()}, REF, method_labels())
        return CompareView(
            badge=badge(summary),
            table=gr.Dataframe(value=table(summary), headers=TABLE_HEADERS),
            chart=compare_lengths_figure({m: r.trace for m, r in comp.runs.items()}),
            step=gr.Slider(minimum=1, maximum=max(n, 2), value=first, step=1, interactive=n > 1),
            tree_a=fig_a,
            tree_b=fig_b,
            numbers=dict(summary),
            depth=figs.depth, histogram=figs.histogram, times=figs.times, costs=figs.costs,
        ).to(self.ui)

    def failed(self, message: str) -> list[Any]:
        return CompareView(badge=error_markdown(message)).to(self.ui)

    def compare_api(self, session: Session, image: Any, prompt: Any, max_new: Any, **knobs: Any) -> str:
        """API: run every method with default advanced settings (``knobs``: the Sampling group's parameters,
        by name); returns the comparison as JSON."""
        sampling = parse_sampling(knobs)
        comp = run_all(session, self.settings, image, prompt, max_new, config=SESSION_CONFIG,
                       sampling=sampling)
        return json.dumps(comp.summary)

    def compare_trees(self, session: Session, method_a: Any, method_b: Any, step: Any):
        fig_a, fig_b = trees(session, str(method_a), str(method_b), step)
        return TreesView(tree_a=fig_a, tree_b=fig_b).to(self.trees_ui)

    def sync_main(self, session: Session):
        return main_view(session).to(self.main_ui)

    def build(self, session: gr.State, decode: DecodeInputs, main: MainView) -> None:
        """The tab's components and events (call inside ``gr.Tab``); it decodes the Decode tab's request."""
        methods = app_methods()
        order = table_order()
        gr.Markdown(
            f"Runs **{listed([m.label for m in methods])}** decoding on the image, prompt, "
            "max new tokens and advanced settings of the Decode tab, sampling as this tab's Sampling group "
            "says. "
            f"{listed([m.label for m in methods if m.keeps_memory])} each use their own "
            "session memory. Times are the engine's compute time, one method after the other on this machine."
        )
        self.sampling = build_sampling("recap-compare", COMPARE_SAMPLING)
        compare_btn = gr.Button(
            f"Compare all {len(methods)} methods", variant="primary", elem_id="recap-compare-run"
        )
        badge_md = gr.Markdown(elem_id="recap-compare-badge")
        table_df = gr.Dataframe(headers=TABLE_HEADERS, interactive=False, elem_id="recap-compare-table")
        chart = gr.Plot(
            compare_lengths_figure({}), label="Accepted length per step", elem_id="recap-compare-chart"
        )
        with gr.Row():
            method_a = loose(gr.Dropdown(method_choices(), value=order[0], label="left tree"))
            method_b = loose(gr.Dropdown(method_choices(), value=order[1], label="right tree"))
            step = loose(gr.Slider(1, 2, value=1, step=1, label="Step", interactive=False))
        with gr.Row():
            tree_a = gr.Plot(
                empty_figure("Run a comparison first."), label="left", elem_id="recap-compare-tree-a"
            )
            tree_b = gr.Plot(
                empty_figure("Run a comparison first."), label="right", elem_id="recap-compare-tree-b"
            )
        with gr.Accordion("Acceptance and time, per method", open=True, elem_id="recap-compare-figures"):
            with gr.Row():
                depth = gr.Plot(empty_figure("Run a comparison first."), show_label=False,
                                elem_id="recap-compare-depth")
                histogram = gr.Plot(empty_figure("Run a comparison first."), show_label=False,
                                    elem_id="recap-compare-hist")
            times = gr.Plot(empty_figure("Run a comparison first."), show_label=False,
                            elem_id="recap-compare-times")
            costs = gr.Markdown(elem_id="recap-compare-costs")
        with gr.Accordion("Raw numbers (JSON)", open=False):
            numbers = gr.JSON()
        self.ui = CompareView(
            badge=badge_md,
            table=table_df,
            chart=chart,
            step=step,
            tree_a=tree_a,
            tree_b=tree_b,
            numbers=numbers,
            depth=depth,
            histogram=histogram,
            times=times,
            costs=costs,
        )
        self.trees_ui = TreesView(tree_a=tree_a, tree_b=tree_b)
        self.main_ui = main

        decode_kw = decode_queue(self.settings.concurrency)
        compare_btn.click(
            long_job(self.failed)(self.compare_ui),
            [session, decode.image, decode.prompt, decode.max_new],
            self.ui.outputs(),
            inputs_kwargs={**decode.advanced, **self.sampling, "method_a": method_a, "method_b": method_b},
            api_visibility="private",
            trigger_mode="once",
            **decode_kw,
        ).then(guarded(self.sync_main), [session], main.outputs(), api_visibility="private")
        gr.on(
            [method_a.change, method_b.change, step.input],
            guarded(self.compare_trees),
            [session, method_a, method_b, step],
            self.trees_ui.outputs(),
            api_visibility="private",
            trigger_mode="always_last",
        )
        api_max_new = gr.Number(visible=False, label="max new tokens")
        api_out = gr.Textbox(visible=False, label="comparison JSON")
        api_btn = gr.Button(visible=False)
        # the sampling knobs by name after the three request inputs (older positional callers keep working)
        api_btn.click(
            long_job()(self.compare_api),
            [session, decode.image, decode.prompt, api_max_new],
            api_out,
            api_name="compare",
            inputs_kwargs=self.sampling,
            api_description=f"Run {', '.join(order)} (default advanced settings) on one request, sampling "
            "as the named parameters say (off by default; one seed for every method); returns JSON: "
            "identical (bool), sampling, methods.{m}.{tokens, steps, tokens_per_step, seconds, speedup, "
            "token_ids, accepted_lengths}.",
            **decode_kw,
        )
