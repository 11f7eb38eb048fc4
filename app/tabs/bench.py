"""Benchmark tab: benchmark runs (the shipped one, and quick suites run here), and the quick-suite button.

A visitor chooses a *run*, never a path. The runs are the default-suite run shipped in
``docs/bench`` and, locally, the quick and follow-up suites this app ran (``SUITE_RUNS``; the
follow-up suite puts RECAP beside itself without its image-scoped memories), each in a folder
of its own under ``<data dir>/bench`` (the newest ``MAX_SAVED_RUNS`` are kept). In public mode the
tab only shows the shipped run and the button is off. The quick suite runs one at a time
(Gradio's queue shows a waiting visitor its position), one per visitor, on its own copy of
the model: it never holds the model the other visitors' decodes share.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from recap.bench.suite import FOLLOWUP_QUESTIONS
from recap.core.assets import SHIPPED_BENCH

from ..boundary.errors import UserError
from ..boundary.guard import fail, guarded, long_job, one_job_per_visitor
from ..presenters.bench_acceptance import bench_acceptance
from ..presenters.text import error_markdown
from ..presenters.tree import empty_figure
from ..state.decoding import session_spec
from ..state.gpu_calls import bench_suite
from ..state.session import Session
from ..state.settings import Settings
from ..widgets.records import KEEP, Record

SHIPPED = SHIPPED_BENCH  # docs/bench, or the wheel's copy of it
SHIPPED_RUN = "shipped (docs/bench)"
MAX_SAVED_RUNS = 5
MAX_RESULTS_BYTES = 20 * 10**6
#: The suites this tab runs (a run's folder is named after its suite and its time).
SUITE_RUNS = ("quick", "followup")
_RUN_NAME = re.compile(r"^(quick|followup)-[0-9]{8}-[0-9]{6}(-[0-9]+)?$")
#: One colour per row name in both panels (plotly's cycle would differ between them).
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF")


def saved_runs(settings: Settings) -> list[str]:
    """Quick- and follow-up-suite runs of this app under its data directory, newest first."""
    root = settings.bench_dir
    if not root.is_dir():
        return []
    names = [p.name for p in root.iterdir() if _RUN_NAME.match(p.name) and (p / "results.json").is_file()]
    return sorted(names, key=lambda name: name.split("-", 1)[1], reverse=True)  # by time, whatever the suite


def run_choices(settings: Settings) -> list[str]:
    return [SHIPPED_RUN] if settings.public else [*saved_runs(settings), SHIPPED_RUN]


def run_folder(settings: Settings, run: Any) -> Path:
    """The folder of a run a visitor chose (by name); UserError for anything that is not in the list."""
    choices = run_choices(settings)
    if not isinstance(run, str) or run not in choices:
        shown = repr(run)[:60]
        raise UserError(f"there is no benchmark run {shown}; choose one of: {', '.join(choices)}")
    return SHIPPED if run == SHIPPED_RUN else settings.bench_dir / run


def load_results(folder: str | Path, run: str = "") -> tuple[dict[str, Any], str]:
    """results.json (parsed, shape checked) and results.md of a run's folder; UserError naming the run when
    unusable."""
    path = Path(folder)
    name = run or path.name
    file = path / "results.json"
    if not file.is_file():
        raise UserError(
            f"the run {name!r} has no results.json (run `python -m recap bench` or the button below)"
        )
    if file.stat().st_size > MAX_RESULTS_BYTES:
        raise UserError(f"the results.json of {name!r} is too large to show")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"the results.json of {name!r} is not readable JSON: {type(exc).__name__}") from None
    if (
        not isinstance(data, dict)
        or data.get("schema") != "recap-bench"
        or not isinstance(data.get("summary"), dict)
    ):
        raise UserError(f"the results.json of {name!r} is not a RECAP benchmark result")
    bad = [
        k
        for k, v in data["summary"].items()
        if not isinstance(v, dict) or not isinstance(v.get("overall", {}), dict)
    ]
    meta, lossless = data.get("meta", {}), data.get("lossless", {})
    if (
        bad
        or not isinstance(meta, dict)
        or not isinstance(meta.get("kinds", []), list)
        or not isinstance(lossless, dict)
    ):
        raise UserError(
            f"the results.json of {name!r} is not a RECAP benchmark result (malformed summary or meta)"
        )
    md_path = path / "results.md"
    md = md_path.read_text(encoding="utf-8")[:MAX_RESULTS_BYTES] if md_path.is_file() else ""
    return data, md


def results_figure(results: dict[str, Any]) -> go.Figure:
    """Speedup over HF and MAT per method, overall, (a follow-up suite) on a scene's first and later
    questions, and per question kind."""
    summary = results.get("summary", {})
    kinds = list(results.get("meta", {}).get("kinds", []))
    # a follow-up suite's point: the later questions, where the image-scoped memories act
    positions = ("first", "later") if results.get("meta", {}).get("suite") in FOLLOWUP_QUESTIONS else ()
    cols = ["overall", *(f"{p} questions" for p in positions), *kinds]
    fig = make_subplots(
        rows=2,
        cols=1,
        subplot_titles=("Speedup over HF greedy generate()", "MAT (tokens per pass)"),
        vertical_spacing=0.16,
    )
    for i, (name, s) in enumerate(summary.items()):
        def row(key: str, s: dict[str, Any] = s) -> list[Any]:
            return (
                [s.get("overall", {}).get(key)]
                + [s.get("by_position", {}).get(p, {}).get(key) for p in positions]
                + [s.get("by_kind", {}).get(k, {}).get(key) for k in kinds]
            )

        color = PALETTE[i % len(PALETTE)]
        if name not in ("hf", "oracle"):
            fig.add_trace(go.Bar(name=name, x=cols, y=row("speedup"), legendgroup=name, marker_color=color),
                          row=1, col=1)
        fig.add_trace(go.Bar(name=name, x=cols, y=row("mat"), legendgroup=name, marker_color=color,
                             showlegend=name in ("hf", "oracle")), row=2, col=1)
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=1)
    fig.update_layout(
        barmode="group", height=620, template="plotly_white", margin=dict(l=40, r=20, t=50, b=30)
    )
    return fig


@dataclass
class ResultsView(Record):
    """A benchmark run: its results.md table and its chart."""

    table: gr.Markdown | str = KEEP
    plot: gr.Plot | go.Figure = KEEP


@dataclass
class AcceptanceView(Record):
    """A run's acceptance per row (``app.presenters.bench_acceptance``): its own event after the results',
    so /bench_results keeps its two outputs."""

    note: gr.Markdown | str = KEEP
    depth: gr.Plot | go.Figure = KEEP
    histogram: gr.Plot | go.Figure = KEEP


@dataclass
class QuickView(ResultsView):
    """After the quick suite: the results, and the run chooser with the new run selected."""

    run: gr.Dropdown = KEEP


def new_run_folder(settings: Settings, suite: str = "quick") -> Path:
    root = settings.bench_dir
    root.mkdir(parents=True, exist_ok=True)
    base = f"{suite}-" + time.strftime("%Y%m%d-%H%M%S")
    name, n = base, 2
    while (root / name).exists():
        name, n = f"{base}-{n}", n + 1
    return root / name


def prune_runs(settings: Settings) -> None:
    """Keep the newest ``MAX_SAVED_RUNS`` quick-suite runs: the data directory stays bounded."""
    for name in saved_runs(settings)[MAX_SAVED_RUNS:]:
        shutil.rmtree(settings.bench_dir / name, ignore_errors=True)


class BenchTab:
    """Layout, handlers and wiring of the Benchmark tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def results(self, run: Any) -> ResultsView:
        """The chosen run's table and chart; UserError naming what is wrong."""
        data, md = load_results(run_folder(self.settings, run), str(run))
        return ResultsView(
            table=md or "(results.md missing: figure from results.json only)", plot=results_figure(data)
        )

    def acceptance(self, run: Any) -> AcceptanceView:
        """The chosen run's acceptance figures per row (what its results.json holds; a note when not)."""
        data, _ = load_results(run_folder(self.settings, run), str(run))
        figs = bench_acceptance(data)
        return AcceptanceView(note=figs.note, depth=figs.depth, histogram=figs.histogram)

    def show_acceptance(self, run: Any):
        try:
            return self.acceptance(run).to(self.acceptance_ui)
        except UserError:  # the results' own event says what is wrong
            return AcceptanceView().to(self.acceptance_ui)

    def show(self, run: Any):
        """The chosen run's table and chart."""
        try:
            return self.results(run).to(self.ui)
        except UserError as exc:
            raise fail(str(exc)) from None

    def run_quick(self, session: Session, progress: gr.Progress = gr.Progress(track_tqdm=True)):  # noqa: B008
        """Run the quick suite (one at a time, one per visitor) on a private copy of the session's model."""
        return self.run_suite(session, "quick", progress)

    def run_followup(self, session: Session, progress: gr.Progress = gr.Progress(track_tqdm=True)):  # noqa: B008
        """Run the follow-up suite (RECAP with and without its image-scoped memories), as ``run_quick``."""
        return self.run_suite(session, "followup", progress)

    def run_suite(self, session: Session, suite: str, progress: Any):
        """Run one of ``SUITE_RUNS`` once per request, save it as a new run, and show it."""
        from recap.bench import write_results

        if suite not in SUITE_RUNS:
            raise UserError(f"there is no suite {suite!r} to run here")
        what = "the follow-up suite" if suite == "followup" else f"the {suite} suite"
        if self.settings.public:
            raise UserError(
                f"{what} is turned off in this public deployment; the shipped run is shown instead"
            )
        spec = session_spec(session, self.settings)
        progress(0.0, desc=f"{what}: loading its own copy of the model")
        try:
            # the GPU call (a private copy of the model) returns the results; they are written here
            results = bench_suite(spec, suite)
            out = new_run_folder(self.settings, suite)
            write_results(results, out)
        except (ValueError, OSError, RuntimeError) as exc:
            raise UserError(f"{what} could not run: {exc}") from None
        prune_runs(self.settings)
        data, md = load_results(out, out.name)
        verdict = "" if data["lossless"].get("ok") else "\n\n**⚠️ LOSSLESS CHECK FAILED: see the table.**"
        return QuickView(
            table=md + verdict,
            plot=results_figure(data),
            run=gr.Dropdown(choices=run_choices(self.settings), value=out.name),
        ).to(self.quick_ui)

    def build(self, session: gr.State) -> None:
        """The tab's components and events (call inside ``gr.Tab``)."""
        public = self.settings.public
        gr.Markdown(
            "Side-by-side benchmark of every method on held-out shape scenes (`python -m recap bench`). "
            "Speedup is HF greedy `generate()` time over the method's, measured in one process; every "
            "output is checked token for token against HF's. See docs/benchmark.md for the method."
            + (" This public deployment shows the shipped run." if public else "")
        )
        choices = run_choices(self.settings)
        with gr.Row():
            # allow_custom_value: the app, not the component, checks the name (and says what to choose)
            run = gr.Dropdown(
                choices,
                value=choices[0],
                label="benchmark run",
                scale=3,
                allow_custom_value=True,
                elem_id="recap-bench-run-name",
            )
            show_btn = gr.Button("Show results", scale=1)
            run_btn = gr.Button("Run the quick suite (about a minute)", variant="primary", scale=1,
                                elem_id="recap-bench-run", visible=not public)
            followup_btn = gr.Button("Run the follow-up suite", scale=1, elem_id="recap-bench-followup",
                                     visible=not public)
        try:  # the chosen run (public: the shipped one) drawn once here, so the tab opens on it
            first = self.results(choices[0])
        except UserError as exc:
            first = ResultsView(table=error_markdown(str(exc)), plot=empty_figure("No results to show."))
        plot = gr.Plot(first.plot, label="speedup and MAT", elem_id="recap-bench-plot")
        try:
            first_acc = self.acceptance(choices[0])
        except UserError:
            first_acc = AcceptanceView(note="", depth=empty_figure("No results to show."),
                                       histogram=empty_figure("No results to show."))
        with gr.Accordion("Acceptance per row", open=True, elem_id="recap-bench-acceptance"):
            note = gr.Markdown(first_acc.note, elem_id="recap-bench-acceptance-note")
            with gr.Row():
                depth = gr.Plot(first_acc.depth, show_label=False, elem_id="recap-bench-depth")
                histogram = gr.Plot(first_acc.histogram, show_label=False, elem_id="recap-bench-hist")
        self.acceptance_ui = AcceptanceView(note=note, depth=depth, histogram=histogram)
        table = gr.Markdown(first.table, elem_id="recap-bench-table")
        self.ui = ResultsView(table=table, plot=plot)
        self.quick_ui = QuickView(table=table, plot=plot, run=run)
        show_btn.click(guarded(self.show), run, self.ui.outputs(), api_name="bench_results").then(
            guarded(self.show_acceptance), run, self.acceptance_ui.outputs(), api_visibility="private")
        run_btn.click(
            long_job()(self.run_quick),
            [session],
            self.quick_ui.outputs(),
            api_name="bench_quick",
            concurrency_limit=1,
            concurrency_id="bench",
            trigger_mode="once",
            validator=one_job_per_visitor,
        ).then(guarded(self.show_acceptance), run, self.acceptance_ui.outputs(), api_visibility="private")
        followup_btn.click(
            long_job()(self.run_followup),
            [session],
            self.quick_ui.outputs(),
            api_name="bench_followup",
            concurrency_limit=1,
            concurrency_id="bench",
            trigger_mode="once",
            validator=one_job_per_visitor,
        ).then(guarded(self.show_acceptance), run, self.acceptance_ui.outputs(), api_visibility="private")
