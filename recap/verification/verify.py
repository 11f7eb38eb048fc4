"""Verifying a draft tree: one target forward over every node, then the acceptance rule.

Pure functions over the model, its KV cache and tensors, shared by the engine (every
decode step) and the auto budget (which times exactly this):

* ``tree_logits``: the tree forward: tree tokens (1, N) after the cached prefix, with an
  additive tree mask (1, 1, N, P + N) and explicit positions, -> raw logits (N, V);
* ``verify_tree``: ``tree_logits`` + ``acceptance.target_scores`` (logits processing under
  the generation config) + the argmax, fetched to the host by ``recap.verification.hostcopy`` (with the
  memories' top-k of the raw logits in the same sync on CUDA) -> ``Verified``;
* ``keep_accepted``: drop the rejected nodes' KV entries.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from recap.verification.acceptance import History, target_scores
from recap.verification.generation_config import AcceptanceRule
from recap.verification.hostcopy import HostPredictions
from recap.verification.treemask import tree_attention_bias


@dataclass
class Verified:
    logits: torch.Tensor  # (N, V) raw, in the model's dtype: the memories learn these
    argmax: list[int]  # per node, the token generate() would emit next (the acceptance rule applied)
    cache: Any  # the KV cache, now holding prefix + all N tree entries


def tree_logits(
    model: Any,
    adapter: Any,
    tokens: Sequence[int],
    parents: Sequence[int],
    depths: Sequence[int],
    *,
    prefix_len: int,
    rope_delta: int,
    cache: Any,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, Any]:
    """One forward over a tree after ``prefix_len`` cached tokens -> raw logits (N, V) and the cache."""
    ids = long_tensor(tokens).to(device).view(1, -1)  # (1, N)
    bias = tree_attention_bias(parents, prefix_len, dtype).to(device)  # (1, 1, N, P + N)
    positions = adapter.tree_positions(prefix_len, long_tensor(depths).to(device), rope_delta)  # (3, 1, N) | (1, N)
    out = model(input_ids=ids, attention_mask=bias, position_ids=positions, cache=cache, use_cache=True)
    return out.logits[0], out.cache


def verify_tree(
    model: Any,
    adapter: Any,
    tokens: Sequence[int],
    parents: Sequence[int],
    depths: Sequence[int],
    *,
    prefix_len: int,
    rope_delta: int,
    cache: Any,
    device: torch.device,
    dtype: torch.dtype,
    rule: AcceptanceRule,
    history: History,
    host: HostPredictions,
) -> Verified:
    """The verify step: tree forward, logits processing, argmax (one host sync)."""
    logits, cache = tree_logits(
        model, adapter, tokens, parents, depths,
        prefix_len=prefix_len, rope_delta=rope_delta, cache=cache, device=device, dtype=dtype,
    )
    scores = target_scores(rule, logits, history, tokens, parents, depths)  # (N, V); the raw logits when no rule
    return Verified(logits, host.argmax(scores, raw=logits), cache)


def long_tensor(values: Sequence[int]) -> torch.Tensor:
    """A host int64 tensor of ``values`` through one buffer (``torch.tensor`` of a list is 5x slower)."""
    if not values:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(array("q", values), dtype=torch.int64)


def keep_accepted(cache: Any, prefix_len: int, accepted: Sequence[int]) -> None:
    """Drop rejected tree entries from a DynamicCache: keep prefix + accepted nodes.

    The accepted path usually starts as the tree's leading chain (0, 1, 2, ...: drafters
    put their best chain first), whose entries are already in place; only the nodes after
    the first divergence are gathered, in place, before the cache is cut.
    """
    n_keep = len(accepted)
    lead = 0
    while lead < n_keep and accepted[lead] == lead:
        lead += 1
    end = prefix_len + n_keep
    src = dst = None
    if lead < n_keep:
        src = long_tensor([prefix_len + a for a in accepted[lead:]])
        dst = slice(prefix_len + lead, end)
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        if src is not None:
            where = src.to(keys.device)
            keys[:, :, dst] = keys.index_select(2, where)
            values[:, :, dst] = values.index_select(2, where)
        layer.keys = keys[:, :, :end]
        layer.values = values[:, :, :end]
