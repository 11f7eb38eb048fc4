"""Aliasing tab: the inspector over the session's runs, and the guided A-then-B demo.

The classification itself is pure (``app.state.aliasing``); this module turns it into table
rows, details with provenance (the image and prompt of the request that wrote the
misleading M1 row, kept per memory in the session), and runs the guided demo.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.graph_objects as go

import recap
from recap.methods import get_method

from ..boundary.errors import UserError
from ..boundary.guard import decode_queue, guarded, long_job
from ..boundary.validation import event_index
from ..presenters.text import error_markdown, md_text, method_markdown
from ..presenters.tree import empty_figure, token_label, tree_figure
from ..state import aliasing
from ..state.decoding import decode_to_end, session_model
from ..state.memories import MemorySlot
from ..state.requests import open_image
from ..state.runs import GuidedState, InspectorState, Run
from ..state.session import Session
from ..state.settings import Settings, memory_methods, method_labels
from ..state.steps import find_step, telling_step
from ..widgets.components import loose
from ..widgets.main_view import MainView, main_view
from ..widgets.records import KEEP, Record
from .aliasing_cost import AliasingCostPanel

HEADERS = [
    "step",
    "node",
    "on path",
    "context ends with",
    "M1 predicted",
    "M1 written by",
    "M2",
    "M3",
    "fused choice",
    "target",
    "verdict",
]
ALL = "all verdicts"
GUIDED_MAX_NEW = 160
# The guided demo compares these two on purpose: the same 1-token memory, with and without
# RECAP's contextual memories.
TR = get_method("tr")
RC = get_method("recap")


def _same(flag: bool | None) -> str:
    return "this image" if flag else ("another image" if flag is False else "?")


def _pred(p: aliasing.Prediction | None) -> str:
    if p is None:
        return "—"
    return f"{token_label(p.text)} ({p.prob:.2f}){'' if p.in_tree else ', not drafted'}"


def rows(states: list[aliasing.AliasingState]) -> list[list[Any]]:
    out = []
    for s in states:
        out.append([
            s.step, s.node, "yes" if s.on_path else "no", token_label(s.key_text), _pred(s.m1),
            f"request {s.m1.request}, step {s.m1.step} ({_same(s.m1.same_image)})", _pred(s.m2), _pred(s.m3),
            token_label(s.fused_text), token_label(s.target_text), s.verdict,
        ])
    return out


def summary_markdown(run: Run, counts: dict[str, int], shown: int) -> str:
    t = run.trace
    head = (f"**{md_text(run.label, 120)}** · {method_markdown(t.method)} · {len(t.token_ids)} tokens in "
            f"{t.decode_steps} steps")
    if t.method not in memory_methods():
        return head + "  \nThis method keeps no memory: there is nothing to alias."
    parts = [
        f"**{counts['aliasing states']}** states where M1 was wrong, of {counts.get('expanded states', 0)} "
        "expanded "
        f"(**{counts['on accepted path']}** on accepted paths; **{counts['M1 from another image']}** with M1 "
        "written "
        "under another image)",
        " · ".join(f"{v}: **{counts[v]}**" for v in aliasing.VERDICTS)
        + (
            f" (of them {aliasing.SCOPED_FIX}: "
            f"**{counts[aliasing.SCOPED_FIX]}**)"  # image-scoped M2 / M3 rows
            if counts.get(aliasing.SCOPED_FIX)
            else ""
        ),
        f"showing {shown} row(s)",
    ]
    return head + "  \n" + "  \n".join(parts)


def run_choices(session: Session) -> list[tuple[str, int]]:
    return [(r.label, r.run_id) for r in reversed(session.runs) if r.has_steps]


def inspect_run(session: Session, run: Run | None, verdict: str, on_path_only: bool, other_image_only: bool):
    """Summary markdown and table rows for one run; remembers the rows for row selection."""
    if run is None:
        session.inspector = None
        return "No run yet: run a request (Decode tab) or the guided demo above.", []
    states = aliasing.trace_states(run.trace)
    counts = aliasing.summary(states, total=aliasing.expanded_states(run.trace))
    shown = [
        s for s in states
        if (verdict in (ALL, "", None) or s.verdict == verdict)
        and (not on_path_only or s.on_path)
        and (not other_image_only or s.m1.same_image is False)
    ]
    session.inspector = InspectorState(run.run_id, shown)
    return summary_markdown(run, counts, len(shown)), rows(shown)


def state_details(run: Run, state: aliasing.AliasingState) -> tuple[str, str | None]:
    """Markdown about one state and the thumbnail of the request that wrote M1's row."""
    m1 = state.m1
    record = run.slot.requests.get(m1.request) if run.slot is not None else None
    if record is not None:
        where = f"{md_text(record.label)}, prompt “{md_text(record.prompt, 200)}”"
        thumb = record.image_path
    else:
        where = f"request {m1.request} (not in this session's history)"
        thumb = None
    def tok(text: str) -> str:
        return md_text(token_label(text))

    lines = [
        f"**Step {state.step}, node {state.node}** "
        f"({'on the accepted path' if state.on_path else 'on a rejected branch'})"
        f" · context ends with **{tok(state.key_text)}** (depth {state.depth})",
        f"- M1 predicted **{tok(m1.text)}** (p = {m1.prob:.3f}), a row written by {where}, at its step "
        f"{m1.step}, "
        f"depth {m1.depth}: **{_same(m1.same_image)}**",
        f"- M2 predicted: {md_text(_pred(state.m2))} · M3 predicted: {md_text(_pred(state.m3))}",
        f"- fused choice: **{tok(state.fused_text)}** · the target wanted: **{tok(state.target_text)}**",
        f"- verdict: **{state.verdict}**",
    ]
    if thumb is None:
        lines.append("- (no image kept for that request: text-only, or loaded from a memory file)")
    return "\n".join(lines), thumb


def find_pair(settings: Settings) -> tuple[dict, dict]:
    pair = {e.get("pair"): e for e in settings.examples if e.get("pair")}
    if "A" not in pair or "B" not in pair:
        raise UserError("the guided demo needs the example pair (pair A and pair B) in assets/examples/")
    return pair["A"], pair["B"]


def guided_runs(session: Session, settings: Settings, progress: Any = None) -> GuidedState:
    """Image A then image B, same question; TR and RECAP each keep one fresh memory across both.

    The session's new guided demo: its runs, and its numbers (what /guided_demo returns).
    """
    a, b = find_pair(settings)
    model = session_model(session, settings)
    config = recap.RecapConfig(scoped_memory=True)  # the app's sessions keep M2 / M3 per image
    n = min(GUIDED_MAX_NEW, settings.max_new_tokens)
    images = {"A": open_image(a["path"], settings), "B": open_image(b["path"], settings)}
    prompts = {"A": a["prompt"], "B": b["prompt"]}
    runs: dict[str, dict[str, Run]] = {}
    labels = method_labels()
    done = 0
    for method in (TR.name, RC.name):
        slot = MemorySlot(recap.TokenMemory(model.target.vocab_size, config.top_k))
        runs[method] = {}
        for which in ("A", "B"):
            if progress is not None:
                progress(done / 4, desc=f"{labels[method]} on image {which}")
            runs[method][which] = decode_to_end(session, settings, images[which], prompts[which], method, n,
                                                config=config, memory_slot=slot, model=model, source="guided",
                                                label=f"guided · {labels[method]} · image {which}")
            done += 1
    out: dict[str, Any] = {"runs": {}, "aliasing_on_B": {}, "aliasing_from_A": {}, "prompt": prompts["B"]}
    for method, pair_runs in runs.items():
        a_req = pair_runs["A"].trace.request
        out["runs"][method] = {
            which: {"run_id": r.run_id, "request": r.trace.request, "tokens": len(r.trace.token_ids),
                    "steps": r.trace.decode_steps, "tokens_per_step": round(r.trace.mat, 4),
                    "token_ids": list(r.trace.token_ids)}
            for which, r in pair_runs.items()
        }
        b_trace = pair_runs["B"].trace
        total = aliasing.expanded_states(b_trace)
        out["aliasing_on_B"][method] = aliasing.summary(aliasing.trace_states(b_trace), total=total)
        states = aliasing.trace_states(b_trace, from_request=a_req)
        out["aliasing_from_A"][method] = aliasing.summary(states, total=total)
    out["identical"] = all(
        runs[TR.name][w].trace.token_ids == runs[RC.name][w].trace.token_ids for w in ("A", "B")
    )
    session.guided = GuidedState(runs, out)
    session.current = runs[RC.name]["B"]
    session.view_step = telling_step(session.current.trace)
    return session.guided


def guided_markdown(summary: dict[str, Any]) -> str:
    tr, rc = summary["runs"][TR.name]["B"], summary["runs"][RC.name]["B"]
    btr, brc = summary["aliasing_on_B"][TR.name], summary["aliasing_on_B"][RC.name]
    atr, arc = summary["aliasing_from_A"][TR.name], summary["aliasing_from_A"][RC.name]
    tl, rl = TR.label, RC.label
    same = (
        f"✅ {tl} and {rl} produced token-identical outputs"
        if summary["identical"]
        else "❌ WARNING: outputs differ"
    )
    return (
        "**Guided demo done.** Both memories were filled on image A, then reused on image B (same question). "
        " \n"
        f"On B, the 1-token memory's top prediction was wrong in **{btr['aliasing states']}** "
        "expanded states "
        ""
        f"for {tl} and **{brc['aliasing states']}** for {rl}; in **{brc[aliasing.FIXED]}** of {rl}'s, "
        f"its request-local 2- / 3-token memories (filled on B only) had the target's token: "
        f"**{aliasing.FIXED}**.  \n"
        f"Rows still holding image A's predictions misled on B in {atr['aliasing states']} ({tl}) and "
        f"{arc['aliasing states']} ({rl}) states: first mentions, where no contextual memory of B can exist "
        f"yet (every prediction is written to all three memories, so a 1-token row is never older than a "
        f"contextual one ending in the same token).  \n"
        f"Tokens per step on B: {tl} **{tr['tokens_per_step']:.2f}**, {rl} **{rc['tokens_per_step']:.2f}**. "
        f"{same}.  \nThe table lists every such state of {rl}'s run on B: choose the verdict "
        f"*{aliasing.FIXED}* to see those, or tick *rows from another image only* for A's."
    )


@dataclass
class ListView(Record):
    """The run chooser, the summary and the table of aliasing states."""

    run: gr.Dropdown = KEEP
    summary: gr.Markdown | str = KEEP
    table: gr.Dataframe = KEEP


@dataclass
class StateView(Record):
    """One chosen state: its details, the image that wrote M1's row, its tree."""

    details: gr.Markdown | str = KEEP
    image: gr.Image | str | None = KEEP  # a thumbnail's path
    tree: gr.Plot | go.Figure = KEEP


@dataclass
class GuidedView(Record):
    """After the guided demo: its summary, and the inspector's list pointed at RECAP's run on image B."""

    summary: gr.Markdown | str = KEEP
    run: gr.Dropdown = KEEP
    other_only: gr.Checkbox | bool = KEEP
    list_summary: gr.Markdown | str = KEEP
    table: gr.Dataframe = KEEP
    numbers: gr.JSON | dict[str, Any] = KEEP


class AliasingTab:
    """Layout, handlers and wiring of the Aliasing tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cost = AliasingCostPanel()  # what aliasing cost the chosen run (recap.trace.aliasing_stats)

    def refresh(self, session: Session, run_id: Any, verdict: Any, on_path_only: Any, other_image_only: Any):
        """Re-list the runs and the states of the chosen (default: current) run."""
        choices = run_choices(session)
        run = session.run_by_id(run_id) if run_id is not None else None
        if run is None:
            run = (
                session.current
                if any(r is session.current for r in session.runs)
                else (session.runs[-1] if session.runs else None)
            )
        md, table = inspect_run(session, run, str(verdict or ALL), bool(on_path_only), bool(other_image_only))
        return ListView(run=gr.Dropdown(choices=choices, value=run.run_id if run else None), summary=md,
                        table=gr.Dataframe(value=table, headers=HEADERS)).to(self.list_ui)

    def refresh_current(self, session: Session, verdict: Any, on_path_only: Any, other_image_only: Any):
        """Opening the tab: the states of the current run."""
        return self.refresh(session, None, verdict, on_path_only, other_image_only)

    def select_state(self, session: Session, evt: gr.EventData):
        """A row: show its details and tree (node circled), and point the Decode view at it."""
        ins = session.inspector
        row = event_index(evt)
        if ins is None or row is None or not 0 <= row < len(ins.states):
            return StateView().to(self.state_ui)
        state = ins.states[row]
        run = session.run_by_id(ins.run_id)
        if run is None:
            return StateView(details=error_markdown("that run is no longer in this session")).to(
                self.state_ui
            )
        md, thumb = state_details(run, state)
        step = find_step(run.trace, state.step)
        fig = tree_figure(step, highlight=state.node, uirevision="inspector") if step else empty_figure()
        session.current = run
        session.view_step = state.step
        session.highlight = (state.step, state.node)
        return StateView(details=md, image=thumb, tree=fig).to(self.state_ui)

    def failed_demo(self, message: str) -> list[Any]:
        return GuidedView(summary=error_markdown(message)).to(self.guided_ui)

    def guided_demo(self, session: Session, progress=gr.Progress()):  # noqa: B008
        """One click: image A then image B, TR and RECAP each keeping its memory across both."""
        guided = guided_runs(session, self.settings, progress)
        summary = guided.summary
        run = guided.runs[RC.name]["B"]
        md, table = inspect_run(session, run, ALL, False, False)
        return GuidedView(
            summary=guided_markdown(summary),
            run=gr.Dropdown(choices=run_choices(session), value=run.run_id),
            other_only=False,
            list_summary=md,
            table=gr.Dataframe(value=table, headers=HEADERS),
            numbers=json.loads(json.dumps(summary)),
        ).to(self.guided_ui)

    def sync_main(self, session: Session):
        return main_view(session).to(self.main_ui)

    def build(self, tab: gr.Tab, session: gr.State, main: MainView) -> None:
        """The tab's components and events (call inside ``gr.Tab``; ``tab`` is that tab)."""
        gr.Markdown(
            "A 1-token memory (M1) remembers what followed each token *the last time*, under whatever image "
            "that was. Here are the decoding states (expanded tree nodes) of your runs where **M1's "
            "prediction differed from the target's token**, with where that row came from and whether "
            "RECAP's contextual memories (M2, M3) fixed it. Choose a row to see it in its tree."
        )
        with gr.Row():
            guided_btn = gr.Button("Guided demo: image A, then image B (same question)", variant="primary",
                                   elem_id="recap-guided-run")
        guided_md = gr.Markdown(elem_id="recap-guided-summary")
        with gr.Row():
            run_dd = loose(gr.Dropdown([], label="Run", scale=2))
            verdict = loose(gr.Dropdown([ALL, *aliasing.VERDICTS], value=ALL, label="Verdict"))
            on_path = loose(gr.Checkbox(False, label="accepted paths only"))
            other = loose(gr.Checkbox(False, label="M1 written under another image only"))
        summary_md = gr.Markdown(elem_id="recap-alias-summary")
        table = gr.Dataframe(headers=HEADERS, interactive=False, elem_id="recap-alias-table", max_height=360)
        with gr.Row():
            with gr.Column(scale=1, min_width=260):
                image = gr.Image(
                    label="image of the request that wrote M1's row",
                    interactive=False,
                    height=200,
                    type="filepath",
                )
                details = gr.Markdown()
            with gr.Column(scale=2):
                tree = gr.Plot(
                    empty_figure("Choose a row."), label="tree of that step", elem_id="recap-alias-tree"
                )
        self.cost.build()
        with gr.Accordion("Guided demo numbers (JSON)", open=False):
            numbers = gr.JSON()
        self.list_ui = ListView(run=run_dd, summary=summary_md, table=table)
        self.state_ui = StateView(details=details, image=image, tree=tree)
        self.guided_ui = GuidedView(summary=guided_md, run=run_dd, other_only=other, list_summary=summary_md,
                                    table=table, numbers=numbers)
        self.main_ui = main
        self.cost.wire(session, run_dd, tree, main)
        filters = [verdict, on_path, other]
        tab.select(
            guarded(self.refresh_current),
            [session, *filters],
            self.list_ui.outputs(),
            api_visibility="private",
        )
        gr.on(
            [run_dd.input, verdict.input, on_path.input, other.input],
            guarded(self.refresh),
            [session, run_dd, *filters],
            self.list_ui.outputs(),
            api_visibility="private",
        )
        table.select(guarded(self.select_state), [session], self.state_ui.outputs(), api_visibility="private"
                     ).then(guarded(self.sync_main), [session], main.outputs(), api_visibility="private")
        guided_btn.click(
            long_job(self.failed_demo)(self.guided_demo),
            [session],
            self.guided_ui.outputs(),
            api_name="guided_demo",
            trigger_mode="once",
            **decode_queue(self.settings.concurrency),
        ).then(guarded(self.sync_main), [session], main.outputs(), api_visibility="private")
