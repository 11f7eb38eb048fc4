"""What each field of a trace may hold: the trace's limits and its annotated field types.

A trace is a file visitors upload, so every field is bounded: the ``MAX_*`` limits below
size what is read, and the field types (``Annotated`` with ``recap.core.schema``'s markers)
are the schema ``recap.trace.format`` checks a trace against. A field added later to a
trace record takes one of these types and a default, so that older traces still load.

Names that grow with the library (a method's name, a node's origin) are not closed lists:
any ``Identifier`` is accepted, so a drafter registered by a user, with its own method name
and origins, writes traces that load. An identifier is short and plain (no markup, no
path separators), which is what the app needs to show it or to name a file after it.
"""

from __future__ import annotations

from typing import Annotated

from recap.core.schema import MAX_INT, Matches, MaxLen, OneOf, Range, VocabId
from recap.verification.seed import MAX_SEED

#: Memory sources a node's fused probability is made of.
SOURCE_KINDS = ("m1", "m2", "m3", "suffix")
#: Why a decode ended: "" while running, "eos", "max_new_tokens", or "stopped" (by the app's Stop).
STOP_REASONS = ("", "eos", "max_new_tokens", "stopped")
#: A method name or a node origin: a lowercase letter, then up to 31 lowercase letters,
#: digits, "_" or "-" (every name in ``recap.methods.REGISTRY`` and every origin the
#: drafters write: "root", "m1", "m2", "m3", "suffix", "mixed", "lookup").
IDENTIFIER_PATTERN = r"[a-z][a-z0-9_-]{0,31}"

# Limits of what a trace may hold, sized for the app on a 2-core CPU. Every trace the engine
# writes at the app's heaviest settings (budget 256, 512 tokens) fits unless almost nothing
# is accepted; a trace over a limit is refused before any object is built.
#: Largest trace document read (UTF-8 bytes, or characters of a str): about 50,000 nodes
#: with two memory sources each (~760 bytes per node, measured); it loads in ~2 s (JSON parse ~0.7 s).
MAX_TRACE_BYTES = 48 * 1024 * 1024
#: Most generated tokens (``token_ids``, ``token_texts``): ``recap.generate``'s own ceiling.
MAX_TOKENS = 4096
#: Most decode steps: every step emits at least one token.
MAX_STEPS = MAX_TOKENS
#: Most nodes in one step's tree: the drafters' largest budget (256) plus the root, twice
#: over; a tree view draws in ~0.2 s at this size (10^5 nodes took 30 s).
MAX_NODES_PER_STEP = 512
#: Most nodes in the whole trace (all steps together).
MAX_TOTAL_NODES = 50_000
#: Most memory sources of one node: one per kind.
MAX_SOURCES_PER_NODE = len(SOURCE_KINDS)
#: Longest token text (``text``, ``target_text``, ``bonus_text``, ``token_texts`` entries ...).
MAX_TOKEN_TEXT_CHARS = 256
#: Longest short name (``model``, ``image_key``, timing names).
MAX_NAME_CHARS = 256
#: Longest free text (``prompt``, the decoded ``text``).
MAX_TEXT_CHARS = 262_144
#: Longest top-k list of a source (``RecapConfig.MAX_TOP_K`` and the memory file's ceiling).
MAX_TOP_K = 64
#: Most entries of ``config`` and of ``timings``.
MAX_CONFIG_ENTRIES = 64
#: Highest turn number: a conversation holds at most 64 messages (``recap.models.messages``).
MAX_TURN = 64

Count = Annotated[int, Range(0, MAX_INT)]
StepNumber = Annotated[int, Range(1, MAX_STEPS)]
TurnNumber = Annotated[int, Range(1, MAX_TURN)]  # 1: a conversation's first (or only) turn
NodeIndex = Annotated[int, Range(0, MAX_NODES_PER_STEP - 1)]
ParentIndex = Annotated[int, Range(-1, MAX_NODES_PER_STEP - 1)]  # -1: the root has none
InsertionOrder = Annotated[int, Range(-1, MAX_NODES_PER_STEP - 1)]  # -1: not recorded
TreeSize = Annotated[int, Range(0, MAX_NODES_PER_STEP)]
RequestNumber = Annotated[int, Range(-1, MAX_INT)]  # -1: unknown
TokenId = Annotated[int, VocabId()]
TokenIdOrNone = Annotated[int, VocabId(sentinel=-1)]  # -1: not recorded
Probability = Annotated[float, Range(0.0, 1.0, tolerance=1e-6)]
Entropy = Annotated[float, Range(0.0, None, tolerance=1e-6)]
Seconds = Annotated[float, Range(0.0, None)]
NonNegative = Annotated[float, Range(0.0, None)]
Seed = Annotated[int, Range(0, MAX_SEED)]
TokenText = Annotated[str, MaxLen(MAX_TOKEN_TEXT_CHARS)]
Name = Annotated[str, MaxLen(MAX_NAME_CHARS)]
Text = Annotated[str, MaxLen(MAX_TEXT_CHARS)]
Identifier = Annotated[str, Matches(IDENTIFIER_PATTERN, "an identifier (a lowercase letter, then at most 31 "
                                                          "lowercase letters, digits, '_' or '-')")]
SourceKind = Annotated[str, OneOf(SOURCE_KINDS)]
StopReason = Annotated[str, OneOf(STOP_REASONS)]
