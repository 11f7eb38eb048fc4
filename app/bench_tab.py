"""Benchmark tab: the latest benchmark results, and a button that runs the quick suite.

Reads ``results.json`` / ``results.md`` written by ``python -m recap bench --out DIR``
(``recap.bench``). The folder defaults to ``bench-results`` when it holds results, else
the default-suite run shipped in ``docs/bench``. Running the quick suite here writes to
the chosen folder and shows it; the progress bar follows the suite's own tqdm bar.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures import empty_figure
from app.services import KEEP, Record, UserError, session_model
from app.session import Session
from app.settings import Settings
from recap.models import REPO_ROOT

SHIPPED = REPO_ROOT / "docs" / "bench"
#: One colour per row name in both panels (plotly's cycle would differ between them).
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF")


def default_folder() -> str:
    env = os.environ.get("RECAP_BENCH_DIR")
    if env:
        return env
    local = Path("bench-results")
    return str(local) if (local / "results.json").is_file() else str(SHIPPED)


def load_results(folder: str) -> tuple[dict[str, Any], str]:
    """results.json (parsed) and results.md of a results folder; UserError when unusable."""
    path = Path(folder or "").expanduser()
    if not (path / "results.json").is_file():
        raise UserError(f"no results.json in {path} (run `python -m recap bench --out {path}` or the button below)")
    try:
        data = json.loads((path / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path / 'results.json'} is not readable JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != "recap-bench" or "summary" not in data:
        raise UserError(f"{path / 'results.json'} is not a RECAP benchmark result")
    md_path = path / "results.md"
    md = md_path.read_text(encoding="utf-8") if md_path.is_file() else ""
    return data, md


def results_figure(results: dict[str, Any]) -> go.Figure:
    """Speedup over HF and MAT per method, overall and per question kind."""
    summary = results.get("summary", {})
    kinds = list(results.get("meta", {}).get("kinds", []))
    cols = ["overall", *kinds]
    fig = make_subplots(rows=2, cols=1, subplot_titles=("Speedup over HF greedy generate()", "MAT (tokens per pass)"),
                        vertical_spacing=0.16)
    for i, (name, s) in enumerate(summary.items()):
        def row(key: str, s: dict[str, Any] = s) -> list[Any]:
            return [s.get("overall", {}).get(key)] + [s.get("by_kind", {}).get(k, {}).get(key) for k in kinds]

        color = PALETTE[i % len(PALETTE)]
        if name not in ("hf", "oracle"):
            fig.add_trace(go.Bar(name=name, x=cols, y=row("speedup"), legendgroup=name, marker_color=color),
                          row=1, col=1)
        fig.add_trace(go.Bar(name=name, x=cols, y=row("mat"), legendgroup=name, marker_color=color,
                             showlegend=name in ("hf", "oracle")), row=2, col=1)
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=1)
    fig.update_layout(barmode="group", height=620, template="plotly_white", margin=dict(l=40, r=20, t=50, b=30))
    return fig


@dataclass
class ResultsView(Record):
    table: Any = KEEP
    plot: Any = KEEP


@dataclass
class QuickView(ResultsView):
    """After the quick suite: the results, and the folder they were written to."""

    folder: Any = KEEP


class BenchTab:
    """Layout, handlers and wiring of the Benchmark tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def show(self, folder: str):
        try:
            data, md = load_results(folder)
        except UserError as exc:
            gr.Warning(str(exc))
            return ResultsView(table=f"⚠️ {exc}").to(self.ui)
        return ResultsView(table=md or "(results.md missing: figure from results.json only)",
                           plot=results_figure(data)).to(self.ui)

    def run_quick(self, session: Session, folder: str, progress: gr.Progress = gr.Progress(track_tqdm=True)):  # noqa: B008
        from recap.bench import bench, write_results

        out = Path(folder or "bench-results").expanduser()
        if out.resolve() == SHIPPED.resolve():
            out = Path("bench-results")  # never overwrite the shipped reference run
        try:
            model = session_model(session, self.settings)
            progress(0.0, desc="quick suite: warming up")
            with model.lock:  # the suite drives the shared model directly
                results = bench(model.target, suite="quick", repeats=1, progress=True)
            write_results(results, out)
        except (UserError, ValueError, OSError, RuntimeError) as exc:
            gr.Warning(f"the quick suite could not run: {exc}")
            return QuickView(table=f"⚠️ the quick suite could not run: {exc}").to(self.quick_ui)
        data, md = load_results(str(out))
        verdict = "" if data["lossless"]["ok"] else "\n\n**⚠️ LOSSLESS CHECK FAILED: see the table.**"
        return QuickView(table=md + verdict, plot=results_figure(data), folder=str(out)).to(self.quick_ui)

    def build(self, session: gr.State) -> None:
        """The tab's components and events (call inside ``gr.Tab``)."""
        gr.Markdown(
            "Side-by-side benchmark of every method on held-out shape scenes (`python -m recap bench`). "
            "Speedup is HF greedy `generate()` time over the method's, measured in one process; every "
            "output is checked token for token against HF's. See docs/benchmark.md for the method."
        )
        with gr.Row():
            folder = gr.Textbox(value=default_folder(), label="results folder", scale=3, elem_id="recap-bench-folder")
            show_btn = gr.Button("Show results", scale=1)
            run_btn = gr.Button("Run the quick suite (~1-2 min)", variant="primary", scale=1,
                                elem_id="recap-bench-run")
        plot = gr.Plot(empty_figure("Press 'Show results'."), label="speedup and MAT", elem_id="recap-bench-plot")
        table = gr.Markdown(elem_id="recap-bench-table")
        self.ui = ResultsView(table=table, plot=plot)
        self.quick_ui = QuickView(table=table, plot=plot, folder=folder)
        show_btn.click(self.show, folder, self.ui.outputs(), api_name="bench_results")
        run_btn.click(self.run_quick, [session, folder], self.quick_ui.outputs(), api_name="bench_quick",
                      concurrency_limit=1, concurrency_id="bench", trigger_mode="once")
