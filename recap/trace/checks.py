"""The structural checks of a trace (``recap.trace.format`` runs them when a trace loads or validates).

Each function raises ``StructureError`` naming the field, as a path into the JSON
(``steps[3].nodes[7].parent: ...``); the trace's reader turns it into its ``TraceError``.
They read the records' fields only, so they take the records without naming their classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recap.trace.fields import MAX_NODES_PER_STEP, MAX_STEPS, MAX_TOTAL_NODES


class StructureError(ValueError):
    """A trace whose fields are well typed but do not fit together (a tree, a path, the draws)."""


def check_node_counts(data: dict[str, Any]) -> None:
    """Refuse an oversized trace from the raw JSON, before building any object."""
    steps = data.get("steps")
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        return  # the typed read names the problem
    total = 0
    for i, s in enumerate(steps):
        nodes = s.get("nodes") if isinstance(s, dict) else None
        if isinstance(nodes, list):
            if len(nodes) > MAX_NODES_PER_STEP:
                raise StructureError(
                    f"steps[{i}].nodes: {len(nodes)} nodes; a step holds at most {MAX_NODES_PER_STEP}"
                )
            total += len(nodes)
    if total > MAX_TOTAL_NODES:
        raise StructureError(f"steps: {total} nodes in all; at most {MAX_TOTAL_NODES} are read")


def check_tree(nodes: Sequence[Any], at: str) -> None:
    if not nodes:
        raise StructureError(f"{at}.nodes: a tree has at least its root")
    for j, node in enumerate(nodes):
        where = f"{at}.nodes[{j}]"
        if node.index != j:
            raise StructureError(f"{where}.index: nodes are listed by index; expected {j}, got {node.index}")
        if j == 0:
            if node.parent != -1 or node.depth != 0:
                raise StructureError(f"{where}: node 0 is the root, with parent -1 and depth 0 "
                                 f"(got parent {node.parent}, depth {node.depth})")
            continue
        if not 0 <= node.parent < j:
            raise StructureError(
                f"{where}.parent: expected an earlier node's index (0 to {j - 1}), got {node.parent}"
            )
        if node.depth != nodes[node.parent].depth + 1:
            raise StructureError(
                f"{where}.depth: expected its parent's depth + 1 = {nodes[node.parent].depth + 1}, "
                f"got {node.depth}"
            )


def check_order(nodes: Sequence[Any], at: str) -> None:
    """Insertion orders (when recorded) are 0..n-1 from the root, parents before children;
    a source's top-k lists have one length."""
    orders = [node.order for node in nodes]
    if any(o >= 0 for o in orders):
        if sorted(orders) != list(range(len(nodes))) or orders[0] != 0:
            raise StructureError(
                f"{at}.nodes: the insertion orders {short(orders)} are not 0..{len(nodes) - 1} "
                "with the root first"
            )
        for j, node in enumerate(nodes[1:], start=1):
            if orders[node.parent] > orders[j]:
                raise StructureError(f"{at}.nodes[{j}].order: the node was added before its parent")
    for j, node in enumerate(nodes):
        for k, src in enumerate(node.sources):
            n = len(src.top_ids)
            if len(src.top_probs) != n or (src.top_texts and len(src.top_texts) != n):
                raise StructureError(
                    f"{at}.nodes[{j}].sources[{k}]: top_ids, top_probs and top_texts differ in length"
                )


def check_path(s: Any, at: str) -> None:
    acc, nodes = s.accepted, s.nodes
    if not acc or acc[0] != 0:
        raise StructureError(
            f"{at}.accepted: the accepted path starts at the root (node 0), got {short(acc)}"
        )
    for a, b in zip(acc, acc[1:]):
        if not b < len(nodes) or nodes[b].parent != a:
            raise StructureError(f"{at}.accepted: {short(acc)} is not a path down from the root "
                             f"(node {b} is not a child of node {a})")
    # The path's drafted tokens then the bonus token, cut at EOS / max_new_tokens.
    expected = [nodes[a].token for a in acc[1:]] + [s.bonus_token]
    e = s.emitted
    if len(e) < max(1, len(acc) - 1) or e != expected[: len(e)]:
        raise StructureError(f"{at}.emitted: expected the accepted path's tokens then the bonus token, "
                         f"{short(expected)} (cut at the end), got {short(e)}")


def short(values: list[int], n: int = 12) -> str:
    if len(values) <= n:
        return str(values)
    return f"[{', '.join(map(str, values[:n]))}, …] ({len(values)} entries)"


def check_draws(s: Any, at: str, sampling: bool) -> None:
    """A sampling trace's step names where the target drew (its walk from the root, one draw per
    emitted token) and may give every node's acceptance probability; a greedy trace's names neither."""
    if not sampling:
        if s.drawn or s.accept_probs:
            raise StructureError(f"{at}: drawn / accept_probs are recorded only when the trace samples "
                                 "(its sampling settings are missing)")
        return
    walk = s.accepted[: len(s.emitted)]
    if s.drawn != walk:
        raise StructureError(f"{at}.drawn: expected the accepted path's nodes that emitted a token, "
                             f"{short(walk)}, got {short(s.drawn)}")
    if s.accept_probs and len(s.accept_probs) != len(s.nodes):
        raise StructureError(
            f"{at}.accept_probs: {len(s.accept_probs)} probabilities for {len(s.nodes)} nodes"
        )
