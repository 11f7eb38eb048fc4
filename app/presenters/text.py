"""Trace -> what the text widgets show (pure functions, no Gradio, no model).

The output text is split into one segment per generated token, labelled with the step
that produced it and whether it was a drafted token the target accepted or the bonus
token (the target's own next token after the accepted path).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recap.trace.format import DecodeTrace, TraceSampling

from ..boundary.errors import redact
from ..state.memories import MemoryFacts
from ..state.settings import method_labels, short_name
from ..state.steps import token_steps

DRAFTED_COLORS = ("#bfdbfe", "#bbf7d0")  # alternating by step parity: blue, green
BONUS_COLORS = ("#fecaca", "#fed7aa")  # red, orange
CURRENT_COLOR = "#fde047"  # tokens of the step shown in the tree


@dataclass(frozen=True)
class TokenSpan:
    index: int  # position in the generated tokens
    text: str  # display text (with the whitespace before it)
    step: int
    bonus: bool


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


def highlighted(
    trace: DecodeTrace | None, current: int | None = None
) -> tuple[list[tuple[str, str]], dict[str, str]]:
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


#: How the counters line marks a run that no model ran here (by ``Run.source``).
RUN_ORIGINS = {
    "upload": " · loaded from a trace file (no model run)",
    "example": " · **shipped example run** (recorded, no model run here): press **Run** to decode your own",
}


def status_markdown(
    trace: DecodeTrace | None, *, running: bool = False, source: str = "run", note: str = ""
) -> str:
    """The counters line: tokens, steps, tokens per step, tokens/s and the run's state."""
    if trace is None:
        return "No run yet. Pick an example or upload an image, type a question and press **Run**."
    n = len(trace.token_ids)
    steps = trace.decode_steps
    state = STOP_REASONS.get(trace.stop_reason) or md_text(trace.stop_reason, 60)
    if not running and not trace.stop_reason:
        state = "interrupted"
    method = method_markdown(trace.method)
    origin = RUN_ORIGINS.get(source, "")
    parts = [
        f"**{method}** · {state}{origin}",
        f"**{n}** tokens · **{steps}** steps · **{trace.mat:.2f}** tokens/step · "
        f"**{tokens_per_second(trace):.1f}** tokens/s (decode compute {compute_seconds(trace):.2f} s)",
        f"model {md_text(model_label(trace.model), 80)} · request {trace.request} · prompt "
        f"{trace.prompt_tokens} tokens"
        + (f" · tree budget {trace.budget}" if trace.budget else ""),
    ]
    if trace.sampling is not None:
        parts.append(f"🎲 sampled: {sampling_summary(trace.sampling)} (the accepted path is the sampled one)")
    if note:
        parts.append(note)
    return "  \n".join(parts)


#: The warpers a trace's sampling settings name, in generate()'s order, as the views label them.
SAMPLING_LABELS = (("temperature", "temperature"), ("top_h", "top-h"), ("top_k", "top-k"), ("top_p", "top-p"),
                   ("min_p", "min-p"), ("typical_p", "typical-p"), ("epsilon_cutoff", "epsilon cutoff"),
                   ("eta_cutoff", "eta cutoff"))


def sampling_summary(sampling: TraceSampling | Mapping[str, Any]) -> str:
    """``temperature 0.7 · top-p 0.9 · seed 1234``: the warpers on (top-k and top-p always, "off" when
    off) and the seed; the settings of a trace or a comparison's JSON (a file's values: escaped)."""
    values = dict(sampling) if isinstance(sampling, Mapping) else vars(sampling)
    parts = []
    for name, label in SAMPLING_LABELS:
        value = values.get(name)
        if value is not None:
            parts.append(f"{label} {md_text(f'{value:g}' if isinstance(value, float) else value, 24)}")
        elif name in ("top_k", "top_p"):
            parts.append(f"{label} off")
    seed = values.get("seed")
    parts.append(f"seed {md_text(seed, 24)}" if seed is not None else "torch's default generator (no seed)")
    return " · ".join(parts)


WARM = "the shipped **warm memory** (training scenes decoded by the embedded model, never the examples)"
#: How a memory panel says where a memory came from (by ``MemorySlot.origin``).
MEMORY_ORIGINS = {"warm": f"It started from {WARM}.", "file": "It was loaded from a **file**.",
                  "empty": "It started **empty**."}


def memory_markdown(facts: MemoryFacts) -> str:
    """What the memory panels say of a memory: its rows, the requests that wrote it, where it came from.

    Before the memory is made (no run used it yet): what the first run will start from.
    """
    rows = f"**{facts.filled}** of {facts.vocab_size} rows filled, written by {facts.requests} request(s)"
    if not facts.made:
        if facts.origin == "warm":
            return f"{rows}: your first run starts from {WARM}, and adds to it."
        return "empty: your first run starts it, and it fills as you run requests."
    return f"{rows}. {MEMORY_ORIGINS[facts.origin]} It persists across your runs."


def model_label(model: str) -> str:
    """A trace's model as the views name it: its short name (a path recorded elsewhere loses its folders)."""
    return short_name(model.replace("\\", "/")) if ("/" in model or "\\" in model) else model


def error_markdown(message: str) -> str:
    """An error sentence inside Markdown (any visitor text in it shown as typed, no server path)."""
    return f"⚠️ **{md_text(redact(message))}**" if message else ""


def error_html(message: str) -> str:
    """The error box's value (a ``gr.HTML``): the sentence as plain text, bold, no server path."""
    return f"⚠️ <strong>{html.escape(redact(message), quote=False)}</strong>" if message else ""
