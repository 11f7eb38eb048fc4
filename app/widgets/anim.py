"""A Plotly figure that plays in the browser: ``gr.Plot`` drops a figure's frames, this keeps them.

``AnimatedPlot`` is a ``gr.HTML`` whose value is a figure's JSON (``figure_json``); a few
lines of JavaScript draw it with plotly.js, frames included, so Plotly's own play / pause
buttons and frame slider run client-side: smooth, and without a server round trip (an
uploaded trace plays without a model). plotly.js is the copy shipped inside the ``plotly``
Python package, served by the app itself (no CDN: the app works offline) from a copy in
a temporary folder, so the page never shows where the server keeps its Python packages.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr
import plotly
import plotly.graph_objects as go

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"

_TEMPLATE = "<div class='recap-anim' data-empty='${value === \"\" ? 1 : 0}'></div>"

# Draw (Plotly.react keeps zoom across redraws of the same figure), then register the frames.
_JS = """
const draw = () => {
  const div = element.querySelector('.recap-anim');
  if (!div || typeof Plotly === 'undefined') { setTimeout(draw, 100); return; }
  let fig = null;
  try { fig = JSON.parse(props.value || 'null'); } catch (e) { fig = null; }
  if (!fig) { Plotly.purge(div); div.textContent = ''; return; }
  Plotly.newPlot(div, {data: fig.data, layout: fig.layout, frames: fig.frames || [],
                       config: {displaylogo: false, responsive: false}});
  div.dataset.frames = String((fig.frames || []).length);
};
draw();
watch('value', draw);
"""

CSS = """
.recap-anim { overflow-x: auto; min-height: 40px; }
"""


@functools.cache
def served_plotly_js() -> Path:
    """The copy of plotly.js the app serves (made once per process; it never changes)."""
    folder = Path(tempfile.mkdtemp(prefix="recap-js-"))
    return Path(shutil.copy(PLOTLY_JS, folder / "plotly.min.js"))


def plotly_script_tag() -> str:
    """The <script> that loads the app's copy of plotly.js."""
    return f"<script src='/gradio_api/file={served_plotly_js().as_posix()}'></script>"


def allow_plotly_js() -> None:
    """Let the app serve its copy of plotly.js (idempotent)."""
    gr.set_static_paths([str(served_plotly_js().parent)])


def figure_json(fig: go.Figure | None) -> str:
    """The value an AnimatedPlot shows ('' draws nothing)."""
    return "" if fig is None else json.dumps(fig.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)


def AnimatedPlot(**kwargs: Any) -> gr.HTML:  # noqa: N802 - a component factory, named like one
    """An HTML component that draws (and plays) a figure given as ``figure_json``."""
    allow_plotly_js()
    return gr.HTML(value=kwargs.pop("value", ""), html_template=_TEMPLATE, js_on_load=_JS, css_template=CSS,
                   head=plotly_script_tag(), apply_default_css=False, **kwargs)
