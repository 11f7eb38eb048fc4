"""The decode trace: what every view of the app shows, as plain data.

A ``DecodeTrace`` records one request: per decoding step, the candidate tree
(nodes with token, text, parent, depth, path score, fused probability and, per
memory source, its fusion weight, entropy, the probability it gave and its
provenance), the target's argmax at every node, the accepted node path, the
bonus token and the step's timings; a sampling decode also records its settings and
seed, where the target drew and each drafted node's acceptance probability.

It serialises to JSON (``to_json`` / ``DecodeTrace.from_json``) under a versioned
schema, so a trace recorded on a GPU machine can be viewed without a model.
Loading is the boundary an uploaded file crosses: the field annotations below are
the schema (their types and ``MAX_*`` limits are ``recap.trace.fields``, checked by
``recap.core.schema``), and the tree's invariants are checked too before a trace is
returned, so any trace that loads draws. A malformed, oversized or foreign file raises
``TraceError`` naming the field, e.g.
``steps[3].nodes[7].parent: expected an integer, got the string '0'``; never a
``KeyError`` / ``TypeError`` / ``RecursionError``.

Node 0 of every step is the root: the last accepted token, fed to the target this step (parent -1, depth 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from recap.core.jsontext import SchemaError, describe, parse_json
from recap.core.schema import MaxLen, checker
from recap.trace.checks import (
    StructureError,
    check_draws,
    check_node_counts,
    check_order,
    check_path,
    check_tree,
)
from recap.trace.fields import (
    MAX_CONFIG_ENTRIES,
    MAX_NODES_PER_STEP,
    MAX_SOURCES_PER_NODE,
    MAX_STEPS,
    MAX_TOKENS,
    MAX_TOP_K,
    MAX_TOTAL_NODES,
    MAX_TRACE_BYTES,
    Count,
    Entropy,
    Identifier,
    InsertionOrder,
    Name,
    NodeIndex,
    NonNegative,
    ParentIndex,
    Probability,
    RequestNumber,
    Seconds,
    Seed,
    SourceKind,
    StepNumber,
    StopReason,
    Text,
    TokenId,
    TokenIdOrNone,
    TokenText,
    TreeSize,
    TurnNumber,
)
from recap.trace.packing import PackingError, gunzip_bounded, is_packed, pack
from recap.trace.sizing import TreeSizing

SCHEMA = "recap-trace"
#: Version 2 added each node's insertion ``order`` and each source's top-k
#: (``top_ids`` / ``top_probs`` / ``top_texts``); version-1 traces still load (those
#: fields then stay at their "unknown" defaults).
#: Version 3 added sampling: the trace's ``sampling`` settings and seed, and per step the
#: nodes the target ``drawn`` at and every node's ``accept_probs``. A trace that does not
#: sample has none of them and is written as version 2 (``SAMPLING_FIELDS`` are left out),
#: the document it always was, which older readers read.
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
GREEDY_VERSION = 2


class TraceError(ValueError):
    """A trace file or dict that is not a valid RECAP trace.

    The message names the field, as a path into the JSON, and what is wrong with it:
    ``steps[3].nodes[7].parent: expected an integer, got the string '0'``.
    """


@dataclass
class SourceInfo:
    """One memory entry's contribution to a node's fused probability."""

    kind: SourceKind
    weight: Probability  # normalised fusion weight of this entry
    entropy: Entropy  # entropy of the entry's renormalised top-k distribution (nats)
    concentration: Probability  # 1 - entropy / log k
    prob: Probability  # probability this entry gave the node's token (0 if not in its top-k)
    request: RequestNumber  # provenance: the request that wrote the entry
    step: Count  # the decode step that wrote it (0 = prefill)
    depth: Count  # depth of the writing node in its tree (0 for prefill positions / roots)
    same_image: bool | None = None  # whether the writing request had this request's image
    # The entry's own top-1 prediction at this context (whether or not it made it into the
    # tree): what this memory alone would have drafted. -1 / "" in traces written before.
    top_token: TokenIdOrNone = -1
    top_text: TokenText = ""
    top_prob: Probability = 0.0
    # The entry's whole top-k (most probable first; probabilities under the full vocabulary,
    # as in the memory): what the node inspector draws. Empty in traces written before.
    top_ids: Annotated[list[TokenId], MaxLen(MAX_TOP_K)] = field(default_factory=list)
    top_probs: Annotated[list[Probability], MaxLen(MAX_TOP_K)] = field(default_factory=list)
    top_texts: Annotated[list[TokenText], MaxLen(MAX_TOP_K)] = field(default_factory=list)


@dataclass
class TraceNode:
    """One node of a step's candidate tree: a drafted token, how it was scored, what the target wanted."""

    index: NodeIndex
    token: TokenId
    text: TokenText
    parent: ParentIndex  # -1 for the root
    depth: Count
    score: Probability  # path score: product of fused probabilities from the root (1 for the root)
    fused: Probability  # fused probability of this token given its parent's context (1 for the root)
    origin: Identifier  # where the node came from (the drafter's word: "m1", "suffix", ...)
    target_token: TokenId  # the target's argmax at this node: the token it wants next
    target_text: TokenText
    accepted: bool = False
    suffix: bool = False  # proposed (also) by a suffix match
    sources: Annotated[list[SourceInfo], MaxLen(MAX_SOURCES_PER_NODE)] = field(default_factory=list)
    # When the drafter added this node: 0 for the root, then 1, 2, ... in the order the
    # search grew the tree (node indices are a depth-first reordering). -1: not recorded
    # (traces before version 2); views then fall back to index order.
    order: InsertionOrder = -1


@dataclass
class TraceStep:
    """One decode step: its tree (node 0 the root), the accepted path, the bonus token, the timings."""

    step: StepNumber  # 1-based decode step
    nodes: Annotated[list[TraceNode], MaxLen(MAX_NODES_PER_STEP)]
    accepted: Annotated[list[NodeIndex], MaxLen(MAX_NODES_PER_STEP)]  # node indices from the root (0) down
    bonus_token: TokenId
    bonus_text: TokenText
    # tokens this step appended to the output (path + bonus, cut at EOS / max)
    emitted: Annotated[list[TokenId], MaxLen(MAX_NODES_PER_STEP)]
    draft_s: Seconds
    verify_s: Seconds
    update_s: Seconds
    # nodes the drafter chose to draft (root excluded); None in older traces
    tree_size: TreeSize | None = None
    # Sampling only (empty otherwise): the nodes where the target drew a token, the walk from
    # the root (each one's ``target_token`` is its draw; elsewhere ``target_token`` is the mode,
    # no draw was made there), and per node (by index) the probability that the draw at its
    # parent is its token: how likely it was to be accepted (the root: 1).
    drawn: Annotated[list[NodeIndex], MaxLen(MAX_NODES_PER_STEP)] = field(default_factory=list)
    accept_probs: Annotated[list[Probability], MaxLen(MAX_NODES_PER_STEP)] = field(default_factory=list)
    # cost-aware trees only (None otherwise): the size chosen and why
    sizing: TreeSizing | None = None

    @property
    def accepted_length(self) -> int:
        """Tokens this step produced (drafted ones accepted plus the bonus)."""
        return len(self.emitted)

    def insertion_order(self) -> list[int]:
        """Node indices in the order the drafter added them (index order when not recorded)."""
        if any(node.order < 0 for node in self.nodes):
            return list(range(len(self.nodes)))
        return sorted(range(len(self.nodes)), key=lambda i: self.nodes[i].order)


@dataclass
class TraceSampling:
    """What a sampling decode drew with: generate()'s warpers as resolved (None: that one is off)
    and the seed of its private generator (None: torch's default generator, seeded by the caller)."""

    temperature: NonNegative
    top_k: Count | None = None
    top_p: Probability | None = None
    min_p: Probability | None = None
    typical_p: Probability | None = None
    epsilon_cutoff: Probability | None = None
    eta_cutoff: Probability | None = None
    top_h: Probability | None = None
    seed: Seed | None = None


@dataclass
class DecodeTrace:
    """One request's decode, step by step; ``validate`` / ``from_dict`` state what a valid one holds."""

    method: Identifier  # the method's registry name (any identifier: user drafters register their own)
    model: Name
    prompt: Text
    request: RequestNumber  # the request number within its persistent memory
    image_key: Name | None  # fingerprint of the request's image (None: text only)
    config: Annotated[dict[Name, Any], MaxLen(MAX_CONFIG_ENTRIES)]
    prompt_tokens: Count
    steps: Annotated[list[TraceStep], MaxLen(MAX_STEPS)] = field(default_factory=list)
    token_ids: Annotated[list[TokenId], MaxLen(MAX_TOKENS)] = field(default_factory=list)
    text: Text = ""
    timings: Annotated[dict[Name, Seconds], MaxLen(MAX_CONFIG_ENTRIES)] = field(default_factory=dict)
    stop_reason: StopReason = ""
    budget: Count = 0  # node budget the drafter used (after "auto" resolution)
    # per generated token, its text
    token_texts: Annotated[list[TokenText], MaxLen(MAX_TOKENS)] = field(default_factory=list)
    # how the target sampled (None: it decoded greedily); see TraceStep.drawn / accept_probs
    sampling: TraceSampling | None = None
    # which user turn of its conversation it answers (1: the first, or a single question);
    # ``prompt`` is that turn's question (traces before this field: 1)
    turn: TurnNumber = 1
    dtype: Name = ""  # the target's: "bf16" / "fp16" may differ from generate() by a tie; "": older trace

    # ----------------------------------------------------------------- metrics
    @property
    def decode_steps(self) -> int:
        """Target forward passes after the prefill (one per step)."""
        return len(self.steps)

    @property
    def mat(self) -> float:
        """Mean accepted tokens per step (0 for a trace without steps)."""
        return len(self.token_ids) / self.decode_steps if self.steps else 0.0

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The trace as plain JSON values, under its ``schema`` name and ``version`` (a trace that
        does not sample: version 2, without the sampling fields)."""
        d = asdict(self)
        for step in d["steps"]:
            if step["sizing"] is None:  # a fixed tree: the document as before sizing was recorded
                del step["sizing"]
        if self.sampling is not None:
            return {"schema": SCHEMA, "version": SCHEMA_VERSION, **d}
        del d["sampling"]
        for step in d["steps"]:
            del step["drawn"], step["accept_probs"]
        return {"schema": SCHEMA, "version": GREEDY_VERSION, **d}

    def to_json(self, path: str | Path | None = None) -> str:
        """The JSON document (also written to ``path`` as UTF-8 when given, gzipped when it ends in ``.gz``).
        Nothing is checked: ``validate`` a trace built by hand; ``from_json`` reads back every trace that
        validates."""
        text = json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, default=_json_default)
        if path is not None and str(path).endswith(".gz"):
            Path(path).write_bytes(pack(text))
        elif path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text: str | bytes, *, vocab_size: int | None = None) -> DecodeTrace:
        """Parse a trace from a JSON document (for a file path use ``DecodeTrace.load``).

        With ``vocab_size``, every token id must lie in the vocabulary. Raises TraceError
        when the text is not a valid trace (see ``from_dict``).
        """
        if isinstance(text, (bytes, bytearray, str)):
            size = len(text)
        else:
            raise TraceError(f"a trace is JSON text, got {describe(text)}")
        if size > MAX_TRACE_BYTES:
            raise TraceError(f"the trace is {size / 1e6:.1f} MB; at most "
                             f"{MAX_TRACE_BYTES / 1e6:.0f} MB are read")
        if not isinstance(text, str):
            try:
                text = bytes(text).decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise TraceError(f"the trace is not UTF-8 text (byte {exc.start})") from None
        # Refuse a huge tree before parsing: every node writes one "parent" key (a string
        # value can only add to the count, so a valid trace is never refused by it).
        nodes = text.count('"parent"')
        if nodes > MAX_TOTAL_NODES:
            raise TraceError(f"the trace has about {nodes} nodes; at most {MAX_TOTAL_NODES} are read")
        try:
            data = parse_json(text)
        except SchemaError as exc:
            raise TraceError(str(exc)) from None
        return cls.from_dict(data, vocab_size=vocab_size)

    @classmethod
    def load(cls, path: str | Path, *, vocab_size: int | None = None) -> DecodeTrace:
        """Read a trace file written by ``to_json(path)``, plain or gzipped; raises TraceError when invalid.

        Messages name the file by its name only (never a server path).
        """
        path = Path(path)
        try:
            size = path.stat().st_size
            if not path.is_file():
                raise TraceError(f"{path.name} is not a file")
        except OSError:
            raise TraceError(f"trace file not found: {path.name}") from None
        if size > MAX_TRACE_BYTES:
            raise TraceError(f"{path.name} is {size / 1e6:.1f} MB; traces up to "
                             f"{MAX_TRACE_BYTES / 1e6:.0f} MB are read")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise TraceError(f"cannot read trace file {path.name} "
                             f"({exc.strerror or type(exc).__name__})") from None
        if is_packed(raw):
            try:
                raw = gunzip_bounded(raw, MAX_TRACE_BYTES)
            except PackingError as exc:
                raise TraceError(f"{path.name}: {exc}") from None
        return cls.from_json(raw, vocab_size=vocab_size)

    @classmethod
    def from_dict(cls, data: Any, *, vocab_size: int | None = None) -> DecodeTrace:
        """Build a trace from parsed JSON, checking every field before anything is built.

        Types are strict (no booleans or strings where numbers go, every number finite),
        ranges and sizes are those of the field annotations and the ``MAX_*`` limits, and
        the structure holds (see ``validate``). Unknown keys are ignored; a field added to
        this schema with a default may be absent (older traces).
        """
        if not isinstance(data, dict):
            raise TraceError(f"a trace must be a JSON object, got {describe(data)}")
        if data.get("schema") != SCHEMA:
            raise TraceError("not a RECAP trace (schema is "
                             f"{describe(data.get('schema'))}, expected {SCHEMA!r})")
        version = data.get("version")
        if type(version) is not int or version not in READABLE_VERSIONS:
            raise TraceError(f"unsupported trace version {describe(version)} (this build reads versions "
                             f"{', '.join(map(str, READABLE_VERSIONS))})")
        try:
            check_node_counts(data)
        except StructureError as exc:
            raise TraceError(str(exc)) from None
        try:
            trace = checker(DecodeTrace, vocab_size)(data)
        except SchemaError as exc:
            raise TraceError(str(exc)) from None
        trace._check_structure()
        return trace

    def validate(self, *, vocab_size: int | None = None) -> None:
        """Check every field's type and range and the invariants every view relies on.

        Raises TraceError naming the field: node 0 is the root (parent -1, depth 0), parents
        precede their children (so there are no cycles), depths grow by one, the accepted path
        runs down from the root, each step emits its path's tokens then the bonus token, and
        the steps' tokens are ``token_ids``; with ``vocab_size``, token ids are in the vocabulary.
        """
        try:
            checker(DecodeTrace, vocab_size, True)(self)
        except SchemaError as exc:
            raise TraceError(str(exc)) from None
        self._check_structure()

    def _check_structure(self) -> None:
        try:
            self._check_steps()
        except StructureError as exc:
            raise TraceError(str(exc)) from None

    def _check_steps(self) -> None:
        emitted: list[int] = []
        total = 0
        for i, s in enumerate(self.steps):
            at = f"steps[{i}]"
            if s.step != i + 1:
                raise StructureError(f"{at}.step: steps are numbered 1, 2, 3 ... in order; "
                                     f"expected {i + 1}, got {s.step}")
            check_tree(s.nodes, at)
            check_order(s.nodes, at)
            total += len(s.nodes)
            check_path(s, at)
            check_draws(s, at, self.sampling is not None)
            emitted += s.emitted
        if total > MAX_TOTAL_NODES:
            raise StructureError(f"steps: {total} nodes in all; at most {MAX_TOTAL_NODES} are read")
        if self.steps and emitted != self.token_ids:
            if len(emitted) != len(self.token_ids):
                raise StructureError(f"token_ids: the steps emit {len(emitted)} tokens but token_ids holds "
                                     f"{len(self.token_ids)}")
            j = next(j for j, (a, b) in enumerate(zip(emitted, self.token_ids)) if a != b)
            raise StructureError(f"token_ids[{j}]: the steps emitted token {emitted[j]} there, "
                                 f"token_ids holds {self.token_ids[j]}")
        if len(self.token_texts) > len(self.token_ids):
            raise StructureError(f"token_texts: {len(self.token_texts)} texts for "
                                 f"{len(self.token_ids)} tokens")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
