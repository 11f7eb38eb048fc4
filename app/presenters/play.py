"""Play a step: the tree grows, is verified, and its accepted path and bonus token appear.

``play_figure(step)`` is a Plotly figure with frames, drawn and animated in the browser
(no model, no server round trip: uploaded traces play too):

1. **draft**: nodes appear in the order the drafter added them (``TraceStep.insertion_order``;
   best-first search pops the most promising candidate first), suffix-chain nodes ringed;
2. **verify**: depth by depth, each node turns accepted (yellow halo) or rejected (faded;
   a red ring where the target's token differed from a child of an accepted node, named
   in the frame's title);
3. **accept**: the bonus token appears after the accepted path.

Every frame draws the same traces as ``app.presenters.tree.tree_figure`` (``tree_traces``); the
last frame is the finished tree, and the figure's own data is that finished tree, so the
static view is unchanged until Play is pressed. ``run_play_figure(trace)`` plays the
whole run, each step condensed to a few frames.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace

import plotly.graph_objects as go

from recap.trace.format import DecodeTrace, TraceStep

from . import sampling as sampling_view
from .tree import FINISHED, TreeState, step_heading, token_label, tree_layout_dict, tree_traces
from .tree_geometry import MARGIN, tree_geometry

DEFAULT_FRAME_MS = 450
RUN_FRAMES_PER_GROWTH = 3  # frames of tree growth per step when playing a whole run
CONTROLS_PX = 40  # extra top margin of a play figure: its buttons and slider


@dataclass(frozen=True)
class Moment:
    """One frame of a play: its phase, what it shows, and its caption."""

    phase: str  # "draft", "verify", "accept"
    state: TreeState
    caption: str
    name: str


def _q(text: str) -> str:
    return "\u201c" + token_label(text, 24) + "\u201d"


def step_moments(step: TraceStep, *, growth_frames: int | None = None) -> list[Moment]:
    """The frames of one step, in order (the last one shows the finished tree).

    growth_frames: how many frames the drafting phase gets (None: one per node).
    """
    order = step.insertion_order()
    n = len(order)
    moments: list[Moment] = []
    cuts = list(range(1, n + 1)) if growth_frames is None else sorted(
        {max(1, round(n * (i + 1) / growth_frames)) for i in range(max(1, growth_frames))})
    for k in cuts:
        shown = frozenset(order[:k])
        newest = step.nodes[order[k - 1]]
        what = "the root (last accepted token)" if k == 1 else f"node {newest.index} {_q(newest.text)}"
        chain = " (suffix chain)" if newest.suffix and k > 1 else ""
        moments.append(
            Moment(
                "draft",
                TreeState(shown=shown, verified=frozenset(), bonus=False, suffix_rings=True),
                f"Step {step.step} · draft {k - 1}/{n - 1}: {what}{chain}",
                f"s{step.step}-d{k - 1}",
            )
        )
    all_nodes = frozenset(range(n))
    on_path = step.accepted
    for d in range(1, len(on_path) + 1):
        # Verification is one forward pass; the play reads its result level by level, as
        # acceptance does: down the path while a child carries the target's token.
        last = d == len(on_path) or d > max(node.depth for node in step.nodes)
        verified = all_nodes if last else frozenset(i for i, node in enumerate(step.nodes) if node.depth <= d)
        moments.append(
            Moment(
                "verify",
                TreeState(shown=all_nodes, verified=verified, bonus=False, rejected_rings=True),
                f"Step {step.step} · depth {d}: {_verdict(step, d)}",
                f"s{step.step}-v{d}",
            )
        )
        if last:
            break
    accepted = len(on_path) - 1
    moments.append(Moment("accept", FINISHED,
                          f"Step {step.step} · accept {accepted} drafted + the bonus {_q(step.bonus_text)} "
                          f"\u2192 {len(step.emitted)} tokens", f"s{step.step}-a"))
    return moments


def _verdict(step: TraceStep, depth: int) -> str:
    """What verification found one level below the accepted path's node at ``depth - 1``."""
    path = step.accepted
    parent = step.nodes[path[depth - 1]]
    verb = "draws" if sampling_view.sampled(step) else "wants"  # under sampling the walk's nodes hold draws
    wants = f"after {_q(parent.text)} the target {verb} {_q(parent.target_text)}"
    if depth < len(path):
        p = sampling_view.accept_prob(step, path[depth])
        return f"{wants}: drafted, accepted" + (f" (its chance: {p:.2f})" if p is not None else "")
    if any(node.parent == parent.index and node.token == parent.target_token for node in step.nodes):
        return f"{wants}: the output ends here"
    if not any(node.parent == parent.index for node in step.nodes):
        return f"{wants}: nothing drafted, it is the bonus"
    return f"{wants}: not drafted, it is the bonus"


def _frames(
    step: TraceStep, moments: list[Moment], min_width: float, *, hover: bool = True
) -> list[go.Frame]:
    """Frames of the moments; full hover texts on the finished tree only (with ``hover``)."""
    geom = tree_geometry(step, min_width=min_width)
    layout = tree_layout_dict(geom, "")
    frames = []
    for m in moments:
        state = m.state if hover and m.phase == "accept" else replace(m.state, hover=False)
        frames.append(
            go.Frame(
                data=tree_traces(step, geom, state),
                name=m.name,
                layout={
                    "title": {"text": html.escape(m.caption)},
                    "xaxis": layout["xaxis"],
                    "yaxis": layout["yaxis"],
                    "width": layout["width"],
                    "height": layout["height"] + CONTROLS_PX,
                },
            )
        )
    return frames


def _controls(frames: list[go.Frame], frame_ms: int, labels: list[str], plot_height: float) -> dict:
    """Play / pause buttons and a frame slider (Plotly's own animation controls), in the
    top margin between the title and the plot (paper units: 1 + pixels / plot height)."""
    above = 1 + 12 / plot_height
    play = {
        "frame": {"duration": frame_ms, "redraw": True},
        "transition": {"duration": 0},
        "fromcurrent": True,
        "mode": "immediate",
    }
    return {
        "updatemenus": [
            {
                "type": "buttons",
                "direction": "left",
                "showactive": False,
                "x": 0.0,
                "xanchor": "left",
                "y": above,
                "yanchor": "bottom",
                "pad": {"t": 0, "l": 4},
                "buttons": [
                    {"label": "\u25b6 play", "method": "animate", "args": [None, play]},
                    {
                        "label": "\u275a\u275a pause",
                        "method": "animate",
                        "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}],
                    },
                ],
            }
        ],
        "sliders": [
            {
                "active": len(frames) - 1,
                "x": 0.3,
                "len": 0.7,
                "y": above,
                "yanchor": "bottom",
                "pad": {"t": 0, "b": 0},
                "ticklen": 3,
                "minorticklen": 0,
                "currentvalue": {"visible": False},
                "font": {"size": 9},
                "steps": [
                    {
                        "label": lab,
                        "method": "animate",
                        "args": [[f.name], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate"}],
                    }
                    for f, lab in zip(frames, labels)
                ],
            }
        ],
    }


def play_figure(step: TraceStep, *, frame_ms: int = DEFAULT_FRAME_MS, min_width: float = 640) -> go.Figure:
    """One step as an animation; its static picture is the finished tree."""
    moments = step_moments(step)
    frames = _frames(step, moments, min_width)
    geom = tree_geometry(step, min_width=min_width)
    fig = go.Figure(data=tree_traces(step, geom), frames=frames)
    fig.update_layout(tree_layout_dict(geom, step_heading(step), uirevision=f"play-{step.step}"))
    fig.update_layout(_controls(frames, frame_ms, _phase_labels(moments), geom.plot_height))
    fig.update_layout(margin={"t": MARGIN["t"] + CONTROLS_PX}, height=geom.height + CONTROLS_PX)
    return fig


def run_play_figure(trace: DecodeTrace, *, frame_ms: int = 250, min_width: float = 640,
                    growth_frames: int = RUN_FRAMES_PER_GROWTH) -> go.Figure:
    """The whole run: every step drafts (condensed), verifies and accepts, one after another."""
    if not trace.steps:
        raise ValueError("the trace has no steps to play")
    frames: list[go.Frame] = []
    labels: list[str] = []
    for step in trace.steps:
        moments = step_moments(step, growth_frames=growth_frames)
        frames += _frames(step, moments, min_width, hover=False)
        labels += [str(step.step) if m.phase == "accept" else "" for m in moments]
    # Frames of different steps have different trace sets; every frame carries all of them
    # (tree_traces always returns the same structure for one step), and the figure starts
    # on the last step finished.
    last = trace.steps[-1]
    geom = tree_geometry(last, min_width=min_width)
    fig = go.Figure(
        data=_padded(tree_traces(last, geom), _max_traces(frames)),
        frames=[
            go.Frame(data=_padded(list(f.data), _max_traces(frames)), name=f.name, layout=f.layout)
            for f in frames
        ],
    )
    fig.update_layout(tree_layout_dict(geom, step_heading(last, trace.budget), uirevision="play-run"))
    fig.update_layout(_controls(frames, frame_ms, labels, geom.plot_height))
    fig.update_layout(margin={"t": MARGIN["t"] + CONTROLS_PX}, height=geom.height + CONTROLS_PX)
    return fig


def _phase_labels(moments: list[Moment]) -> list[str]:
    """Slider labels: a phase's name on its first frame, blank on the others."""
    return [m.phase if i == 0 or moments[i - 1].phase != m.phase else "" for i, m in enumerate(moments)]


def _max_traces(frames: list[go.Frame]) -> int:
    return max(len(f.data) for f in frames)


def _padded(traces: list, n: int) -> list:
    """Pad with empty traces: a frame replaces traces by position, so every frame of a run
    carries the same number (steps with fewer origins leave the rest empty)."""
    return traces + [go.Scatter(x=[], y=[], mode="markers", showlegend=False, hoverinfo="skip")
                     for _ in range(n - len(traces))]
