"""The drafter contract: who proposes the candidate tree (DESIGN.md section 6).

Every method runs in the same engine; only the drafter differs, and the engine treats every
drafter alike. A drafter is an object with two methods (modelled on transformers'
``CandidateGenerator``: one call proposes, one call learns):

    draft(state) -> DraftTree
        the tree to verify this step; its root is ``state.seq[-1]``, the last accepted token
        (not yet fed to the target). Build it with ``DraftTree.root`` and ``add`` (parents
        precede children, no two siblings carry one token).
    update(state, verified) -> None
        learn from one target pass (``Verification``): once after the prefill
        (``verified.tree is None``: the predictions after each prompt token but the last), then
        after every step's verification of the tree its last ``draft`` returned, before
        ``state.seq`` grows by the emitted tokens.

and three attributes the engine reads:

    needs_predictions  bool     whether ``update`` reads ``verified.top_ids`` / ``top_probs``:
                                the engine pays for the (N, k) top-k and its host copy only then
    budget             int      its node cap for this request (0: none); reported in the trace
    memory             RequestMemory | None
                                the memories it drafts from, which the trace reads for each
                                source's provenance (None: it keeps none)

A drafter whose trees can take any size up to its budget may also be ``Resizable``: the engine's
size loop (``recap.engine.controller``, ``RecapConfig.size_loop``) then calls, before each draft,

    resize(limit, cost) -> None
        draft at most ``limit`` nodes (0 <= limit <= budget: 0 is a plain one-token pass) next,
        growing under ``cost`` (a ``PassCost`` up to ``budget``) where its trees are cost-aware

and reads, after it, ``cost`` (the ``PassCost`` the last tree grew under, None: not cost-aware)
and ``last_stop`` (why it stopped growing: "budget", "cost" or "exhausted"; "" when unknown) for
the trace's sizing.

A drafter owns its memory: which predictions it records, under which keys, is its own
business (the engine never builds a memory key). ``state`` is the engine's ``DecodeState``;
a drafter reads only what ``DraftState`` declares and never changes it.

A drafter is made per request by its method's factory, ``(DraftSetup) -> Drafter``
(``recap.methods``); the setup carries the persistent memory, the config, the target's facts
and the budget and pass-cost measurements, so the factory decides what its drafter needs.
Validation is loud: ``check_drafter`` (when a method builds a drafter) names a missing method
or attribute, ``check_tree`` (every step) refuses a tree that does not grow from the root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from recap.core.config import RecapConfig
from recap.drafting.tree import DraftTree
from recap.drafting.treecost import PassCost
from recap.memory.store import RequestMemory, TokenMemory


@dataclass
class DraftState:
    """The part of the decode state a drafter reads (the engine's ``DecodeState`` extends it)."""

    seq: list[int]  # the request's tokens so far (prompt, image placeholders, generated); the root last
    step: int = 0  # the step being drafted or learnt from (1-based; 0: the prefill)


@dataclass(slots=True)
class Verification:
    """What one target pass established, as ``Drafter.update`` reads it.

    After the prefill: ``tree`` None, ``picked`` and ``path`` empty, and the predictions
    are the target's after each of ``state.seq[:-1]``, except after an image placeholder
    (``DraftSetup.blocked``), whose rows are zeros: the engine computes no logits there (a
    memory never files a key ending at one). After a step: the verified tree, and the
    predictions after each of its nodes.
    """

    tree: DraftTree | None
    picked: Sequence[int]  # per node, the token the target emits after it (the acceptance rule's pick)
    path: Sequence[int]  # the accepted nodes, the root first
    # The target's raw top-k ids and probabilities (N, k) at every position, on the host; None
    # unless the drafter ``needs_predictions``. Valid during ``update`` only (buffers are reused).
    top_ids: torch.Tensor | None = None
    top_probs: torch.Tensor | None = None
    # The nodes whose pick is a draw of a sampling rule (the walk: ``path``); None under greedy,
    # where every node's pick is the rule's own decision. Elsewhere a sampling rule's pick is the
    # mode, not a draw: it says nothing about how often a proposal is accepted.
    drawn: Sequence[int] | None = None


class Drafter(Protocol):
    """See the module docstring."""

    needs_predictions: bool
    budget: int
    memory: RequestMemory | None

    def draft(self, state: DraftState) -> DraftTree: ...

    def update(self, state: DraftState, verified: Verification) -> None: ...


@runtime_checkable
class Resizable(Protocol):
    """A drafter the engine's size loop may resize each step (see the module docstring)."""

    cost: PassCost | None
    last_stop: str

    def resize(self, limit: int, cost: PassCost | None) -> None: ...


@dataclass(frozen=True)
class DraftSetup:
    """What a drafter factory receives for one request (``recap.methods.Method.build``)."""

    config: RecapConfig
    vocab_size: int  # the target's output vocabulary
    memory: TokenMemory | None = None  # the caller's persistent memory (None: none given)
    blocked: frozenset[int] = frozenset()  # image placeholders: never matched, never proposed, never a key
    image_key: str | None = None  # the request's images' fingerprint (None: text only): provenance
    scope: str | None = None  # where its image-scoped rows are filed: image_key, or a conversation's key
    prompt: str = ""
    owner: str | None = None  # whose request: image-scoped rows are kept per owner (None: one owner)
    #: The node budget under ``budget="auto"``: one measured choice, or with ``size_loop`` the cap the
    #: engine's loop sizes a ``Resizable`` drafter's trees below (None: no engine, nothing to size on).
    auto_budget: Callable[[], int] | None = None
    #: The pass cost a cost-aware tree of up to ``cap`` nodes grows under: the size loop's, learnt
    #: from the decode's own passes under "auto", else measured for an explicit budget (None: none).
    pass_cost: Callable[[int], PassCost] | None = None

    def __post_init__(self) -> None:
        if self.memory is not None and self.memory.vocab_size != self.vocab_size:
            raise ValueError(
                f"the memory was made for a vocabulary of {self.memory.vocab_size}; "
                f"this model has {self.vocab_size}"
            )

    def node_budget(self) -> int:
        """``config.budget`` as a node count: the number, or for "auto" ``auto_budget()``'s."""
        if self.config.budget != "auto":
            return int(self.config.budget)
        if self.auto_budget is None:
            raise ValueError('budget="auto" needs a target to measure its verify cost on')
        return self.auto_budget()

    def measured_cost(self, cap: int) -> PassCost:
        """The target's pass cost under ``cap`` nodes (for a cost-aware tree)."""
        if self.pass_cost is None:
            raise ValueError("cost_aware=True needs a target to measure its verify cost on")
        return self.pass_cost(cap)


_ATTRIBUTES: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("needs_predictions", bool), ("budget", int), ("memory", (RequestMemory, type(None))),
)


def check_drafter(drafter: object, method: str) -> None:
    """A TypeError naming what ``drafter`` (built by ``method``) lacks of the contract."""
    wrong = [name for name in ("draft", "update") if not callable(getattr(drafter, name, None))]
    wrong += [
        f"{name} ({kind.__name__ if isinstance(kind, type) else ' | '.join(k.__name__ for k in kind)})"
        for name, kind in _ATTRIBUTES
        if not hasattr(drafter, name) or not isinstance(getattr(drafter, name), kind)
    ]
    if wrong:
        raise TypeError(
            f"method {method!r} built a {type(drafter).__name__} that is not a drafter: it lacks "
            f"{', '.join(wrong)} (see recap.drafting.protocol)"
        )


def check_tree(tree: object, state: DraftState) -> None:
    """A TypeError / ValueError unless ``tree`` is a ``DraftTree`` grown from ``state.seq[-1]``."""
    if not isinstance(tree, DraftTree):
        raise TypeError(f"a drafter's draft() must return a DraftTree, got {type(tree).__name__}")
    if tree.tokens[0] != state.seq[-1] or tree.parents[0] != -1:
        raise ValueError(
            f"a drafted tree must grow from the root, the last accepted token {state.seq[-1]}; "
            f"its node 0 is {tree.tokens[0]} (parent {tree.parents[0]})"
        )
