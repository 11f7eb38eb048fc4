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

A conversation downloads and uploads as one file (``write_conversation`` / ``read_conversation``):
every turn's trace in a list, under the same bounds (its turns at most ``Limits.max_turns``,
their nodes counted together).
"""

from __future__ import annotations

import json
import os
from typing import Any

from recap.core.jsontext import describe
from recap.trace.format import SCHEMA, DecodeTrace, TraceError
from recap.trace.packing import PackingError, gunzip_bounded, is_packed, pack

from .runs import Run
from .session import Session
from .settings import Limits

#: A conversation file: every turn's trace, in order (``write_conversation``).
CONVERSATION_SCHEMA = "recap-conversation"
CONVERSATION_VERSION = 1


def write_trace(session: Session, run: Run | None) -> str | None:
    """The run's trace as a gzipped JSON download (the session's earlier trace download is deleted)."""
    if run is None:
        return None
    path = session.files.download(f"trace_run{run.run_id}_{run.method}.json.gz", replaces="trace_run*")
    # mtime=0: the file's bytes are the trace's alone
    path.write_bytes(pack(run.trace.to_json()))
    return str(path)


def write_conversation(session: Session, traces: list[DecodeTrace]) -> str | None:
    """Every turn's trace in one gzipped JSON download (``{"schema": "recap-conversation", "version": 1,
    "turns": [trace, ...]}``; the session's earlier conversation download is deleted)."""
    if not traces:
        return None
    path = session.files.download(f"conversation_{len(traces)}turns.json.gz", replaces="conversation_*")
    turns = ", ".join(trace.to_json() for trace in traces)
    path.write_bytes(pack(f'{{"schema": "{CONVERSATION_SCHEMA}", "version": {CONVERSATION_VERSION}, '
                          f'"turns": [{turns}]}}'))
    return str(path)


def read_trace(path: str, limits: Limits) -> DecodeTrace:
    """An uploaded trace (JSON or gzipped JSON) within this deployment's bounds; TraceError naming what is
    wrong."""
    data = _read_json(path, limits)
    if isinstance(data, dict) and data.get("schema") == CONVERSATION_SCHEMA:
        raise TraceError("this is a conversation file (every turn's trace): upload it under Conversation")
    _check_nodes([data], limits)
    return _trace(data)


def read_conversation(path: str, limits: Limits) -> list[DecodeTrace]:
    """An uploaded conversation (or a single trace: a conversation of one turn), its turns in order;
    TraceError naming what is wrong (the turn, then the field)."""
    data = _read_json(path, limits)
    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        _check_nodes([data], limits)
        return [_trace(data)]
    if not isinstance(data, dict) or data.get("schema") != CONVERSATION_SCHEMA:
        schema = describe(data.get("schema")) if isinstance(data, dict) else describe(data)
        raise TraceError(f"not a RECAP conversation (schema is {schema}, expected {CONVERSATION_SCHEMA!r} "
                         f"or a trace's {SCHEMA!r})")
    if data.get("version") != CONVERSATION_VERSION:
        raise TraceError(f"unsupported conversation version {describe(data.get('version'))} "
                         f"(this build reads version {CONVERSATION_VERSION})")
    turns = data.get("turns")
    if not isinstance(turns, list) or not turns:
        raise TraceError(f"turns: expected a non-empty list of traces, got {describe(turns)}")
    if len(turns) > limits.max_turns:
        raise TraceError(f"the conversation has {len(turns)} turns; this deployment shows up to "
                         f"{limits.max_turns}")
    _check_nodes(turns, limits)
    traces = []
    for i, doc in enumerate(turns, 1):
        try:
            trace = _trace(doc)
        except TraceError as exc:
            raise TraceError(f"turn {i}: {exc}") from None
        if trace.turn != i:
            raise TraceError(f"turn {i} of the file records turn {trace.turn}: "
                             "the turns go 1, 2, ... in order")
        traces.append(trace)
    return traces


def _read_json(path: str, limits: Limits) -> Any:
    """An upload's JSON, its size bounded on disk and unpacked."""
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
        return json.loads(raw)
    except RecursionError:
        raise TraceError("the JSON is nested too deeply to be a trace") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"not a JSON document: {exc}") from None


def _check_nodes(docs: list[Any], limits: Limits) -> None:
    """The tree nodes of the traces ``docs``, all together, within this deployment's bound."""
    nodes = 0
    for data in docs:
        steps = data.get("steps") if isinstance(data, dict) else None
        if isinstance(steps, list):
            nodes += sum(
                len(s["nodes"]) for s in steps if isinstance(s, dict) and isinstance(s.get("nodes"), list)
            )
    if nodes > limits.max_trace_nodes:
        raise TraceError(f"the trace has {nodes} tree nodes; this deployment shows traces up to "
                         f"{limits.max_trace_nodes}")


def _trace(data: Any) -> DecodeTrace:
    try:
        return DecodeTrace.from_dict(data)
    except RecursionError:
        raise TraceError("the trace is nested too deeply") from None
