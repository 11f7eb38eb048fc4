"""``tr``: Token Recycling, persistent 1-token rows filling a static breadth-first template."""

from __future__ import annotations

from typing import Any

from recap.core.config import RecapConfig
from recap.drafting.fastglue import FlatTR
from recap.drafting.protocol import DraftSetup, DraftState
from recap.drafting.recycling import RecyclingDrafter, persistent_memory, request_memory
from recap.drafting.tree import DraftTree, static_template
from recap.memory.store import RequestMemory


class TRDrafter(RecyclingDrafter):
    """Token Recycling: fill a static template breadth-first from the 1-token rows (M1 only)."""

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int) -> None:
        super().__init__(memory, budget)
        memory.use_context = False  # TR keeps the 1-token memory only
        self.config = config
        self.template = static_template(budget, config.max_depth, memory.k)
        self._flat = FlatTR(memory, self.template) if memory.fast else None  # the compiled path's

    def draft(self, state: DraftState) -> DraftTree:
        if self._flat is not None:
            return self._flat.draft(*self.seq.sync(state.seq))
        tree = DraftTree.root(state.seq[-1])
        where = {0: 0}  # template index -> tree index (absent: that subtree is dropped)
        lookups: dict[int, Any] = {}
        for t_idx, (t_parent, rank) in enumerate(self.template, start=1):
            parent = where.get(t_parent)
            if parent is None:
                continue
            ptok = tree.tokens[parent]
            if ptok not in lookups:
                lookups[ptok] = self.memory.m1.lookup(ptok)
            entry = lookups[ptok]
            if entry is None or rank >= len(entry.ids) or entry.probs[rank] <= 0:
                continue
            tok = entry.ids[rank]
            if tree.child(parent, tok) is not None:
                continue
            p = entry.normalised()[rank]
            where[t_idx] = tree.add(
                parent, tok, score=tree.scores[parent] * p, fused=p, sources=(("m1", 1.0, entry),), origin="m1"
            )
        return tree


def make_tr(setup: DraftSetup) -> TRDrafter:
    memory = persistent_memory(setup)
    budget = setup.node_budget()
    return TRDrafter(request_memory(memory, setup), setup.config, budget)
