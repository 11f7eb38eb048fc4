"""Verifying a draft tree: one target forward over every node, then the acceptance rule.

Pure functions over the model, its KV cache and tensors, shared by the engine (every
decode step) and the auto budget (which times exactly this):

* ``tree_logits``: the tree forward: tree tokens (1, N) after the cached prefix, with an
  additive tree mask (1, 1, N, P + N) and explicit positions, -> raw logits (N, V);
* ``verify_tree``: ``tree_logits`` + ``acceptance.target_tokens`` (logits processing under
  the generation config, argmax) -> ``Verified``;
* ``topk_predictions``: what the memories learn (from the raw logits);
* ``keep_accepted``: drop the rejected nodes' KV entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from recap.acceptance import History, target_tokens
from recap.generation_config import AcceptanceRule
from recap.tree import tree_attention_bias


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
    ids = torch.tensor([list(tokens)], device=device)  # (1, N)
    bias = tree_attention_bias(parents, prefix_len, dtype).to(device)  # (1, 1, N, P + N)
    positions = adapter.tree_positions(prefix_len, torch.tensor(depths, device=device), rope_delta)  # (3, 1, N) | (1, N)
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
) -> Verified:
    """The verify step: tree forward, logits processing, argmax (one host sync)."""
    logits, cache = tree_logits(
        model, adapter, tokens, parents, depths,
        prefix_len=prefix_len, rope_delta=rope_delta, cache=cache, device=device, dtype=dtype,
    )
    return Verified(logits, target_tokens(rule, logits, history, tokens, parents, depths), cache)


def topk_predictions(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (N, V) -> top-k token ids (N, k) and their softmax probabilities (N, k).

    Top-k of the logits, then exp(logit - logsumexp): no (N, V) softmax is materialised.
    """
    logits = logits.float()
    top = torch.topk(logits, k, dim=-1)
    probs = (top.values - torch.logsumexp(logits, dim=-1, keepdim=True)).exp_()
    return top.indices, probs


def keep_accepted(cache: Any, prefix_len: int, accepted: Sequence[int]) -> None:
    """Drop rejected tree entries from a DynamicCache: keep prefix + accepted nodes."""
    n_keep = len(accepted)
    contiguous = list(accepted) == list(range(n_keep))
    idx = None if contiguous else torch.tensor([prefix_len + a for a in accepted])
    for layer in cache.layers:
        if contiguous:
            layer.keys = layer.keys[:, :, : prefix_len + n_keep]
            layer.values = layer.values[:, :, : prefix_len + n_keep]
        else:
            idx_dev = idx.to(layer.keys.device)
            layer.keys = torch.cat([layer.keys[:, :, :prefix_len], layer.keys.index_select(2, idx_dev)], dim=2)
            layer.values = torch.cat(
                [layer.values[:, :, :prefix_len], layer.values.index_select(2, idx_dev)], dim=2
            )
