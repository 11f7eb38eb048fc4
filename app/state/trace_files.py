"""Trace files: the finished run's download (gzipped JSON) and the trace a visitor uploads (JSON or gzipped
JSON).

A download is written once, gzip-compressed (about a tenth of the JSON), into the session's
downloads folder, which Gradio serves without a copy (``Session.download``); a session keeps
only its latest one. ``recap.DecodeTrace.load`` reads it as it is (and ``gunzip -k`` gives the
JSON), and so does the app's upload.

An upload is bounded before anything is built: its size on disk, then (gzipped) its size
unpacked, read at most one byte past the ceiling (a gzip bomb costs that much and no more),
then its tree nodes, then the library's schema check (``DecodeTrace.from_dict``). Whether a
file is gzipped is read from its first bytes, not its name.
"""

from __future__ import annotations

import json
import os

from app.state.runs import Run
from app.state.session import Session
from app.state.settings import Limits
from recap.trace.format import DecodeTrace, TraceError
from recap.trace.packing import PackingError, gunzip_bounded, is_packed, pack


def write_trace(session: Session, run: Run | None) -> str | None:
    """The run's trace as a gzipped JSON download (the session's earlier trace download is deleted)."""
    if run is None:
        return None
    path = session.files.download(f"trace_run{run.run_id}_{run.method}.json.gz", replaces="trace_run*")
    # mtime=0: the file's bytes are the trace's alone
    path.write_bytes(pack(run.trace.to_json()))
    return str(path)


def read_trace(path: str, limits: Limits) -> DecodeTrace:
    """An uploaded trace (JSON or gzipped JSON) within this deployment's bounds; TraceError naming what is
    wrong."""
    ceiling = limits.max_trace_mb * 10**6
    size = os.path.getsize(path)
    if size > ceiling:
        raise TraceError(
            f"the file is {size / 1e6:.1f} MB; this deployment reads traces up to {limits.max_trace_mb} MB"
        )
    with open(path, "rb") as f:
        raw = f.read()
    if is_packed(raw):
        try:
            raw = gunzip_bounded(raw, ceiling)
        except PackingError as exc:
            raise TraceError(str(exc)) from None
    try:
        data = json.loads(raw)
    except RecursionError:
        raise TraceError("the JSON is nested too deeply to be a trace") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"not a JSON document: {exc}") from None
    steps = data.get("steps") if isinstance(data, dict) else None
    if isinstance(steps, list):
        nodes = sum(
            len(s["nodes"]) for s in steps if isinstance(s, dict) and isinstance(s.get("nodes"), list)
        )
        if nodes > limits.max_trace_nodes:
            raise TraceError(f"the trace has {nodes} tree nodes; this deployment shows traces up to "
                             f"{limits.max_trace_nodes}")
    try:
        return DecodeTrace.from_dict(data)
    except RecursionError:
        raise TraceError("the trace is nested too deeply") from None
