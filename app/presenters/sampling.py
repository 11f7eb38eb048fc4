"""What a sampled step says about its draws, from the trace alone (pure functions, no Gradio, no model).

Under sampling (``recap.verification.sampling``) the target draws one token at each node of its
walk, from the root down: a draw that names a drafted child continues into that child, any
other draw is the bonus token. The trace records the walk (``TraceStep.drawn``: at those nodes
``target_token`` is the draw; elsewhere it is the most probable token, no draw was made there)
and per node the probability that the draw at its parent was its token
(``TraceStep.accept_probs``: its chance of being accepted; the root 1). A greedy step records
neither, and every function here then says nothing ("" / None / []).

The tree's hover (``app.presenters.tree``) and the node inspector (``app.presenters.fusion``,
``app.widgets.step_panel``)
show these numbers; the texts are HTML-escaped for Plotly, or Markdown-escaped for the
inspector (a trace may be an uploaded file).
"""

from __future__ import annotations

import html

from recap.trace.format import TraceNode, TraceStep

from .text import md_text
from .tree_geometry import token_label


def sampled(step: TraceStep) -> bool:
    """Whether the step was sampled (every sampled step drew at its root at least)."""
    return bool(step.drawn)


def accept_prob(step: TraceStep, index: int) -> float | None:
    """The chance node ``index`` was accepted (its parent's draw being its token); None: greedy or not
    recorded."""
    probs = step.accept_probs
    return float(probs[index]) if sampled(step) and 0 <= index < len(probs) else None


def drew_at(step: TraceStep, index: int) -> bool:
    """Whether the target drew at node ``index`` (its ``target_token`` is the draw)."""
    return index in step.drawn


def _token(text: str) -> str:
    return html.escape(token_label(text, 40, exact=True))


def hover_lines(
    node: TraceNode, step: TraceStep, children_tokens: tuple[int, ...] | list[int]
) -> list[str] | None:
    """The tree hover's lines on the target's token at ``node`` under sampling (None: a greedy step).

    They replace the greedy hover's "target wanted next" line: the draw made here (or why there
    was none) and, for a drafted node, its acceptance probability.
    """
    if not sampled(step):
        return None
    lines = []
    p = accept_prob(step, node.index)
    if node.index > 0 and p is not None:
        lines.append(
            f"acceptance probability <b>{p:.3f}</b> (the chance the draw at its parent was this token)"
        )
    if drew_at(step, node.index):
        how = (
            "a drafted child: the walk went on"
            if node.target_token in children_tokens
            else "no child had it: the bonus"
        )
        lines.append(f"the target drew <b>{_token(node.target_text)}</b> here ({how})")
    else:
        lines.append(f"no draw here (the walk did not reach this node); most probable next: "
                     f"{_token(node.target_text)}")
    return lines


def children_mass(step: TraceStep, parent: int) -> float | None:
    """The summed acceptance probabilities of ``parent``'s drafted children: the chance its draw went on."""
    probs = [accept_prob(step, n.index) for n in step.nodes[1:] if n.parent == parent]
    known = [p for p in probs if p is not None]
    return sum(known) if known and len(known) == len(probs) else None


def bonus_line(step: TraceStep) -> str:
    """The bonus star's hover line under sampling ("" for a greedy step)."""
    if not sampled(step):
        return ""
    mass = children_mass(step, step.accepted[-1])
    tail = f"; the drafted children there held {mass:.3f} of its probability" if mass is not None else ""
    return f"drawn by the target after the accepted path{tail}"


def inspector_markdown(step: TraceStep, node: int) -> str:
    """The inspector's Markdown line on the choice after ``node``: the draw made there (or why there
    was none) and each drafted child's acceptance probability; token texts escaped. "" for a greedy step."""
    if not sampled(step) or not 0 <= node < len(step.nodes):
        return ""
    ctx = step.nodes[node]
    kids = [n for n in step.nodes[1:] if n.parent == node]
    parts = []
    if drew_at(step, node):
        parts.append(
            f"🎲 **Sampled**: at node {node} the target drew “{md_text(token_label(ctx.target_text, 30))}”"
        )
    else:
        parts.append(
            f"🎲 **Sampled run**: no draw at node {node} (the walk did not reach it); its most probable "
            f"next token is “{md_text(token_label(ctx.target_text, 30))}”"
        )
    chances = []
    for k in kids[:8]:
        p = accept_prob(step, k.index)
        mark = " ✓" if k.accepted else ""
        chances.append(f"“{md_text(token_label(k.text, 20))}” {p:.3f}{mark}" if p is not None else
                       f"“{md_text(token_label(k.text, 20))}”")
    if chances:
        more = " …" if len(kids) > 8 else ""
        mass = children_mass(step, node)
        total = (
            f" (together {mass:.3f}: the chance the draw here named a drafted child)"
            if mass is not None
            else ""
        )
        parts.append("acceptance probability of each drafted child: " + ", ".join(chances) + more + total)
    return " · ".join(parts)
