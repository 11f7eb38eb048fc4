"""What one request's decode carries from step to step (``DecodeState``) and what a step makes.

The engine's verbs (``recap.engine.steps``, ``recap.engine.loop.record``) are functions over
a ``DecodeState``; each step passes its tree, ``TargetPass`` and ``Accepted`` from one verb to
the next. Between steps the state holds:

* ``seq`` and ``step`` (``recap.drafting.protocol.DraftState``: what a drafter reads);
* the model side: the KV cache of ``prefix_len = len(seq) - 1`` tokens (every token but the
  root), the family's ``rope_delta``, and the acceptance ``rule`` with the ``history`` it
  reads and the ``host`` copy of each pass's predictions;
* the output: ``generated``, the timings, and with a trace its spellings and the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from recap.drafting.protocol import DraftState
from recap.drafting.tree import DraftTree
from recap.models.target import Target
from recap.models.tokens import Speller
from recap.trace.format import DecodeTrace
from recap.verification.acceptance import AcceptanceRule, History
from recap.verification.hostcopy import HostPredictions


@dataclass(kw_only=True)
class DecodeState(DraftState):
    """One request's decode (see the module docstring). ``seq`` / ``step`` come from ``DraftState``."""

    target: Target
    rule: AcceptanceRule
    host: HostPredictions
    history: History  # seq as the rule reads it: (S,) ids on the device when the rule needs them, else its length
    cache: Any  # the KV cache: prefix_len entries between steps, + the tree's N during a verification
    prefix_len: int  # tokens in the KV cache
    rope_delta: int  # the text's position offset the family's prefill set (0 for plain RoPE)
    started: float  # perf_counter() at the call: "total" counts from here
    # cumulative seconds: prefill, draft, verify, update, compute (= their sum), total (wall, since the call)
    timings: dict[str, float]
    step_timings: dict[str, float] = field(default_factory=dict)  # this step's draft / verify / update
    generated: list[int] = field(default_factory=list)  # the output's tokens so far
    stop_reason: str = ""  # "" while running, then "eos" or "max_new_tokens"
    speller: Speller | None = None  # the output's per-token spellings, grown each step (with a trace)
    trace: DecodeTrace | None = None


@dataclass(slots=True)
class TargetPass:
    """One target pass over a tree: the tree, the target's raw logits at its nodes and the rule's
    picks (the engine's; the drafter reads ``recap.drafting.protocol.Verification``)."""

    tree: DraftTree
    logits: torch.Tensor  # (N, V) raw, in the model's dtype: the memories learn these
    picked: list[int]  # per node, the token the target emits after it (the acceptance rule applied)
    # per node, the probability of its acceptance at its parent (a sampling rule, with a trace); else None
    accept_probs: list[float] | None = None
