"""Verifying a draft tree against the model: the tree forward and the KV cache after it.

Pure functions over the model, its KV cache and tensors, which the engine's verify and
update steps (``recap.engine.steps``) compose with the acceptance rule
(``recap.verification.acceptance``) and the host copy (``recap.verification.hostcopy``);
the auto budget times that same verify step:

* ``tree_logits``: the tree forward: tree tokens (1, N) after the cached prefix, with an
  additive tree mask (1, 1, N, P + N) and explicit positions, -> raw logits (N, V);
* ``keep_accepted``: drop the rejected nodes' KV entries.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import torch

from recap.verification.acceptance import TreeShape
from recap.verification.treemask import tree_attention_bias


def tree_logits(
    model: Any,
    adapter: Any,
    tree: TreeShape,
    *,
    prefix_len: int,
    rope_delta: int,
    cache: Any,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, Any]:
    """One forward over a tree after ``prefix_len`` cached tokens -> raw logits (N, V) and the cache
    (now holding prefix + all N tree entries)."""
    ids = long_tensor(tree.tokens).to(device).view(1, -1)  # (1, N)
    bias = tree_attention_bias(tree.parents, prefix_len, dtype).to(device)  # (1, 1, N, P + N)
    positions = adapter.tree_positions(prefix_len, long_tensor(tree.depths).to(device), rope_delta)  # (3, 1, N) | (1, N)
    out = model(input_ids=ids, attention_mask=bias, position_ids=positions, cache=cache, use_cache=True)
    return out.logits[0], out.cache


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
