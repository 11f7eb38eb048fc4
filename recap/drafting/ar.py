"""``ar``: autoregressive decoding, the reference drafter: the tree is the root alone (one token a step)."""

from __future__ import annotations

from recap.drafting.protocol import DraftSetup, DraftState, Verification
from recap.drafting.tree import DraftTree
from recap.memory.store import RequestMemory


class ARDrafter:
    """Drafts nothing and learns nothing: every step verifies the root alone."""

    needs_predictions = False
    budget = 0
    memory: RequestMemory | None = None

    def draft(self, state: DraftState) -> DraftTree:
        return DraftTree.root(state.seq[-1])

    def update(self, state: DraftState, verified: Verification) -> None:
        return None


def make_ar(setup: DraftSetup) -> ARDrafter:
    return ARDrafter()
