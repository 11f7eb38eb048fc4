"""The lossless tests also check that drafting did something: identity alone passes a drafter
whose trees never match (every pass then emits the target's one token, still exact).

``AcceptedDrafts`` counts, per method, the drafted tokens a test's decodes accepted (tokens
emitted beyond one per target pass); ``check()`` fails when a method that drafts trees (every
method but ``ar``) accepted none over the whole test, and when ``ar``, which drafts nothing,
emitted more than one token in a pass.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: The method that drafts nothing: one token per pass by construction.
NO_TREES = frozenset({"ar"})


class AcceptedDrafts:
    def __init__(self, where: str) -> None:
        self.where = where
        self.counts: Counter[str] = Counter()

    def add(self, method: str, out: Any) -> Any:
        """Count ``out`` (a ``recap.Generation``) for ``method``; returns it."""
        self.counts[method] += len(out.token_ids) - out.decode_steps
        return out

    def check(self) -> None:
        assert self.counts, f"{self.where}: nothing was decoded"
        for method, accepted in self.counts.items():
            if method in NO_TREES:
                assert accepted == 0, (
                    f"{self.where}: {method} drafts nothing, yet emitted {accepted} extra tokens"
                )
            else:
                assert accepted > 0, f"{self.where}: {method}'s trees never had a drafted token accepted"
