"""A conversation's turns -> the turns view and the turn picker (pure functions, no Gradio, no model).

Each turn is its trace: the question (``trace.prompt``) and the model's answer (``trace.text``).
Both are a visitor's or a model's text, so they are escaped and shown as text (``white-space:
pre-wrap``), never rendered as HTML or Markdown.
"""

from __future__ import annotations

import html

from app.state.settings import method_labels
from recap.trace.format import DecodeTrace

EMPTY = ("No conversation yet: <b>Run</b> a request, then ask a follow-up question here; each answer "
         "is decoded with the earlier turns (the image, your questions, the model's answers).")
#: How much of an answer a turn picker's label quotes.
LABEL_CHARS = 40

_TURN = ("margin:4px 0;padding:6px 8px;border-radius:6px;border:1px solid {border};"
         "background:{background}")
_TEXT = "white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0"


def _text(value: str) -> str:
    return html.escape(value, quote=True)


def turn_label(trace: DecodeTrace, turn: int) -> str:
    """A turn picker's choice: its number and the start of its answer (plain text)."""
    answer = " ".join(trace.text.split())
    if len(answer) > LABEL_CHARS:
        answer = answer[: LABEL_CHARS - 1] + "…"
    return f"Answer {turn}: {answer or '(empty)'}"


def turn_choices(traces: list[DecodeTrace]) -> list[tuple[str, int]]:
    """(label, turn number) of every turn, the first turn numbered 1."""
    return [(turn_label(trace, i), i) for i, trace in enumerate(traces, 1)]


def turns_html(traces: list[DecodeTrace], chosen: int, image_src: str | None = None,
               note: str = "") -> str:
    """The turns as HTML: per turn the question, then the answer with its method and MAT; the chosen
    turn (an index) outlined. ``image_src``: the first turn's thumbnail (a data URI), if any."""
    if not traces:
        return f'<div class="recap-conversation">{EMPTY}</div>'
    labels = method_labels()
    parts = ['<div class="recap-conversation">']
    if note:
        parts.append(f'<p style="margin:2px 0"><i>{_text(note)}</i></p>')
    for i, trace in enumerate(traces):
        on = i == chosen
        style = _TURN.format(border="#f59e0b" if on else "#d1d5db", background="#fffbeb" if on else "#ffffff")
        parts.append(f'<div class="recap-turn" data-turn="{i + 1}" style="{style}">')
        if i == 0 and image_src:
            parts.append(f'<img src="{_text(image_src)}" alt="the image" '
                         'style="max-height:72px;float:right">')
        parts.append(f'<div><b>You (turn {i + 1})</b></div>'
                     f'<div class="recap-question" style="{_TEXT}">{_text(trace.prompt)}</div>')
        method = labels.get(trace.method, trace.method)
        facts = f"{method}, {len(trace.token_ids)} tokens in {trace.decode_steps} steps, MAT {trace.mat:.2f}"
        shown = " · shown" if on else ""
        parts.append(f'<div><b>Model</b> <small>({_text(facts)}{shown})</small></div>'
                     f'<div class="recap-answer" style="{_TEXT}">{_text(trace.text)}</div>')
        parts.append('<div style="clear:both"></div></div>')
    parts.append("</div>")
    return "".join(parts)
