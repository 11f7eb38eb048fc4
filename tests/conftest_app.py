"""Shared fixtures of the app tests (imported by tests/test_app*.py, tests/test_browser*.py, test_figures.py).

Three apps, each launched once per test session: ``launched`` / ``app_url`` (local settings, the
gradio_client modules), ``browser_app_url`` (the browser modules) and ``public_app_url`` (public
mode). A module that needs other settings launches its own with ``launch_app``.

The model: the embedded assets/shapes-vlm when it is there, else a tiny random-weight
Qwen2.5-VL built on the fly (tests/tiny_models.py).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `pytest` (not `python -m pytest`) does not put the repo root on the path
    sys.path.insert(0, str(REPO))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

SHAPES = REPO / "assets" / "shapes-vlm"
EXAMPLES = REPO / "assets" / "examples"


def _threads() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The model the app tests run: $RECAP_TEST_MODEL, else shapes-vlm if present, else a tiny one."""
    _threads()
    if os.environ.get("RECAP_TEST_MODEL"):  # any other checkpoint, e.g. one still training
        return os.environ["RECAP_TEST_MODEL"]
    if (SHAPES / "config.json").is_file() and not os.environ.get("RECAP_TEST_TINY"):
        return str(SHAPES)
    import tiny_models

    return str(tiny_models.build("qwen2_5_vl", tmp_path_factory.mktemp("tiny_q25")))


@pytest.fixture(scope="session")
def target(model_dir: str):
    import recap

    return recap.load_target(model_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_app(model_dir: str, *, public: bool = False, limits: dict | None = None, **overrides):
    """Build and launch the app on a free port; returns (demo, url).

    ``public``: in public mode (its limits, overridden by ``limits``); ``overrides``: other Settings fields.
    """
    from app.state.settings import PUBLIC_CONCURRENCY, PUBLIC_LIMITS, Limits, load_settings
    from app.ui import build_demo, launch

    base = load_settings(model_dir)
    lim = dataclasses.replace(PUBLIC_LIMITS if public else Limits(), **(limits or {}))
    mode = {
        "public": public,
        "limits": lim,
        "concurrency": PUBLIC_CONCURRENCY if public else base.concurrency,
    }
    settings = dataclasses.replace(base, **{"stream_interval": 0.0, **mode, **overrides})
    demo = build_demo(settings=settings)
    port = free_port()
    launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


@dataclasses.dataclass(frozen=True)
class LaunchedApp:
    demo: Any  # the gr.Blocks (its handlers: ``demo.fns``)
    url: str


@pytest.fixture(scope="session")
def launched(model_dir: str):
    """The app with its local settings, launched once for every gradio_client test module.

    Each ``Client`` is a visitor of its own (its own session: memories, runs, job gate), so the
    modules share the server, never a visitor's state.
    """
    demo, url = launch_app(model_dir)
    yield LaunchedApp(demo, url)
    demo.close()


@pytest.fixture(scope="session")
def app_url(launched: LaunchedApp) -> str:
    return launched.url


@pytest.fixture(scope="session")
def browser_app_url(model_dir: str):
    """The app the browser modules drive (streaming at a browser's pace), launched once; each module opens its
    own page (a visitor of its own), so no module depends on another's page."""
    demo, url = launch_app(model_dir, stream_interval=0.2)
    yield url
    demo.close()


@pytest.fixture(scope="session")
def public_app_url(model_dir: str):
    """The app in public mode with its public limits, launched once for the modules that need nothing else."""
    demo, url = launch_app(model_dir, public=True)
    yield url
    demo.close()


def advanced_values(**overrides: Any) -> list[Any]:
    """The advanced settings /run takes after (image, prompt, method, max new tokens), positionally.

    The widgets' defaults, ``overrides`` by parameter name replacing some; the order and the
    names are the app's one definition (``app.widgets.config_form.PARAM_NAMES``).
    """
    from app.widgets.config_form import default_values

    values = default_values()
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"not advanced settings: {sorted(unknown)}")
    return list({**values, **overrides}.values())


def downloaded_trace(path: str | Path):
    """The trace of a download the app hands out (``/run``'s last output): gzipped JSON, checked in full."""
    import gzip

    from recap.trace.format import DecodeTrace

    raw = Path(path).read_bytes()
    assert raw[:2] == b"\x1f\x8b" and str(path).endswith(".json.gz"), path  # compressed, and named so
    return DecodeTrace.from_json(gzip.decompress(raw))


def example(pair: str | None = None) -> tuple[str, str]:
    """(image path, prompt) of an example (the pair image A / B when ``pair`` is given)."""
    import json

    entries = json.loads((EXAMPLES / "examples.json").read_text())
    for e in entries:
        if pair is None or e.get("pair") == pair:
            return str(EXAMPLES / e["file"]), e["prompt"]
    raise LookupError(pair)


def fn_index(demo, name: str) -> int:
    """The fn_index of the event whose handler is called ``name`` (private events included)."""
    for index, block_fn in demo.fns.items():
        if getattr(block_fn.fn, "__name__", None) == name:
            return index
    raise LookupError(name)


def call_event(url: str, index: int, data: list, event_data=None, session_hash: str | None = None) -> dict:
    """Call any event by its fn_index over raw HTTP (as a hostile client would); the final queue message.

    Returns {"success": bool, "data": [...]} or {"success": False, "error": str, "status": int}.
    """
    import json
    import uuid

    import httpx

    session_hash = session_hash or uuid.uuid4().hex[:11]
    body = {"data": data, "event_data": event_data, "fn_index": index, "trigger_id": None,
            "session_hash": session_hash}
    with httpx.Client(timeout=120) as http:
        joined = http.post(url + "gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            return {"success": False, "error": joined.text, "status": joined.status_code}
        with http.stream(
            "GET", url + "gradio_api/queue/data", params={"session_hash": session_hash}
        ) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    out = msg.get("output") or {}
                    if msg.get("success"):
                        return {"success": True, "data": out.get("data")}
                    return {"success": False, "error": str(out.get("error")), "status": 200}
    return {"success": False, "error": "no answer", "status": 0}
