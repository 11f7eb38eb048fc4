"""The engine's verbs over a ``DecodeState`` (``recap.engine.state``): prefill, then per step
draft -> verify -> accept -> update (``recap.engine.loop`` records and yields each step).

``prefill`` and ``verify`` are also what the auto budget measures (``recap.engine.autobudget``):
one prefill and one verify step for every caller. Each per-step verb adds its own seconds to
``state.step_timings`` ("update" covers accept and update).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import DynamicCache

from recap.drafting.protocol import Drafter, Verification, check_tree
from recap.drafting.tree import DraftTree
from recap.engine.state import DecodeState, TargetPass
from recap.models.target import Target
from recap.verification.acceptance import AcceptanceRule, Accepted, History
from recap.verification.hostcopy import HostPredictions, scattered_topk
from recap.verification.verify import keep_accepted, long_tensor, tree_logits

#: Top-k ids and probabilities (rows, k) on the host.
Predictions = tuple[torch.Tensor, torch.Tensor]


def prefill(
    target: Target, inputs: dict[str, Any], rule: AcceptanceRule, host: HostPredictions, *,
    started: float | None = None,
) -> tuple[DecodeState, Predictions | None]:
    """Feed the request's every token but the last (the first tree's root) to the target.

    inputs: the request's model inputs (``recap.models.inputs.prepare_inputs``; input_ids
    (1, P)); the family adapter cuts them (``prefill_inputs``). Returns the state after the
    prefill and, when ``host.need_topk`` (the drafter records predictions), the raw top-k ids
    and probabilities (P - 1, k) on the host after each of those tokens, zero rows at the image
    placeholders: the only rows no memory reads (``recap.drafting.protocol.Verification``).

    The lm_head runs at the read positions only (``logits_to_keep``, as ``generate()`` keeps
    one): a drafter without predictions gets none, and the (T, V) logits of the T text
    positions are reduced to their top-k at once; nothing of size (P - 1, V) is made.
    """
    model, adapter = target.model, target.adapter
    ids: list[int] = inputs["input_ids"][0].tolist()
    cut = adapter.prefill_inputs(inputs)
    rows = read_positions(ids[:-1], target.image_token_ids) if host.need_topk else long_tensor([])
    keep = rows.to(target.device)  # (T,)
    t0 = time.perf_counter()
    # the rope delta is state on the shared model: read it before anyone else prefills
    with target.prefill_lock:
        adapter.before_prefill(model)
        out = model(**cut, cache=DynamicCache(config=model.config), use_cache=True, logits_to_keep=keep)
        rope_delta = adapter.rope_delta(model)
        adapter.before_prefill(model)  # leave no per-request state behind (verification passes positions)
    top = scattered_topk(out.logits[0], keep, len(ids) - 1, host.k) if host.need_topk else None
    out_cache = out.cache
    del out  # its (T, V) logits
    seconds = time.perf_counter() - t0
    state = DecodeState(
        seq=list(ids),
        target=target,
        rule=rule,
        host=host,
        history=History(ids, target.device, keep_ids=rule.needs_context),
        cache=out_cache,
        prefix_len=len(ids) - 1,
        rope_delta=rope_delta,
        started=t0 if started is None else started,
        timings={
            "prefill": seconds, "draft": 0.0, "verify": 0.0, "update": 0.0, "compute": seconds, "total": 0.0,
        },
    )
    return state, top


def read_positions(prefix: list[int], blocked: frozenset[int]) -> torch.Tensor:
    """(T,) int64: the positions of ``prefix`` whose token is no image placeholder, the ones whose
    predictions the memories record (they skip a key ending at a placeholder)."""
    return long_tensor([i for i, tok in enumerate(prefix) if tok not in blocked])


def seed_drafter(state: DecodeState, drafter: Drafter, top: Predictions | None) -> None:
    """The prefill's predictions (its top-k rows (P - 1, k), or None) reach the drafter: its first
    ``update``."""
    if len(state.seq) < 2:  # a one-token request: nothing was prefilled
        return
    t0 = time.perf_counter()
    top_ids, top_probs = top if top is not None else (None, None)
    drafter.update(state, Verification(None, [], [], top_ids, top_probs))
    seconds = time.perf_counter() - t0
    state.timings["prefill"] += seconds
    state.timings["compute"] += seconds


def draft(state: DecodeState, drafter: Drafter | None) -> DraftTree:
    """Start the next step: the drafter's tree below the root ``state.seq[-1]``; with no drafter (the
    size loop's plain pass, ``recap.engine.controller.SizeController.learns``) the root alone."""
    t0 = time.perf_counter()
    state.step += 1
    if drafter is None:
        tree = DraftTree.root(state.seq[-1])
    else:
        tree = drafter.draft(state)
        check_tree(tree, state)
    state.step_timings = {"draft": time.perf_counter() - t0, "verify": 0.0, "update": 0.0}
    return tree


def verify(state: DecodeState, tree: DraftTree) -> TargetPass:
    """One target forward over the tree (its N entries join the cache), then the rule's picks (one host
    sync; a sampling rule syncs once per draw, as generate() does per token)."""
    t0 = time.perf_counter()
    target = state.target
    logits, state.cache = tree_logits(
        target.model, target.adapter, tree, prefix_len=state.prefix_len, rope_delta=state.rope_delta,
        cache=state.cache, device=target.device, dtype=target.dtype,
    )  # (N, V) raw
    picked = state.host.fetch(state.rule.pick(logits, state.history, tree), raw=logits)
    state.step_timings["verify"] = time.perf_counter() - t0
    # the trace's acceptance probabilities, outside the timed verify (the history is this step's)
    traced = state.trace is not None
    probs = state.rule.acceptance_probabilities(logits, state.history, tree) if traced else None
    return TargetPass(tree, logits, picked, probs)


def accept(state: DecodeState, verified: TargetPass) -> Accepted:
    """The accepted path, the bonus token and what is emitted (cut at EOS or ``max_new_tokens``)."""
    t0 = time.perf_counter()
    accepted = state.rule.accept(verified.tree, verified.picked, len(state.generated))
    state.stop_reason = accepted.stop_reason
    state.step_timings["update"] = time.perf_counter() - t0
    return accepted


def update(state: DecodeState, drafter: Drafter | None, verified: TargetPass, accepted: Accepted) -> None:
    """Keep the accepted path's KV entries, let the drafter learn the pass (None: a plain pass the
    drafter did not draft learns nothing), extend the request."""
    t0 = time.perf_counter()
    if not accepted.stop_reason:
        keep_accepted(state.cache, state.prefix_len, accepted.path)
        state.prefix_len += len(accepted.path)
    if drafter is not None:
        learnt = _verification(state, drafter, verified.tree, verified.picked, accepted.path, verified.logits)
        drafter.update(state, learnt)
    emitted = accepted.emitted
    state.generated.extend(emitted)
    state.seq.extend(emitted)
    state.history.extend(emitted)
    state.step_timings["update"] += time.perf_counter() - t0


def _verification(
    state: DecodeState, drafter: Drafter, tree: DraftTree | None, picked: list[int], path: list[int],
    logits: torch.Tensor,
) -> Verification:
    """The pass as the drafter reads it; the top-k (N, k) on the host only when it asks for predictions."""
    top_ids, top_probs = state.host.topk(logits) if drafter.needs_predictions else (None, None)
    drawn = path if state.rule.sampling is not None else None  # a sampling rule draws along its walk only
    return Verification(tree, picked, path, top_ids, top_probs, drawn)
