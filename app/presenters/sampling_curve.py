"""How it works, sampling: the shipped measurement of tokens per step against temperature, drawn.

``assets/sampling-curve.json`` is written by ``scripts/sampling_curve.py`` (the embedded model,
RECAP and Token Recycling, several seeds, top-k and top-p off); the page only reads it, once
per process, and draws it: no model work when a page loads. A missing or malformed file
gives a figure that says so (the rest of the tab is unaffected).
"""

from __future__ import annotations

import functools
import html
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from recap.core.assets import SAMPLING_CURVE

from ..state.settings import method_labels
from .charts import method_colour
from .text import md_text
from .tree import empty_figure
from .tree_geometry import token_label

CURVE_FILE = SAMPLING_CURVE
FORMAT = "recap-sampling-curve"


@functools.cache
def load_curve(path: Path = CURVE_FILE) -> dict[str, Any] | None:
    """The shipped curve (None: missing, or not a curve of this format with one value per temperature)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    temps, curves = data.get("temperatures"), data.get("tokens_per_step")
    if not isinstance(temps, list) or not isinstance(curves, dict) or not all(
            isinstance(v, list) and len(v) == len(temps) for v in curves.values()):
        return None
    return data


def curve_figure(data: dict[str, Any] | None, *, height: int = 340) -> go.Figure:
    """Tokens per step against temperature, one line per method; its greedy value dotted."""
    if data is None:
        return empty_figure("The sampling curve (assets/sampling-curve.json) is missing: "
                            "python scripts/sampling_curve.py writes it.", height=200)
    labels = method_labels()
    fig = go.Figure()
    temps = data["temperatures"]
    greedy = data.get("greedy_tokens_per_step", {})
    for method, values in data["tokens_per_step"].items():
        colour, label = method_colour(method), labels.get(method, method)
        fig.add_trace(
            go.Scatter(
                x=temps,
                y=values,
                mode="lines+markers",
                name=label,
                line={"color": colour, "width": 3},
                marker={"size": 8},
                hovertemplate=f"{label}, temperature %{{x}}: %{{y:.2f}} tokens per step<extra></extra>",
            )
        )
        if method in greedy:
            fig.add_hline(
                y=greedy[method],
                line_dash="dot",
                line_color=colour,
                annotation_text=f"{label} greedy {greedy[method]:.2f}",
                annotation_position="top right",
                annotation_font_size=10,
            )
    fig.add_hline(y=1, line_color="#9ca3af", annotation_text="1: no gain (one token per step)",
                  annotation_position="bottom left", annotation_font_size=10)
    fig.update_layout(
        title={
            "text": f"Tokens per step against temperature ({html.escape(str(data.get('model', ''))[:40])}, "
            "top-k and top-p off, shipped measurement)",
            "x": 0.01,
            "font": {"size": 13},
        },
        height=height,
        template="plotly_white",
        margin={"l": 50, "r": 20, "t": 40, "b": 45},
        xaxis={"title": "temperature"},
        yaxis={"title": "tokens per step", "rangemode": "tozero"},
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    return fig


def example_markdown(data: dict[str, Any] | None) -> str:
    """The worked example: one sampled step's root, its drafted children's chances and the draw ("": none)."""
    ex = (data or {}).get("example")
    if not isinstance(ex, dict) or not ex.get("children"):
        return ""

    def tok(text: Any) -> str:
        return f"“{md_text(token_label(str(text), 20))}”"

    kids = ex["children"]
    chances = ", ".join(f"{tok(k['text'])} **{float(k['accept_prob']):.2f}**" for k in kids)
    mass = sum(float(k["accept_prob"]) for k in kids)
    drawn = next((k for k in kids if k.get("accepted")), None)
    context = md_text("".join(str(t) for t in ex.get("context", [])), 80)
    outcome = (
        f"It drew {tok(ex['drawn'])}, a drafted child: the walk went on into it, and the step emitted "
        f"{int(ex.get('accepted_tokens', 0))} tokens."
        if drawn is not None
        else f"It drew {tok(ex['drawn'])}, which no child carried: that token is the bonus, "
        "and the step ended."
    )
    return (
        f"**An example** (RECAP on the embedded model, temperature {float(ex['temperature']):g}, seed "
        f"{md_text(ex.get('seed'), 12)}, step {int(ex.get('step', 0))}). After “…{context}” the drafter "
        "proposed "
        f"{len(kids)} next tokens. The target's distribution there gave them {chances}: "
        "the draw names one of "
        ""
        f"them with probability {mass:.2f}, and each is accepted with exactly its own probability. {outcome}"
    )
