"""Prediction recycling: what the memory drafters (``tr``, ``recap``) share.

Both draft from the target's own earlier predictions. Every position the target evaluates
(each prompt token in the prefill, each tree node in a verification) yields its top-k
prediction, recorded under the keys (x_{t-2}, x_{t-1}, x_t) ending at that position's input
token (``recap.memory.store.RequestMemory.record``): this module builds those keys and
makes the per-request memory, so the engine never knows the key scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from recap.drafting.fastglue import SeqBuffer, record_prompt, record_tree
from recap.drafting.protocol import DraftSetup, DraftState, Verification
from recap.drafting.tree import DraftTree
from recap.memory.store import RequestMemory, TokenMemory

Key = tuple[int | None, int | None, int]  # (x_{t-2}, x_{t-1}, x_t); None where the context is shorter


def prompt_keys(seq: Sequence[int]) -> list[Key]:
    """Keys ending at each of ``seq[:-1]`` (the prefill's positions: every prompt token but the root)."""
    pre = [None, None, *seq[:-1]]
    return list(zip(pre, pre[1:], pre[2:]))  # type: ignore[arg-type]  # x_t is never None


def node_keys(tree: DraftTree, seq: Sequence[int]) -> list[Key]:
    """Keys ending at every node of ``tree``, whose root ends ``seq`` (the request's tokens so far)."""
    b2, b1 = [None, None, *seq[-3:-1]][-2:]  # the two tokens before the root (None where absent)
    keys: list[Key] = []
    toks, parents = tree.tokens, tree.parents
    for i, tok in enumerate(toks):
        p = parents[i]
        if p < 0:
            keys.append((b2, b1, tok))
            continue
        pp = parents[p]
        keys.append((toks[pp] if pp >= 0 else b1, toks[p], tok))
    return keys


def persistent_memory(setup: DraftSetup) -> TokenMemory:
    """The caller's persistent M1, or a fresh one sized for the target; its k must be ``config.top_k``."""
    cfg = setup.config
    memory = setup.memory if setup.memory is not None else TokenMemory(setup.vocab_size, cfg.top_k)
    if memory.k != cfg.top_k:
        raise ValueError(f"the memory keeps top-{memory.k} rows but config.top_k is {cfg.top_k}")
    return memory


def request_memory(memory: TokenMemory, setup: DraftSetup, *, scoped: bool = False) -> RequestMemory:
    """This request's memories over ``memory`` (registers the request with it).

    ``scoped``: its M2 / M3 are the image's rows kept in ``memory.scoped`` for ``setup.owner`` (a
    drafter that reads them asks; nothing is scoped for a request without an image).
    """
    return RequestMemory(
        memory, image_token_ids=setup.blocked, image_key=setup.image_key, prompt=setup.prompt, scoped=scoped,
        owner=setup.owner,
    )


class RecyclingDrafter:
    """The shared ``update``: record every prediction of a pass, then ``learn`` from a verification.

    A verification's rows are written rejected branches first and the accepted path last, so
    that where two nodes share a key the path's prediction wins.
    """

    needs_predictions = True

    def __init__(self, memory: RequestMemory, budget: int) -> None:
        self.memory = memory
        self.budget = budget
        self.seq = SeqBuffer()  # the request's tokens as an array (the compiled path's)
        # a subclass's compiled drafter (``FlatTR`` / ``FlatRecap``), None on the reference path: it
        # drafted the tree it updates from (keys, rows, calibration samples) in one kernel call
        self._flat: Any = None

    def update(self, state: DraftState, verified: Verification) -> None:
        top_ids, top_probs = verified.top_ids, verified.top_probs
        assert top_ids is not None and top_probs is not None, "a recycling drafter needs predictions"
        if self.memory.fast:
            self.flat_update(state, verified, top_ids, top_probs)
            return
        tree = verified.tree
        if tree is None:  # the prefill: one prediction after each prompt token but the root
            keys = prompt_keys(state.seq)
            self.memory.record(keys, top_ids, top_probs, step=0, depths=[0] * len(keys))
            return
        on_path = set(verified.path)
        order = [i for i in range(len(tree)) if i not in on_path] + list(verified.path)
        keys = node_keys(tree, state.seq)
        self.memory.record(keys, top_ids, top_probs, step=state.step, depths=tree.depths, order=order)
        self.learn(tree, verified.picked)

    def flat_update(self, state: DraftState, verified: Verification, top_ids: torch.Tensor,
                    top_probs: torch.Tensor) -> None:
        """``update`` on the compiled path (``recap.drafting.fastglue``): the same rows, one kernel call."""
        tree = verified.tree
        flat = self._flat
        if flat is not None and tree is not None and tree is flat.tree:  # the tree its own kernel drafted
            flat.update(verified.path, verified.picked, state.step, top_ids, top_probs)
            return
        seq, n = self.seq.sync(state.seq)
        if tree is None:
            record_prompt(self.memory, seq, n, top_ids, top_probs)
            return
        record_tree(self.memory, tree, seq, n, verified.path, state.step, top_ids, top_probs)
        self.learn(tree, verified.picked)

    def learn(self, tree: DraftTree, picked: Sequence[int]) -> None:
        """After a verification: what the drafter learns beyond the memories (default: nothing)."""
