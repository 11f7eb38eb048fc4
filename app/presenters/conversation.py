"""A conversation's turns -> the chat's messages and the turn picker (pure functions, no Gradio, no model).

Each turn is its trace: the question (``trace.prompt``) and the model's answer (``trace.text``),
two messages of the chat (``chat_messages``: a user message, then an assistant one, the
conversation's image inline in the first). Both are a visitor's or a model's text: the chat
shows them with Markdown off, and they are HTML-escaped here, so neither Markdown nor HTML in
them is ever rendered (the chat's message text is set as HTML; escaped, it reads as typed).
"""

from __future__ import annotations

import html
from typing import Any

from recap.trace.format import DecodeTrace

from ..state.settings import method_labels

EMPTY = ("No conversation yet: **Run** a request, then ask a follow-up question below (or attach an "
         "image to your question to start a conversation on it); each answer is decoded with the earlier "
         "turns (the image, your questions, the model's answers).")
#: The chat's label, and the one of a conversation read from a file.
LABEL = "Conversation (click a message: every view shows that turn's decode)"
FILE_LABEL = "Conversation read from a file: for viewing (Run, or attach an image, to start one)"
#: The messages of one turn in the chat: the question, then the answer.
MESSAGES_PER_TURN = 2


def as_text(value: str) -> str:
    """A visitor's or a model's text for a chat message: HTML-escaped, so it is shown as typed."""
    return html.escape(value, quote=False)


def _text(value: str) -> dict[str, str]:
    # a text part, not a bare string: Gradio runs bare strings through inspect.cleandoc (indents lost)
    return {"type": "text", "text": as_text(value)}


def turn_facts(trace: DecodeTrace) -> str:
    """A turn's decode in a few words: method, tokens, steps, MAT."""
    method = method_labels().get(trace.method, trace.method)
    steps = trace.decode_steps
    return (f"{method}, {len(trace.token_ids)} tokens in {steps} step{'' if steps == 1 else 's'}, "
            f"MAT {trace.mat:.2f}")


def turn_label(trace: DecodeTrace, turn: int) -> str:
    """A turn picker's choice: its number and its decode's facts (plain text: Gradio shows it as text)."""
    return f"Turn {turn}: {turn_facts(trace)}"


def turn_choices(traces: list[DecodeTrace]) -> list[tuple[str, int]]:
    """(label, turn number) of every turn, the first turn numbered 1."""
    return [(turn_label(trace, i), i) for i, trace in enumerate(traces, 1)]


def chat_messages(traces: list[DecodeTrace], image: str | None = None,
                  pending: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The turns as the chat's messages (Gradio's messages format): per turn the question, then the answer.

    ``image``: the conversation's image (a file Gradio serves), inline in the first question.
    ``pending``: the question being answered and its answer so far (a decode streaming), after the turns.
    """
    messages: list[dict[str, Any]] = []
    # an empty bubble reads as a glitch: a finished empty answer and one not begun say so
    turns = [(trace.prompt, trace.text or "(an empty answer)") for trace in traces]
    if pending:
        turns.append((pending[0], pending[1] or "…"))
    for i, (question, answer) in enumerate(turns):
        shown = [{"path": image, "alt_text": "the conversation's image"}] if i == 0 and image else []
        messages.append({"role": "user", "content": [*shown, _text(question)]})
        messages.append({"role": "assistant", "content": [_text(answer)]})
    return messages


def turn_of_message(index: int, turns: int) -> int | None:
    """The turn (1 = the first) whose question or answer is the chat's message ``index``; None when that
    message is no turn's (out of range: a stale or forged click)."""
    turn = index // MESSAGES_PER_TURN + 1
    return turn if index >= 0 and turn <= turns else None
