"""Why a step's tree has its size, and where a run's time goes, as Plotly charts and sentences.

Pure figures of ``recap.trace.step_costs`` (``StepSize``, ``TimeSplit``), computed from the trace
alone, so an uploaded trace draws them too. Unknown numbers (a fixed tree has no measured cost; a run
with no one-token baseline) say "unknown" / "not measured", never 0.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from recap.trace.format import DecodeTrace
from recap.trace.step_costs import StepSize, TimeSplit, time_split

from .charts import chart_layout
from .tree import ACCEPTED_COLOR, token_label

TAKEN_COLOUR = "#60a5fa"
NEEDED_COLOUR = "#dc2626"
STOPS = {"cost": "stopped: the next node did not pay", "budget": "stopped at the cap",
         "exhausted": "no candidate left", "": "fixed size"}
PARTS = (("draft", "draft_s", "#2563eb"), ("verify", "verify_s", "#f59e0b"),
         ("update", "update_s", "#16a34a"))


def tps(x: float | None) -> str:
    """Tokens per second, or "unknown"."""
    return "unknown" if x is None else f"{x:,.0f} tokens/s"


def gain_figure(size: StepSize, *, height: int = 300) -> go.Figure:
    """The step's nodes in the order taken, each bar its expected gain (accepted ones in the path's
    colour), the gain needed at the measured cost as a red line, and the stop after the last."""
    fig = go.Figure()
    g = size.gains
    fig.add_trace(go.Bar(
        x=[n.taken for n in g], y=[n.gain for n in g], name="gain of the node taken",
        marker_color=[ACCEPTED_COLOR if n.accepted else TAKEN_COLOUR for n in g],
        # token texts come from the trace (an upload may hold anything): escaped, Plotly renders some HTML
        customdata=[[n.node, html.escape(token_label(n.text)), "accepted" if n.accepted else "not accepted"]
                    for n in g],
        hovertemplate="taken %{x}: node %{customdata[0]} %{customdata[1]} · gain %{y:.3f} "
                      "(%{customdata[2]})<extra></extra>",
    ))
    if size.needed_gain is not None:
        fig.add_hline(y=size.needed_gain, line_color=NEEDED_COLOUR, line_dash="dash",
                      annotation_text=f"needed > {size.needed_gain:.3f}", annotation_position="top right")
    if g:
        fig.add_vline(x=size.stop_at + 0.5, line_color="#111827", line_dash="dot",
                      annotation_text=STOPS.get(size.stop, size.stop), annotation_position="top left")
    fig.update_yaxes(title="expected gain (tokens)", rangemode="tozero")
    title = (f"Step {size.step}: predicted {tps(size.predicted_tps)}, realised {tps(size.realised_tps)}")
    return chart_layout(fig, title, height, xaxis_title="node, in the order taken")


def size_markdown(size: StepSize) -> str:
    """What the gain chart says, with the step's numbers."""
    n = len(size.gains)
    if size.needed_gain is None:
        why = (f"This tree was grown to a fixed size ({n} nodes): no pass cost was measured for it, so the "
               "gain a node needed, and the predicted speed, are unknown.")
    else:
        pass_ms = f"{size.pass_s * 1e3:.2f} ms" if size.pass_s else "unknown"
        why = (f"Growth took a node while its gain exceeded **{size.needed_gain:.3f}**, the gain that pays "
               f"for its share of the pass at the measured cost (pass {pass_ms}); it took **{n}** and "
               f"{STOPS.get(size.stop, size.stop)}.")
    secs = f"{size.seconds * 1e3:.2f} ms" if size.seconds > 0 else "unknown time"
    return (f"{why} Expected **{size.expected_tokens:.2f}** tokens (1 + the gains); emitted "
            f"**{size.emitted}** in {secs}: predicted {tps(size.predicted_tps)}, realised "
            f"{tps(size.realised_tps)}. "
            "Each bar is one node, in the order the drafter took it; yellow ones were accepted.")


def time_figure(split: TimeSplit, *, height: int = 420) -> go.Figure:
    """Top: cumulative draft / verify / update milliseconds step by step (stacked), and one-token decoding
    of the same tokens as a dashed line when its pass time is known. Below: the tokens each pass emitted
    against the break-even line (the tokens per pass a tree of this size must reach to pay)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.06)
    for name, attr, colour in PARTS:
        fig.add_trace(go.Scatter(
            x=list(split.steps), y=[1e3 * v for v in getattr(split, attr)], name=name, stackgroup="time",
            line={"color": colour, "width": 1}, hovertemplate=f"after step %{{x}}: {name} %{{y:.1f}} ms"
                                                             "<extra></extra>",
        ), row=1, col=1)
    if split.one_token_s > 0:
        fig.add_trace(go.Scatter(
            x=list(split.steps), y=[1e3 * split.one_token_s * t for t in split.tokens],
            name="one-token decoding", mode="lines", line={"color": "#111827", "dash": "dash"},
            customdata=list(split.tokens),
            hovertemplate="%{customdata} tokens one at a time: %{y:.1f} ms<extra></extra>",
        ), row=1, col=1)
    per_pass = [b - a for a, b in zip((0, *split.tokens), split.tokens)]
    fig.add_trace(go.Bar(x=list(split.steps), y=per_pass, name="tokens per pass", marker_color="#9ca3af",
                         showlegend=False, hovertemplate="step %{x}: %{y} tokens<extra></extra>"),
                  row=2, col=1)
    if split.break_even is not None:
        fig.add_hline(y=split.break_even, line_color=NEEDED_COLOUR, line_dash="dash", row=2, col=1,
                      annotation_text=f"break-even {split.break_even:.2f}", annotation_position="top left")
    fig.update_yaxes(title="ms (cumulative)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="tokens", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title="step", row=2, col=1)
    chart_layout(fig, "Where the time goes", height, xaxis_title="")
    return fig


def time_markdown(split: TimeSplit) -> str:
    """The run's time in numbers, and the break-even: what a tree of this size must reach to pay."""
    if not split.steps:
        return "No steps: nothing was timed."
    total = split.total_s
    shares = " / ".join(f"{name} {getattr(split, attr)[-1] / total:.0%}" if total > 0 else f"{name} –"
                        for name, attr, _ in PARTS)
    head = (f"**{total * 1e3:.1f} ms** over {len(split.steps)} passes ({shares}) for {split.tokens[-1]} "
            f"tokens, **{split.tokens_per_pass:.2f}** per pass.")
    if split.break_even is None:
        return (head + " One-token decoding's pass time is **not measured** for this run (Compare "
                "measures it with its autoregressive run), so the break-even is unknown.")
    source = "the autoregressive run of this comparison" if split.one_token_source == "ar run" else \
        "the pass cost at 0 nodes the trace's sizing recorded"
    verdict = "pays" if split.tokens_per_pass > split.break_even else "does not pay"
    return (head + f" One-token decoding: {split.one_token_s * 1e3:.2f} ms a token ({source}), "
            f"{(split.one_token_total_s or 0) * 1e3:.1f} ms for the same tokens. **Break-even: "
            f"{split.break_even:.2f} tokens per pass** (a pass at this size, "
            f"{split.mean_pass_s * 1e3:.2f} ms, over a one-token pass): at {split.tokens_per_pass:.2f} the "
            f"tree {verdict}.")


def times_by_method(splits: Mapping[str, TimeSplit], colours: Mapping[str, str], *,
                    height: int = 300) -> go.Figure:
    """Compare: each method's cumulative decode time against the tokens it has emitted, one line each."""
    fig = go.Figure()
    for name, s in splits.items():
        total = [1e3 * (a + b + c) for a, b, c in zip(s.draft_s, s.verify_s, s.update_s)]
        fig.add_trace(go.Scatter(
            x=list(s.tokens), y=total, name=html.escape(name), mode="lines",
            line={"color": colours.get(name), "shape": "hv"},
            hovertemplate=f"{html.escape(name)}: %{{x}} tokens in %{{y:.1f}} ms<extra></extra>",
        ))
    fig.update_yaxes(title="ms (draft + verify + update)", rangemode="tozero")
    fig.update_layout(legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0}, margin={"b": 70})
    return chart_layout(fig, "Time to emit the tokens, by method", height, xaxis_title="tokens emitted")


def methods_time_markdown(traces: Mapping[str, DecodeTrace], reference: str,
                          labels: Mapping[str, str]) -> str:
    """Compare: each method's tokens per pass against its break-even, one-token pass time from the
    ``reference`` (autoregressive) run of the same request."""
    ar = traces.get(reference)
    lines = []
    for name, trace in traces.items():
        if name == reference or not trace.steps:
            continue
        s = time_split(trace, ar)
        label = labels.get(name, name)
        if s.break_even is None:
            lines.append(f"- {label}: {s.tokens_per_pass:.2f} tokens per pass; break-even not measured")
            continue
        verdict = "pays" if s.tokens_per_pass > s.break_even else "does not pay"
        lines.append(f"- {label}: **{s.tokens_per_pass:.2f}** tokens per pass against a break-even of "
                     f"**{s.break_even:.2f}** (a pass {s.mean_pass_s * 1e3:.2f} ms, one token "
                     f"{s.one_token_s * 1e3:.2f} ms): it {verdict}")
    head = ("Break-even: the tokens per pass a method's trees must reach to beat one-token decoding, its "
            "mean pass time over the autoregressive run's.")
    return head + ("\n\n" + "\n".join(lines) if lines else "")
