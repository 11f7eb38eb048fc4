"""``pld``: prompt lookup decoding, one chain after the latest matching n-gram of the request."""

from __future__ import annotations

import numpy as np

from recap.core.config import RecapConfig
from recap.drafting.ar import ARDrafter
from recap.drafting.protocol import DraftSetup, DraftState
from recap.drafting.recycling import SeqBuffer
from recap.drafting.suffix import suffix_chain
from recap.drafting.tree import DraftTree


class PLDDrafter(ARDrafter):
    """The tokens that followed the latest earlier occurrence of the request's last n tokens
    (n = ``max_ngram`` .. 1), up to ``config.max_depth`` of them; keeps no memory."""

    def __init__(
        self, config: RecapConfig, blocked: frozenset[int] = frozenset(), max_ngram: int = 3
    ) -> None:
        self.config = config
        self.blocked = blocked  # image placeholders: never matched, never proposed
        self.max_ngram = max_ngram
        self._img = np.array(sorted(blocked), dtype=np.int64)
        self._seq = SeqBuffer()
        self._chain = np.empty(max(config.max_depth, 1), dtype=np.int64)

    def draft(self, state: DraftState) -> DraftTree:
        seq, n = self._seq.sync(state.seq)
        tree = DraftTree.root(state.seq[-1])
        depth = self.config.max_depth
        length = suffix_chain(seq, n, (1, self.max_ngram, depth), self._img, self._chain)
        node = 0
        for tok in self._chain[:length].tolist():  # a chain below the bare root, up to max_depth
            node = tree.add(node, tok, score=1.0, suffix=True, origin="lookup")
        return tree


def make_pld(setup: DraftSetup) -> PLDDrafter:
    return PLDDrafter(setup.config, setup.blocked)
