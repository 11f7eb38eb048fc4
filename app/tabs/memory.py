"""Memory tab: the session's persistent 1-token memory (M1), searchable.

Shows its size, how many rows are filled and by which requests, a table of filled rows
(filtered by a search text), and for a token the full row: its top-k predictions with
probabilities and provenance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..boundary.errors import UserError
from ..boundary.guard import guarded
from ..presenters.text import MEMORY_ORIGINS, error_markdown, md_text
from ..presenters.tree import token_label
from ..state.decoding import session_model
from ..state.requests import check_top_k
from ..state.session import Session
from ..state.settings import DEFAULT_METHOD, Settings, memory_choices, memory_methods, method_labels
from ..widgets.components import loose
from ..widgets.records import KEEP, Record

ROW_HEADERS = [
    "token id",
    "token",
    "top-1 next",
    "p(top-1)",
    "entropy",
    "written by request",
    "step",
    "depth",
]
DETAIL_HEADERS = ["rank", "next token id", "next token", "probability"]
MAX_ROWS = 300


@dataclass
class MemoryView(Record):
    """The memory's numbers, its filled rows, and the searched token's row."""

    stats: gr.Markdown | str = KEEP
    rows: gr.Dataframe = KEEP
    detail_md: gr.Markdown | str = KEEP
    detail: gr.Dataframe = KEEP


class MemoryTab:
    """Layout, handlers and wiring of the Memory tab."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def view(self, session: Session, method: Any, top_k: Any, query: Any):
        """The session's memory of the method (k = top_k), its rows matching the search text."""
        return self.render(session, method, top_k, query).to(self.ui)

    def render(self, session: Session, method: Any, top_k: Any, query: Any) -> MemoryView:
        settings = self.settings
        method = method if method in memory_methods() else DEFAULT_METHOD.name
        try:
            k = check_top_k(settings, top_k)
            model = session_model(session, settings)
        except UserError as exc:
            return MemoryView(stats=error_markdown(str(exc)))
        target = model.target
        # the memory the next run drafts from: made now if no run made it yet (warm, or empty)
        slot = session.slot(model.spec.source, method, k, target.vocab_size)
        head = f"**{method_labels()[method]}** · model {md_text(model.name)} · k = {k}"
        origin = MEMORY_ORIGINS[slot.origin]
        if slot.memory.filled == 0:
            since = "" if slot.origin == "empty" else f" {origin}"
            empty = f"{head}: the memory is empty.{since} It fills as you run requests with this method."
            return MemoryView(stats=empty, rows=gr.Dataframe(value=[], headers=ROW_HEADERS), detail_md="",
                              detail=gr.Dataframe(value=[], headers=DETAIL_HEADERS))
        mem = slot.memory
        nbytes = sum(
            t.numel() * t.element_size()
            for t in (mem.ids, mem.probs, mem.entropy, mem.concentration, mem.request, mem.step, mem.depth)
        )
        filled = (mem.request >= 0).nonzero().flatten().tolist()
        reqs = ", ".join(
            f"{i}: “{md_text(r.prompt, 40)}”" + ("" if r.image_key else " (no image)")
            for i, r in enumerate(mem.requests[-8:], start=max(0, len(mem.requests) - 8))
        )
        stats = (
            f"{head}  \n**{mem.filled}** of {mem.vocab_size} rows filled "
            f"({100 * mem.filled / mem.vocab_size:.1f}%) · "
            f"{mem.vocab_size} × {k} predictions, {nbytes / 1e6:.2f} MB · written by {len(mem.requests)} "
            "request(s)  \n"
            f"{origin}" + (f"  \nLatest requests: {reqs}" if reqs else "")
        )
        q = str(query or "").strip()[:100]
        rows = []
        exact: list[int] = []
        for tok in filled:
            text = target.token_text(tok)
            if q and q.lower() not in text.lower() and q != str(tok):
                continue
            if q and (text.strip() == q or q == str(tok)):
                exact.append(tok)
            rows.append(
                [
                    tok,
                    token_label(text, exact=True),
                    token_label(target.token_text(int(mem.ids[tok, 0])), exact=True),
                    round(float(mem.probs[tok, 0]), 4),
                    round(float(mem.entropy[tok]), 3),
                    int(mem.request[tok]),
                    int(mem.step[tok]),
                    int(mem.depth[tok]),
                ]
            )
        note = f"{len(rows)} matching row(s)" + (f", first {MAX_ROWS} shown" if len(rows) > MAX_ROWS else "")
        detail_md, detail = "", []
        if exact:
            tok = exact[0]
            entry = mem.lookup(tok)
            info = mem.request_info(entry.request)
            prov = f"request {entry.request}" + (f" (“{md_text(info.prompt, 60)}”)" if info else "")
            detail_md = (
                f"Row of **{md_text(token_label(target.token_text(tok), exact=True))}** (token {tok}): "
                f"written by {prov}, decode step "
                f"{entry.step}, tree depth {entry.depth}; entropy {entry.entropy:.3f}, concentration "
                f"{entry.concentration:.3f}"
            )
            detail = [[r + 1, t, token_label(target.token_text(t), exact=True), round(p, 5)]
                      for r, (t, p) in enumerate(zip(entry.ids, entry.probs))]
        elif q:
            detail_md = f"No filled row for exactly “{md_text(q)}”: type a token's text or id."
        return MemoryView(
            stats=stats + f"  \n{note}",
            rows=gr.Dataframe(value=rows[:MAX_ROWS], headers=ROW_HEADERS),
            detail_md=detail_md,
            detail=gr.Dataframe(value=detail, headers=DETAIL_HEADERS),
        )

    def build(self, tab: gr.Tab, session: gr.State, top_k: Any) -> None:
        """The tab's components and events (call inside ``gr.Tab``; ``top_k`` is the Decode tab's k)."""
        gr.Markdown("The session's persistent 1-token memory (M1): one top-k row per vocabulary token, "
                    "kept across your runs. Search a token by its text or id to see its whole row.")
        with gr.Row():
            method = loose(gr.Radio(memory_choices(), value=DEFAULT_METHOD.name, label="memory of"))
            query = loose(
                gr.Textbox(label="search a token (text or id)", scale=2, elem_id="recap-memory-query")
            )
            refresh = gr.Button("Refresh", size="sm")
        stats = gr.Markdown(elem_id="recap-memory-stats")
        with gr.Row():
            rows = gr.Dataframe(headers=ROW_HEADERS, interactive=False, max_height=420, scale=3)
            with gr.Column(scale=2):
                detail_md = gr.Markdown()
                detail = gr.Dataframe(headers=DETAIL_HEADERS, interactive=False)
        self.ui = MemoryView(stats=stats, rows=rows, detail_md=detail_md, detail=detail)
        gr.on(
            [tab.select, refresh.click, query.submit, method.change],
            guarded(self.view),
            [session, method, top_k, query],
            self.ui.outputs(),
            api_name="memory_view",
        )
