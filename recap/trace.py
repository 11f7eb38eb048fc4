"""The decode trace: what every view of the app shows, as plain data.

A ``DecodeTrace`` records one request: per decoding step, the candidate tree
(nodes with token, text, parent, depth, path score, fused probability and, per
memory source, its fusion weight, entropy, the probability it gave and its
provenance), the target's argmax at every node, the accepted node path, the
bonus token and the step's timings.

It serialises to JSON (``to_json`` / ``DecodeTrace.from_json``) under a versioned
schema, so a trace recorded on a GPU machine can be viewed without a model.
Loading validates loudly: a malformed or foreign file raises ``TraceError`` with
the reason, never a ``KeyError`` deep inside a figure.

Node 0 of every step is the root: the last accepted token, fed to the target in
this step. Its parent is -1 and its depth 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "recap-trace"
SCHEMA_VERSION = 1

#: Where a drafted node came from (the app colours nodes by this).
ORIGINS = ("root", "m1", "m2", "m3", "suffix", "mixed", "template", "lookup")
#: Memory sources a node's fused probability is made of.
SOURCE_KINDS = ("m1", "m2", "m3", "suffix")


class TraceError(ValueError):
    """A trace file or dict that is not a valid RECAP trace."""


@dataclass
class SourceInfo:
    """One memory entry's contribution to a node's fused probability."""

    kind: str  # one of SOURCE_KINDS
    weight: float  # normalised fusion weight of this entry, in [0, 1]
    entropy: float  # entropy of the entry's renormalised top-k distribution (nats)
    concentration: float  # 1 - entropy / log k, in [0, 1]
    prob: float  # probability this entry gave the node's token (0 if not in its top-k)
    request: int  # provenance: the request that wrote the entry (-1: unknown)
    step: int  # the decode step that wrote it (0 = prefill)
    depth: int  # depth of the writing node in its tree (0 for prefill positions / roots)
    same_image: bool | None = None  # whether the writing request had this request's image
    # The entry's own top-1 prediction at this context (whether or not it made it into the
    # tree): what this memory alone would have drafted. -1 / "" in traces written before.
    top_token: int = -1
    top_text: str = ""
    top_prob: float = 0.0


@dataclass
class TraceNode:
    index: int
    token: int
    text: str
    parent: int  # -1 for the root
    depth: int
    score: float  # path score: product of fused probabilities from the root (1 for the root)
    fused: float  # fused probability of this token given its parent's context (1 for the root)
    origin: str  # one of ORIGINS
    target_token: int  # the target's argmax at this node: the token it wants next
    target_text: str
    accepted: bool = False
    suffix: bool = False  # proposed (also) by a suffix match
    sources: list[SourceInfo] = field(default_factory=list)


@dataclass
class TraceStep:
    step: int  # 1-based decode step
    nodes: list[TraceNode]
    accepted: list[int]  # node indices from the root (0) along the accepted path
    bonus_token: int
    bonus_text: str
    emitted: list[int]  # tokens this step appended to the output (path + bonus, cut at EOS / max)
    draft_s: float
    verify_s: float
    update_s: float
    tree_size: int | None = None  # nodes the drafter chose to draft (root excluded); None in older traces

    @property
    def accepted_length(self) -> int:
        """Tokens this step produced (drafted ones accepted plus the bonus)."""
        return len(self.emitted)


@dataclass
class DecodeTrace:
    method: str
    model: str
    prompt: str
    request: int  # the request number within its persistent memory
    image_key: str | None  # fingerprint of the request's image (None: text only)
    config: dict[str, Any]
    prompt_tokens: int
    steps: list[TraceStep] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""  # "eos", "max_new_tokens" or "stopped"
    budget: int = 0  # node budget the drafter used (after "auto" resolution)
    token_texts: list[str] = field(default_factory=list)  # per generated token, its text

    # ----------------------------------------------------------------- metrics
    @property
    def decode_steps(self) -> int:
        return len(self.steps)

    @property
    def mat(self) -> float:
        return len(self.token_ids) / self.decode_steps if self.steps else 0.0

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, **d}

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, default=_json_default)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text: str | bytes) -> DecodeTrace:
        """Parse a trace from a JSON document (for a file path use ``DecodeTrace.load``).

        Raises TraceError when the text is not a valid trace.
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
            raise TraceError(f"not a JSON document: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> DecodeTrace:
        """Read a trace file written by ``to_json(path)``; raises TraceError when invalid."""
        path = Path(path)
        if not path.is_file():
            raise TraceError(f"trace file not found: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"cannot read trace file {path.name}: {exc}") from exc
        return cls.from_json(text)

    @classmethod
    def from_dict(cls, data: Any) -> DecodeTrace:
        if not isinstance(data, dict):
            raise TraceError("a trace must be a JSON object")
        if data.get("schema") != SCHEMA:
            raise TraceError(f"not a RECAP trace (schema is {data.get('schema')!r}, expected {SCHEMA!r})")
        if data.get("version") != SCHEMA_VERSION:
            raise TraceError(f"unsupported trace version {data.get('version')!r} (this build reads {SCHEMA_VERSION})")
        try:
            steps = [_step_from_dict(s) for s in _list(data, "steps")]
            trace = cls(
                method=str(data["method"]),
                model=str(data["model"]),
                prompt=str(data["prompt"]),
                request=int(data["request"]),
                image_key=None if data.get("image_key") is None else str(data["image_key"]),
                config=dict(data.get("config") or {}),
                prompt_tokens=int(data["prompt_tokens"]),
                steps=steps,
                token_ids=[int(t) for t in _list(data, "token_ids")],
                text=str(data.get("text", "")),
                timings={str(k): float(v) for k, v in dict(data.get("timings") or {}).items()},
                stop_reason=str(data.get("stop_reason", "")),
                budget=int(data.get("budget", 0)),
                token_texts=[str(t) for t in data.get("token_texts") or []],
            )
        except TraceError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"malformed trace: {type(exc).__name__}: {exc}") from exc
        trace.validate()
        return trace

    def validate(self) -> None:
        """Check the structural invariants every view relies on; raise TraceError if broken."""
        emitted = 0
        for s in self.steps:
            n = len(s.nodes)
            if n == 0:
                raise TraceError(f"step {s.step}: a tree has at least its root")
            for i, node in enumerate(s.nodes):
                if node.index != i:
                    raise TraceError(f"step {s.step}: node {i} carries index {node.index}")
                if i == 0 and node.parent != -1:
                    raise TraceError(f"step {s.step}: node 0 must be the root (parent -1)")
                if i > 0 and not 0 <= node.parent < i:
                    raise TraceError(f"step {s.step}: node {i} has parent {node.parent}; parents precede children")
                if i > 0 and node.depth != s.nodes[node.parent].depth + 1:
                    raise TraceError(f"step {s.step}: node {i} depth {node.depth} is not its parent's + 1")
                if node.origin not in ORIGINS:
                    raise TraceError(f"step {s.step}: node {i} has unknown origin {node.origin!r}")
                for src in node.sources:
                    if src.kind not in SOURCE_KINDS:
                        raise TraceError(f"step {s.step}: node {i} has unknown source {src.kind!r}")
                if not all(math.isfinite(v) for v in (node.score, node.fused)):
                    raise TraceError(f"step {s.step}: node {i} has a non-finite score")
            if not s.accepted or s.accepted[0] != 0:
                raise TraceError(f"step {s.step}: the accepted path starts at the root")
            for a, b in zip(s.accepted, s.accepted[1:]):
                if not 0 <= b < n or s.nodes[b].parent != a:
                    raise TraceError(f"step {s.step}: accepted path {s.accepted} is not a root-down path")
            emitted += len(s.emitted)
        if self.steps and emitted != len(self.token_ids):
            raise TraceError(f"steps emit {emitted} tokens but the trace holds {len(self.token_ids)}")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise TraceError(f"malformed trace: {key!r} must be a list")
    return value


def _step_from_dict(d: Any) -> TraceStep:
    if not isinstance(d, dict):
        raise TraceError("malformed trace: a step must be an object")
    nodes = []
    for n in _list(d, "nodes"):
        if not isinstance(n, dict):
            raise TraceError("malformed trace: a node must be an object")
        sources = [SourceInfo(**s) for s in n.get("sources") or []]
        nodes.append(TraceNode(**{**n, "sources": sources}))
    return TraceStep(
        step=int(d["step"]),
        nodes=nodes,
        accepted=[int(i) for i in _list(d, "accepted")],
        bonus_token=int(d["bonus_token"]),
        bonus_text=str(d["bonus_text"]),
        emitted=[int(t) for t in _list(d, "emitted")],
        draft_s=float(d["draft_s"]),
        verify_s=float(d["verify_s"]),
        update_s=float(d["update_s"]),
        tree_size=None if d.get("tree_size") is None else int(d["tree_size"]),
    )
