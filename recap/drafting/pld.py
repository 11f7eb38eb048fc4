"""``pld``: prompt lookup decoding, one chain after the latest matching n-gram of the request."""

from __future__ import annotations

from recap.core.config import RecapConfig
from recap.drafting.ar import ARDrafter
from recap.drafting.protocol import DraftSetup, DraftState
from recap.drafting.suffix import add_chain, suffix_continuation
from recap.drafting.tree import DraftTree


class PLDDrafter(ARDrafter):
    """The tokens that followed the latest earlier occurrence of the request's last n tokens
    (n = ``max_ngram`` .. 1), up to ``config.max_depth`` of them; keeps no memory."""

    def __init__(self, config: RecapConfig, blocked: frozenset[int] = frozenset(), max_ngram: int = 3) -> None:
        self.config = config
        self.blocked = blocked  # image placeholders: never matched, never proposed
        self.max_ngram = max_ngram

    def draft(self, state: DraftState) -> DraftTree:
        seq = state.seq
        tree = DraftTree.root(seq[-1])
        chain = suffix_continuation(
            seq, min_len=1, max_len=self.max_ngram, max_tokens=self.config.max_depth, blocked=self.blocked
        )
        add_chain(tree, chain, max_new=len(chain), max_depth=self.config.max_depth, confidence=1.0, origin="lookup")
        return tree


def make_pld(setup: DraftSetup) -> PLDDrafter:
    return PLDDrafter(setup.config, setup.blocked)
