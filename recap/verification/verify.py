"""Verifying a draft tree against the model: the tree forward and the KV cache after it.

Pure functions over the model, its KV cache and tensors, which the engine's verify and
update steps (``recap.engine.steps``) compose with the acceptance rule
(``recap.verification.acceptance``) and the host copy (``recap.verification.hostcopy``);
the auto budget times that same verify step:

* ``tree_logits``: the tree forward: tree tokens (1, N) after the cached prefix, with an
  additive tree mask (1, 1, N, P + N) and explicit positions, -> raw logits (N, V). Where the
  family's layers attend over different windows (``FamilyAdapter.attention_windows``: Gemma
  3's sliding and global layers), the mask is a dict with one mask per layer type, each sized
  to what that type's cache layers hold (``windowed_tree_bias``);
* ``keep_accepted``: drop the rejected nodes' KV entries.

Sliding-window cache layers (``is_sliding``: transformers' ``DynamicSlidingWindowLayer``, which
``DynamicCache(config=...)`` makes for such layers, as ``generate()`` does) keep only the
last ``window - 1`` entries. Before a tree pass they are told to keep everything until the
compaction (``activate_past_recording``), so that the accepted path can be gathered; the
compaction then cuts them back to their window and their length count to the new prefix.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from recap.verification.acceptance import TreeShape
from recap.verification.treemask import device_tree_bias, tree_attention_bias, windowed_tree_bias


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
    windows = adapter.attention_windows(model)
    if windows is None:
        bias: Any = full_tree_bias(tree.parents, prefix_len, dtype, device)  # (1, 1, N, P + N)
    else:
        bias = layer_type_masks(windows, tree, prefix_len, cache, dtype, device)
    depths = long_tensor(tree.depths).to(device)  # (N,)
    positions = adapter.tree_positions(prefix_len, depths, rope_delta)  # (3, 1, N) | (1, N)
    out = model(input_ids=ids, attention_mask=bias, position_ids=positions, cache=cache, use_cache=True)
    return out.logits[0], out.cache


def layer_type_masks(
    windows: Mapping[str, int | None], tree: TreeShape, prefix_len: int, cache: Any, dtype: torch.dtype,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """One tree mask per layer type: the full one (1, 1, N, P + N) for a type without a window,
    ``windowed_tree_bias`` over what the type's cache layers hold for one with a window (a
    sliding cache layer of that window: its stored entries; a full cache layer: all P). Sliding
    cache layers are set to keep the tree's entries for ``keep_accepted``."""
    held: dict[int, int] = {}
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False):
            if not layer.record_past:
                layer.activate_past_recording()
            held[layer.sliding_window] = layer.keys.shape[-2] if layer.is_initialized else 0
    masks: dict[str, torch.Tensor] = {}
    full = None
    for kind, window in windows.items():
        if window is None:
            if full is None:
                full = full_tree_bias(tree.parents, prefix_len, dtype, device)
            masks[kind] = full
        else:
            cached = min(held.get(window, prefix_len), prefix_len)
            bias = windowed_tree_bias(tree.parents, tree.depths, prefix_len, cached, window, dtype)
            masks[kind] = bias.to(device)
    return masks


def full_tree_bias(
    parents: Sequence[int], prefix_len: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The tree mask where the model runs: on the host as bytes (the CPU's cheapest), on an accelerator
    from the (N, N) tree block alone (``device_tree_bias``: no host copy that grows with the context)."""
    if device.type == "cpu":
        return tree_attention_bias(parents, prefix_len, dtype)
    return device_tree_bias(parents, prefix_len, dtype, device)


def long_tensor(values: Sequence[int]) -> torch.Tensor:
    """A host int64 tensor of ``values`` through one buffer (``torch.tensor`` of a list is 5x slower)."""
    if not values:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(array("q", values), dtype=torch.int64)


def keep_accepted(cache: Any, prefix_len: int, accepted: Sequence[int]) -> None:
    """Drop rejected tree entries from a DynamicCache: keep prefix + accepted nodes.

    The accepted path usually starts as the tree's leading chain (0, 1, 2, ...: drafters
    put their best chain first), whose entries are already in place; only the nodes after
    the first divergence are gathered, in place, before the cache is cut. A sliding-window
    layer (see the module docstring) holds the tree after only its window's share of the
    prefix: its entries are gathered from there, then cut back to the last ``window - 1``.
    """
    n_keep = len(accepted)
    lead = 0
    while lead < n_keep and accepted[lead] == lead:
        lead += 1
    gathers: dict[tuple[int, torch.device], torch.Tensor] = {}
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        sliding = getattr(layer, "is_sliding", False)
        # Where the root (position prefix_len) sits among this layer's entries.
        start = keys.shape[-2] - (layer.cumulative_length - prefix_len) if sliding else prefix_len
        if start < 0:
            raise RuntimeError(
                "a sliding-window cache layer dropped entries of the tree before its compaction "
                "(a tree pass must go through tree_logits, which makes it keep them)"
            )
        end = start + n_keep
        if lead < n_keep:
            where = gathers.get((start, keys.device))
            if where is None:
                where = long_tensor([start + a for a in accepted[lead:]]).to(keys.device)
                gathers[(start, keys.device)] = where
            keys[:, :, start + lead : end] = keys.index_select(2, where)
            values[:, :, start + lead : end] = values.index_select(2, where)
        begin = max(0, end - layer.sliding_window + 1) if sliding else 0
        layer.keys = keys[:, :, begin:end]
        layer.values = values[:, :, begin:end]
        if sliding:
            layer.cumulative_length = prefix_len + n_keep
