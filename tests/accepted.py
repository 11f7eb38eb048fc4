"""The lossless tests also check that drafting did something: identity alone passes a drafter
whose trees never match (every pass then emits the target's one token, still exact).

``AcceptedDrafts`` counts, per method, the drafted tokens a test's decodes accepted (tokens
emitted beyond one per target pass); ``check()`` fails when a method that drafts trees (every
method but ``ar``) accepted none over the whole test, and when ``ar``, which drafts nothing,
emitted more than one token in a pass.

A decode whose drafted tokens a test counts passes ``config=TREES``: the default config's size
loop sizes each step's tree from wall-clock timings, and on a tiny random-weight model, where
trees do not pay for themselves, it may shrink them to nothing (lossless all the same).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import recap

#: The method that drafts nothing: one token per pass by construction.
NO_TREES = frozenset({"ar"})

#: ``"auto"`` under one measured verify curve: the cost-aware trees the default drafted before the
#: size loop. They do not depend on wall-clock time, so a test that needs trees exercised (drafted
#: tokens accepted, a path long enough, two runs' trees alike) gets them.
TREES = recap.RecapConfig(size_loop=False)


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
