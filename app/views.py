"""Trace -> what the text widgets show (pure functions, no Gradio, no model).

The output text is split into one segment per generated token, labelled with the step
that produced it and whether it was a drafted token the target accepted or the bonus
token (the target's own next token after the accepted path).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.settings import method_labels
from recap.trace.format import DecodeTrace, TraceStep

DRAFTED_COLORS = ("#bfdbfe", "#bbf7d0")  # alternating by step parity: blue, green
BONUS_COLORS = ("#fecaca", "#fed7aa")  # red, orange
CURRENT_COLOR = "#fde047"  # tokens of the step shown in the tree


@dataclass(frozen=True)
class TokenSpan:
    index: int  # position in the generated tokens
    text: str  # display text (with the whitespace before it)
    step: int
    bonus: bool


def token_steps(trace: DecodeTrace) -> list[tuple[int, bool]]:
    """Per generated token: (the step that produced it, whether it was the bonus token)."""
    out: list[tuple[int, bool]] = []
    for s in trace.steps:
        bonus_at = len(s.accepted) - 1  # path (root excluded) then the bonus
        for j, _ in enumerate(s.emitted):
            out.append((s.step, j == bonus_at))
    return out


def token_spans(trace: DecodeTrace) -> list[TokenSpan]:
    """The output split into per-token segments that concatenate back to the text.

    Token texts come from the trace; the whitespace between them is recovered by
    aligning them with the decoded text (special tokens the text skips stay visible).
    """
    texts = list(trace.token_texts)
    steps = token_steps(trace)
    if len(texts) < len(steps):
        texts += [f"[{t}]" for t in trace.token_ids[len(texts):len(steps)]]
    full = trace.text
    pos = 0
    spans: list[TokenSpan] = []
    for i, (step, bonus) in enumerate(steps):
        t = texts[i]
        seg = t
        if t.strip():
            found = full.find(t.strip(), pos)
            if found >= 0 and not full[pos:found].strip():
                end = found + len(t.strip())
                seg = full[pos:end]
                pos = end
        spans.append(TokenSpan(i, seg, step, bonus))
    return spans


def span_label(span: TokenSpan) -> str:
    return f"step {span.step} · {'bonus' if span.bonus else 'drafted'}"


def highlighted(trace: DecodeTrace | None, current: int | None = None) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """HighlightedText value and colour map: each token marked by its step and kind."""
    if trace is None:
        return [], {}
    value: list[tuple[str, str]] = []
    colors: dict[str, str] = {}
    for span in token_spans(trace):
        label = span_label(span)
        value.append((span.text, label))
        if span.step == current:
            colors[label] = CURRENT_COLOR
        else:
            colors[label] = (BONUS_COLORS if span.bonus else DRAFTED_COLORS)[span.step % 2]
    return value, colors


def step_of_token(trace: DecodeTrace, index: int) -> int | None:
    steps = token_steps(trace)
    return steps[index][0] if 0 <= index < len(steps) else None


def find_step(trace: DecodeTrace, step: int | None) -> TraceStep | None:
    """The trace step numbered ``step`` (None / out of range: the latest)."""
    if not trace.steps:
        return None
    if step is None:
        return trace.steps[-1]
    step = min(max(int(step), 1), len(trace.steps))
    return trace.steps[step - 1]


def compute_seconds(trace: DecodeTrace) -> float:
    """Seconds the engine spent (prefill + draft + verify + update), UI time excluded."""
    t = trace.timings
    return sum(float(t.get(k, 0.0)) for k in ("prefill", "draft", "verify", "update"))


def tokens_per_second(trace: DecodeTrace) -> float:
    secs = compute_seconds(trace)
    return len(trace.token_ids) / secs if secs > 0 else 0.0


_MARKDOWN = re.compile(r"([\\`*_\[\]()#!|~$])")
_AUTOLINK = re.compile(r"(?i)(www)\.|:(?=//)")


def md_text(value: Any, limit: int | None = None) -> str:
    """Text from a file or a visitor, made safe to put inside Markdown: shown as typed, never as markup.

    The punctuation of links, images, emphasis, code, tables and LaTeX is backslash-escaped,
    bare URLs are kept from turning into links, ``& < >`` become entities (no HTML) and line
    breaks become spaces.
    """
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    text = _MARKDOWN.sub(r"\\\1", text.replace("\r", " ").replace("\n", " "))
    text = _AUTOLINK.sub(lambda m: "www\\." if m.group(1) else "\\:", text)
    return html.escape(text, quote=False)


STOP_REASONS = {
    "eos": "finished (end of sequence)",
    "max_new_tokens": "finished (max new tokens reached)",
    "stopped": "stopped by you (partial run)",
    "": "running…",
}


def listed(words: Sequence[str], conjunction: str = "and") -> str:
    """``a, b and c``: words in a sentence."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" {conjunction} " + words[-1]


def method_markdown(name: str) -> str:
    """A method's label; a name no registered method has (a trace from elsewhere) as plain Markdown text."""
    return method_labels().get(name) or md_text(name, 40)


def status_markdown(trace: DecodeTrace | None, *, running: bool = False, source: str = "run", note: str = "") -> str:
    """The counters line: tokens, steps, tokens per step, tokens/s and the run's state."""
    if trace is None:
        return "No run yet. Pick an example or upload an image, type a question and press **Run**."
    n = len(trace.token_ids)
    steps = trace.decode_steps
    state = STOP_REASONS.get(trace.stop_reason) or md_text(trace.stop_reason, 60)
    if not running and not trace.stop_reason:
        state = "interrupted"
    method = method_markdown(trace.method)
    origin = " · loaded from a trace file (no model run)" if source == "upload" else ""
    parts = [
        f"**{method}** · {state}{origin}",
        f"**{n}** tokens · **{steps}** steps · **{trace.mat:.2f}** tokens/step · "
        f"**{tokens_per_second(trace):.1f}** tokens/s (decode compute {compute_seconds(trace):.2f} s)",
        f"model {md_text(model_label(trace.model), 80)} · request {trace.request} · prompt {trace.prompt_tokens} tokens"
        + (f" · tree budget {trace.budget}" if trace.budget else ""),
    ]
    if trace.notice:
        parts.append(notice_markdown(trace.notice))
    if note:
        parts.append(note)
    return "  \n".join(parts)


def notice_markdown(notice: str) -> str:
    """A trace's notice (its output is not plain generate()'s, e.g. a sampling config decoded greedily).

    The text comes from the trace, which may be an uploaded file: it is shown as typed.
    """
    return f"ℹ️ **Notice:** {md_text(notice, 400)}" if notice else ""


def model_label(model: str) -> str:
    """A trace's model as the views name it: its short name (a path recorded elsewhere loses its folders)."""
    from app.settings import short_name

    return short_name(model.replace("\\", "/")) if ("/" in model or "\\" in model) else model


def error_markdown(message: str) -> str:
    """An error sentence inside Markdown (any visitor text in it shown as typed, no server path)."""
    from app.boundary import redact

    return f"⚠️ **{md_text(redact(message))}**" if message else ""


def error_html(message: str) -> str:
    """The error box's value (a ``gr.HTML``): the sentence as plain text, bold, no server path."""
    from app.boundary import redact

    return f"⚠️ <strong>{html.escape(redact(message), quote=False)}</strong>" if message else ""
