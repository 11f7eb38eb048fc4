"""The node inspector: how the drafter chose what follows one tree node, drawn from the trace.

RECAP's draft at a node is a fusion: each memory that knows the node's context (M3, M2,
M1) offers its top-k next tokens, each weighted by specificity x concentration, and the
weighted sum is the fused distribution the best-first search draws children from. The
trace keeps, on every child, the sources it was fused from (all children of a node share
them), so the picture is rebuilt here without a model:

* one panel per memory source: its top-k renormalised over k (what fusion mixes), titled
  with its fusion weight, entropy and concentration;
* a panel per chain proposal (suffix match, prompt lookup): the token it copied;
* the fused distribution, each bar stacked from the sources' weighted shares, so one sees
  why the winner won;
* drafted children marked, the target's own next token outlined.

Token Recycling nodes have one source (M1, weight 1); prompt-lookup nodes one chain.
Everything is a pure function of a ``TraceStep``.
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from recap.trace.format import SourceInfo, TraceStep
from recap.trace.mixture import mixture

from . import sampling as sampling_view
from .tree import ORIGIN_COLORS, origin_colour, token_label

SOURCE_NAMES = {"m1": "M1 (1-token)", "m2": "M2 (2-token)", "m3": "M3 (3-token)", "suffix": "suffix match",
                "lookup": "prompt lookup"}
FUSED_COLOR = ORIGIN_COLORS["mixed"]
TARGET_OUTLINE = "#111827"


@dataclass(frozen=True)
class Bar:
    """One candidate token in a panel."""

    token: int
    text: str
    prob: float  # within its panel: renormalised over the source's k, or fused
    drafted: int | None = None  # index of the child node carrying this token, if drafted
    # the target's own next token after the context node (under sampling: its draw, if any)
    target: bool = False
    accept: float | None = None  # a drafted child's acceptance probability under sampling (None: greedy)


@dataclass(frozen=True)
class SourcePanel:
    """One source's proposal at the context node (a memory entry, or a chain)."""

    kind: str  # m1 / m2 / m3, or "suffix" / "lookup" for a chain proposal (not fused)
    bars: list[Bar]
    weight: float | None = None  # normalised fusion weight (None for a chain)
    entropy: float | None = None
    concentration: float | None = None
    request: int = -1  # provenance of the memory entry (-1: a chain of this request)
    step: int = 0
    depth: int = 0
    same_image: bool | None = None
    partial: bool = False  # an older trace without the entry's top-k: only drafted tokens known

    @property
    def fused(self) -> bool:
        return self.weight is not None


@dataclass(frozen=True)
class FusionChoice:
    """What the drafter saw after one node: sources, the fused distribution, the children."""

    step: int
    node: int  # the context node (its children are the proposals shown)
    context_text: str
    target_token: int
    target_text: str
    sources: list[SourcePanel] = field(default_factory=list)  # fused memory sources, most specific first
    chains: list[SourcePanel] = field(default_factory=list)
    fused: list[Bar] = field(default_factory=list)  # fused distribution, most probable first
    selected: int | None = None  # the node the visitor picked, when it is one of the children
    sampled: bool = False  # the step sampled: ``target_token`` is the draw when ``drew`` (else the mode)
    drew: bool = False

    @property
    def children(self) -> list[int]:
        bars = [b for p in (*self.sources, *self.chains) for b in p.bars] + self.fused
        return sorted({b.drafted for b in bars if b.drafted is not None})


def _panel(src: SourceInfo, drafted: dict[int, int], target: int) -> SourcePanel:
    if src.top_ids:
        mass = sum(src.top_probs) or 1.0
        bars = [Bar(t, txt, p / mass, drafted.get(t), t == target)
                for t, txt, p in zip(src.top_ids, src.top_texts or [""] * len(src.top_ids), src.top_probs)
                if p > 0 or t in drafted]  # a drafted token stays even when its probability rounded to 0
        partial = False
    else:  # version-1 trace: only the entry's top-1 and the drafted children's probabilities are known
        known = {src.top_token: (src.top_text, src.top_prob)} if src.top_token >= 0 else {}
        bars = [Bar(t, txt, p, drafted.get(t), t == target) for t, (txt, p) in known.items()]
        partial = True
    return SourcePanel(
        src.kind,
        bars,
        src.weight,
        src.entropy,
        src.concentration,
        src.request,
        src.step,
        src.depth,
        src.same_image,
        partial,
    )


def fuse_panels(panels: list[SourcePanel]) -> list[tuple[int, float]]:
    """The fused distribution of memory panels: sum_j w_j q_j, most probable first (ties keep
    first-seen order, as the drafting kernel's do): ``recap.trace.mixture``, the arithmetic the
    trace's origins are computed with."""
    fused = mixture((p.weight, [b.token for b in p.bars], [b.prob for b in p.bars]) for p in panels)
    return sorted(fused.items(), key=lambda kv: kv[1], reverse=True)


def fusion_choice(step: TraceStep, node: int, *, selected: int | None = None) -> FusionChoice:
    """The choice the drafter made after ``node`` (its children and where they came from)."""
    nodes = step.nodes
    if not 0 <= node < len(nodes):
        raise ValueError(f"step {step.step} has nodes 0..{len(nodes) - 1}, not {node}")
    ctx = nodes[node]
    kids = [n for n in nodes if n.parent == node]
    drafted = {k.token: k.index for k in kids}
    with_sources = [k for k in kids if k.sources]
    panels = [_panel(s, drafted, ctx.target_token) for s in (with_sources[0].sources if with_sources else [])]
    texts = {b.token: b.text for p in panels for b in p.bars} | {k.token: k.text for k in kids}
    fused = [
        Bar(t, texts.get(t, ""), p, drafted.get(t), t == ctx.target_token) for t, p in fuse_panels(panels)
    ]
    chains = [
        SourcePanel("lookup" if k.origin == "lookup" else "suffix", [Bar(k.token, k.text, 1.0, k.index,
                                                                         k.token == ctx.target_token)])
        for k in kids if not k.sources
    ]
    if sampling_view.sampled(step):  # each drafted bar carries its child's acceptance probability
        def chance(bar: Bar) -> Bar:
            p = None if bar.drafted is None else sampling_view.accept_prob(step, bar.drafted)
            return dataclasses.replace(bar, accept=p)

        panels = [dataclasses.replace(p, bars=[chance(b) for b in p.bars]) for p in panels]
        chains = [dataclasses.replace(p, bars=[chance(b) for b in p.bars]) for p in chains]
        fused = [chance(b) for b in fused]
    return FusionChoice(
        step.step,
        node,
        ctx.text,
        ctx.target_token,
        ctx.target_text,
        panels,
        chains,
        fused,
        selected,
        sampled=sampling_view.sampled(step),
        drew=sampling_view.drew_at(step, node),
    )


def inspect_node(step: TraceStep, node: int) -> FusionChoice:
    """The inspector's view for a picked node: the choice after it, or, for a leaf, the
    choice that drafted it (at its parent), with the node marked."""
    if not 0 <= node < len(step.nodes):
        raise ValueError(f"step {step.step} has nodes 0..{len(step.nodes) - 1}, not {node}")
    if node == 0 or any(n.parent == node for n in step.nodes):
        return fusion_choice(step, node)
    return fusion_choice(step, step.nodes[node].parent, selected=node)


def node_choices(step: TraceStep) -> list[tuple[str, int]]:
    """Dropdown entries for the step's nodes: 'index: token (depth d, accepted)'."""
    out = []
    for n in step.nodes:
        state = "root" if n.index == 0 else ("accepted" if n.accepted else "rejected")
        out.append((f"{n.index}: {token_label(n.text, 20)} (depth {n.depth}, {state})", n.index))
    return out


# --------------------------------------------------------------------------- figure


def panel_title(panel: SourcePanel) -> str:
    if not panel.fused:
        return f"{SOURCE_NAMES.get(panel.kind, panel.kind)}<br>copied from earlier text"
    older = " (older trace: its top-1 only)" if panel.partial else ""
    return (f"{panel.kind.upper()}: weight {panel.weight:.2f}{older}<br>entropy {panel.entropy:.2f} · "
            f"concentration {panel.concentration:.2f}")


def _bar_text(bar: Bar, choice: FusionChoice) -> str:
    text = f"{bar.prob:.2f}" if bar.prob >= 0.01 or bar.prob == 0 else f"{bar.prob:.0e}"
    if bar.accept is not None:  # sampling: the target's chance of drawing it (the bar: the memory's)
        text += f" · accept {bar.accept:.2f}"
    if bar.drafted is not None and bar.drafted == choice.selected:
        text += " picked"
    return text + (f" ← {target_word(choice)}" if bar.target else "")


def target_word(choice: FusionChoice) -> str:
    """What the outlined bar is: the target's token (greedy), its draw, or its mode where it drew nothing."""
    if not choice.sampled:
        return "target"
    return "drawn" if choice.drew else "target's mode"


def _labels(bars: list[Bar]) -> list[str]:
    """Token labels (unique per panel: a token id suffix only where two texts coincide)."""
    texts = [token_label(b.text) for b in bars]
    return [html.escape(t if texts.count(t) == 1 else f"{t} #{b.token}") for t, b in zip(texts, bars)]


def _hover(bar: Bar) -> str:
    state = f"drafted as node {bar.drafted}" if bar.drafted is not None else "not drafted"
    if bar.accept is not None:
        state += f", acceptance probability {bar.accept:.4f}"
    return (
        f"{html.escape(token_label(bar.text, 30, exact=True))} (token {bar.token}): {bar.prob:.4f}, {state}"
        + (", the target's token" if bar.target else "")
    )


def fusion_figure(choice: FusionChoice, *, height: int = 320) -> go.Figure:
    """Each source's top-k as bars, then the fused distribution stacked by source."""
    panels = [*choice.sources, *choice.chains]
    if not panels:
        fig = go.Figure()
        fig.add_annotation(text=f"Nothing was drafted after node {choice.node}: no memory knew this context.",
                           x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False)
        fig.update_layout(
            height=160, xaxis={"visible": False}, yaxis={"visible": False}, template="plotly_white"
        )
        return fig
    cols = len(panels) + (1 if choice.fused else 0)
    titles = [panel_title(p) for p in panels] + (
        ["fused = \u03a3 weight \u00d7 source"] if choice.fused else []
    )
    fig = make_subplots(rows=1, cols=cols, subplot_titles=titles, horizontal_spacing=min(0.16, 0.6 / cols))
    for col, panel in enumerate(panels, start=1):
        bars = panel.bars
        color = origin_colour(panel.kind)
        fig.add_trace(
            go.Bar(
                y=_labels(bars),
                x=[b.prob for b in bars],
                orientation="h",
                name=SOURCE_NAMES.get(panel.kind, panel.kind),
                marker={
                    "color": color,
                    "opacity": [1.0 if b.drafted is not None else 0.45 for b in bars],
                    "line": {
                        "color": [TARGET_OUTLINE if b.target else color for b in bars],
                        "width": [3 if b.target else 0 for b in bars],
                    },
                },
                text=[_bar_text(b, choice) for b in bars],
                textposition="outside",
                cliponaxis=False,
                customdata=[b.token for b in bars],
                hovertext=[_hover(b) for b in bars],
                hoverinfo="text",
                legendgroup=panel.kind,
                showlegend=False,
                meta={"panel": panel.kind},
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=col)
        fig.update_xaxes(range=[0, 1.7], showticklabels=False, row=1, col=col)
    if choice.fused:
        labels = _labels(choice.fused)
        for panel in choice.sources:
            share = {b.token: (panel.weight or 0.0) * b.prob for b in panel.bars}
            fig.add_trace(go.Bar(
                y=labels, x=[share.get(b.token, 0.0) for b in choice.fused], orientation="h",
                marker={"color": origin_colour(panel.kind)}, name=f"{panel.kind} share",
                hovertemplate=f"{panel.kind}: %{{x:.3f}}<extra></extra>", showlegend=False,
                meta={"panel": "fused-share", "kind": panel.kind},
            ), row=1, col=cols)
        fig.add_trace(
            go.Scatter(
                y=labels,
                x=[b.prob for b in choice.fused],
                mode="markers+text",
                text=[_bar_text(b, choice) for b in choice.fused],
                textposition="middle right",
                cliponaxis=False,
                name="fused",
                marker={"symbol": "line-ns", "size": 14, "line": {"width": 2, "color": FUSED_COLOR}},
                customdata=[b.token for b in choice.fused],
                hovertext=[_hover(b) for b in choice.fused],
                hoverinfo="text",
                showlegend=False,
                meta={"panel": "fused"},
            ),
            row=1,
            col=cols,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=cols)
        fig.update_xaxes(range=[0, 1.7], showticklabels=False, row=1, col=cols)
    fig.update_layout(barmode="stack", height=height, template="plotly_white", bargap=0.25,
                      margin={"l": 10, "r": 40, "t": 70, "b": 30},
                      title={"text": html.escape(choice_heading(choice)), "x": 0.01, "font": {"size": 13}})
    outlined = "the target's draw (its mode where it drew none)" if choice.sampled else "the target's token"
    fig.add_annotation(text=f"opaque: drafted · outlined: {outlined}", x=1, y=-0.08, xref="paper",
                       yref="paper", showarrow=False, xanchor="right", font={"size": 10, "color": "#4b5563"})
    fig.update_annotations(font_size=11)
    return fig


def choice_heading(choice: FusionChoice) -> str:
    head = f"Step {choice.step}, after node {choice.node} ({token_label(choice.context_text, 20)})"
    if choice.selected is not None:
        head += f": how node {choice.selected} was drafted"
    target = token_label(choice.target_text, 20)
    if choice.sampled:
        return head + (
            f" · the target drew {target}" if choice.drew else f" · no draw here (most probable: {target})"
        )
    return head + f" · the target wanted {target}"


def telling_node(step: TraceStep) -> int:
    """The node whose choice shows the fusion best: on the accepted path, the one whose
    children were fused from the most sources (earliest on ties; the root if none)."""
    def n_sources(i: int) -> int:
        return max((len(k.sources) for k in step.nodes if k.parent == i), default=0)

    return max(step.accepted, key=lambda i: (n_sources(i), -step.nodes[i].depth))
