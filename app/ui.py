"""Layout and event wiring of RECAP Studio (the Gradio Blocks).

``build_demo(model_path=None)`` returns the Blocks; ``launch(demo, ...)`` starts it with
the app's CSS. The model is chosen by ``model_path``, else the env var ``RECAP_MODEL``,
else the embedded ``assets/shapes-vlm``; it loads lazily on the first run, except on ZeroGPU
(``app.boundary.gpu.zero_gpu``), where every listed model loads here, at start, on CUDA. With the embedded
model a new page opens on the shipped example run (``app.state.example``), drawn without the model.

This module only assembles the tabs (``app.tabs``): each holds its layout, its handlers and
typed records of its outputs; below them are the widgets, the presenters, the state and the
boundary (docs/design.md, "App layers"). Data flows one way: inputs -> the decode loop
(``app.state.decoding.decode_run``, over ``recap.iter_steps``) -> the session's runs
(``app.state.session``) -> views (``app.widgets.main_view``, ``app.presenters``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import gradio as gr

from .boundary.gpu import zero_gpu
from .boundary.guard import guarded
from .boundary.visitors import VISITORS
from .state.example import open_session
from .state.memories import WarmStart
from .state.session import Session
from .state.settings import PAPER_URL, Settings, load_settings
from .state.targets import load_at_start
from .tabs.aliasing import AliasingTab
from .tabs.bench import BenchTab
from .tabs.compare import CompareTab
from .tabs.decode.tab import DecodeTab
from .tabs.how import HowTab
from .tabs.memory import MemoryTab

CSS = """
.recap-error { color: #b91c1c; }
.recap-error:empty { display: none; }
#recap-status p { margin: 0.1em 0; }
/* trees are drawn at the width their labels need (app.presenters.tree_geometry): scroll, never squeeze */
#recap-tree, #recap-alias-tree, #recap-walk-tree, #recap-compare-tree-a, #recap-compare-tree-b {
  overflow-x: auto;
}
.recap-provenance td, .recap-provenance th { padding: 2px 8px; vertical-align: middle; }
"""

HEADER = f"""
# RECAP Studio
Lossless speculative decoding for vision-language models by **prediction recycling**
([paper]({PAPER_URL})). Each step, a drafter proposes a tree of tokens from memories of the
target's own past predictions; the target checks the whole tree in one forward pass and
keeps the longest path it agrees with, plus one token of its own (the *bonus*). The output
is exactly what the model's own decoding gives (greedy, or sampled: the same seed, the same
tokens), only in fewer steps.
"""


def build_demo(
    model_path: str | os.PathLike[str] | None = None, settings: Settings | None = None
) -> gr.Blocks:
    settings = settings or load_settings(model_path)
    if zero_gpu():  # ZeroGPU loads models at start; a GPU call's own process would drop one loaded there
        load_at_start(settings.models)
    decode, compare, alias, how, memory, bench = (
        DecodeTab(settings),
        CompareTab(settings),
        AliasingTab(settings),
        HowTab(settings),
        MemoryTab(settings),
        BenchTab(settings),
    )
    age = settings.limits.cache_age_s
    # delete_cache: Gradio deletes uploads and downloads older than `age`, checking every min(age, 10 min).
    with gr.Blocks(title="RECAP Studio", analytics_enabled=False, delete_cache=(min(age, 600), age)) as demo:
        warm = (
            WarmStart(Path(settings.warm_memory), settings.default_spec.source)
            if settings.warm_memory
            else None
        )
        # each visitor: a new Session, its memories starting from the warm memory, the shipped run on screen,
        # its downloads in Gradio's cache (served from there without a copy)
        opener = functools.partial(
            open_session, settings.limits, warm, decode.example, Path(demo.GRADIO_CACHE)
        )
        session = gr.State(guarded(opener), delete_callback=close_value)
        gr.Markdown(HEADER)
        with gr.Tabs() as tabs:
            with gr.Tab("Decode", id="decode"):
                inputs = decode.build(demo, session)
            with gr.Tab("Compare", id="compare"):
                compare.build(session, inputs, decode.main_ui)
            with gr.Tab("Aliasing", id="aliasing") as alias_tab:
                alias.build(alias_tab, session, decode.main_ui)
            with gr.Tab("How it works", id="how") as how_tab:
                how.build(how_tab, session)
            with gr.Tab("Memory", id="memory") as memory_tab:
                memory.build(memory_tab, session, inputs.top_k)
            with gr.Tab("Benchmark", id="bench"):
                bench.build(session)
        demo.unload(guarded(close_session))
        demo.recap_settings = settings  # type: ignore[attr-defined]
        demo.recap_tabs = tabs  # type: ignore[attr-defined]
    # the queue here, not in launch(): `gradio app.py` (the reloading server) launches demo itself
    demo.queue(default_concurrency_limit=1, max_size=settings.limits.max_queue or None)
    return demo


def close_value(value: Any) -> None:
    if isinstance(value, Session):
        value.close()


def close_session(request: gr.Request) -> None:
    """The unload hook: when a visitor's tab or API client disconnects, its Session is closed at once.

    Gradio itself would keep a closed session's state for an hour; the Session's memories, runs and
    files go now. The app finds it by the request's session hash, under which every handler the
    visitor's events ran recorded it (``app.boundary.visitors``: Gradio's own store is not public).
    """
    VISITORS.close(getattr(request, "session_hash", None))


def server_name() -> str:
    """Where ``python app.py`` listens: ``GRADIO_SERVER_NAME``, else all interfaces on a Space, else this
    machine only."""
    return os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1")


def launch(demo: gr.Blocks, **kwargs: Any) -> Any:
    """Launch with the app's CSS (Gradio 6 takes css at launch) and the upload limit (the bounded queue
    is ``build_demo``'s)."""
    settings: Settings = demo.recap_settings  # type: ignore[attr-defined]
    lim = settings.limits
    kwargs.setdefault("css", CSS)
    kwargs.setdefault("max_file_size", f"{lim.max_upload_mb}mb")  # Gradio refuses bigger uploads itself
    kwargs.setdefault("state_session_capacity", lim.max_sessions)
    kwargs.setdefault("server_name", server_name())
    return demo.launch(**kwargs)
