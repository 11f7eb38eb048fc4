"""The Aliasing tab's run summary: what aliasing cost the chosen run (``recap.trace.aliasing_stats``).

From the run's trace alone: its drafted tokens the target refused, by source and where M1's row was
written (this image, another image, the prompt), the share M2/M3 would have fixed, and the contexts
that alias most; a row opens its first state in the tree views (this tab's and the Decode view's).
The summary downloads with the trace it was computed from, in one gzipped JSON file.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

from recap.trace.aliasing_stats import AliasingCost, aliasing_cost

from ..boundary.guard import guarded
from ..boundary.validation import event_index
from ..presenters.aliasing_cost import context_rows, cost_markdown, source_figure
from ..presenters.tree import empty_figure, tree_figure
from ..state.runs import Run
from ..state.session import Session
from ..state.steps import find_step
from ..widgets.main_view import MainView, main_view
from ..widgets.records import KEEP, Record

CONTEXT_HEADERS = ["context ends with", "refused there", "of them M1's", "M2/M3 had the target's token",
                   "first at step", "node"]
EXPORT_SCHEMA = "recap-aliasing-cost"
NO_RUN = "No run yet: run a request (Decode tab) or the guided demo above."


@dataclass
class CostView(Record):
    """The run summary: sentences, the chart by source, the contexts table."""

    summary: gr.Markdown | str = KEEP
    sources: gr.Plot | go.Figure = KEEP
    contexts: gr.Dataframe = KEEP


def export_document(run: Run, cost: AliasingCost) -> dict[str, Any]:
    """The download: the summary and the trace it was computed from (``DecodeTrace.to_dict``)."""
    return {"schema": EXPORT_SCHEMA, "version": 1, "aliasing_cost": cost.to_dict(),
            "trace": run.trace.to_dict()}


class AliasingCostPanel:
    """Layout, handlers and wiring of the run summary under the Aliasing tab's table."""

    def _run(self, session: Session, run_id: Any) -> Run | None:
        run = session.run_by_id(run_id) if isinstance(run_id, int) else None
        return run if run is not None else session.current

    def show(self, session: Session, run_id: Any):
        """The chosen run's summary (default: the current run)."""
        run = self._run(session, run_id)
        if run is None or not run.has_steps:
            return CostView(summary=NO_RUN, sources=empty_figure(NO_RUN, height=200),
                            contexts=gr.Dataframe(value=[], headers=CONTEXT_HEADERS)).to(self.ui)
        cost = aliasing_cost(run.trace)
        return CostView(summary=cost_markdown(cost, run.trace.method), sources=source_figure(cost),
                        contexts=gr.Dataframe(value=context_rows(cost), headers=CONTEXT_HEADERS)).to(self.ui)

    def open_context(self, session: Session, run_id: Any, evt: gr.EventData):
        """A context row: its first state in this tab's tree (node circled); the Decode view follows."""
        run, row = self._run(session, run_id), event_index(evt)
        if run is None or row is None:
            return gr.skip()
        contexts = aliasing_cost(run.trace).contexts
        if not 0 <= row < len(contexts):
            return gr.skip()
        c = contexts[row]
        step = find_step(run.trace, c.step)
        session.current, session.view_step, session.highlight = run, c.step, (c.step, c.node)
        return tree_figure(step, highlight=c.node, uirevision="inspector") if step else empty_figure()

    def sync_main(self, session: Session):
        return main_view(session).to(self.main_ui)

    def export(self, session: Session, run_id: Any) -> str | None:
        """The summary with its trace, gzipped JSON (one such download per session)."""
        run = self._run(session, run_id)
        if run is None or not run.has_steps:
            gr.Warning("There is no run to export yet.")
            return None
        path = session.files.download(f"aliasing_run{run.run_id}_{run.trace.method}.json.gz",
                                      replaces="aliasing_*")
        text = json.dumps(export_document(run, aliasing_cost(run.trace)), ensure_ascii=False)
        path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
        return str(path)

    def build(self) -> CostView:
        """The summary's components (call inside the Aliasing tab)."""
        with gr.Accordion("What aliasing cost this run", open=True, elem_id="recap-alias-cost-panel"):
            summary = gr.Markdown(NO_RUN, elem_id="recap-alias-cost")
            with gr.Row():
                sources = gr.Plot(empty_figure(NO_RUN, height=200), show_label=False,
                                  elem_id="recap-alias-sources")
                with gr.Column():
                    contexts = gr.Dataframe(headers=CONTEXT_HEADERS, interactive=False, max_height=300,
                                            elem_id="recap-alias-contexts",
                                            label="contexts that alias most (choose one to open it)")
                    self.export_btn = gr.Button("Download this summary with its trace", size="sm",
                                                elem_id="recap-alias-export")
                    self.file = gr.File(label="summary + trace (.json.gz)", interactive=False, height=60)
        self.ui = CostView(summary=summary, sources=sources, contexts=contexts)
        return self.ui

    def wire(self, session: gr.State, run_dd: Any, tree: Any, main: MainView) -> None:
        """``run_dd``: the tab's run chooser (every change of it redraws the summary); ``tree``: the tab's
        tree, where a context row opens; ``main``: the Decode view, which follows."""
        run_dd.change(guarded(self.show), [session, run_dd], self.ui.outputs(), api_visibility="private")
        self.main_ui = main
        opened = self.ui.contexts.select(guarded(self.open_context), [session, run_dd], tree,
                                         api_visibility="private")
        opened.then(guarded(self.sync_main), [session], main.outputs(), api_visibility="private")
        self.export_btn.click(guarded(self.export), [session, run_dd], self.file, api_visibility="private")
