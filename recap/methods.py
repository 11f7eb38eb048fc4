"""The method registry: one record per decoding method, read by everything else.

A method is its name (what ``recap.generate(method=...)`` takes), a label for people,
a colour for figures, whether it keeps a persistent ``TokenMemory``, and the factory
that builds its drafter. The engine, the benchmark, the command line (and the app)
read these records instead of re-declaring the names. A new drafter is one module
with its class and factory plus one line in ``REGISTRY``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recap.core.config import RecapConfig
from recap.drafting.drafters import Drafter, DraftInputs, make_ar, make_pld, make_recap, make_tr
from recap.drafting.treecost import PassCost
from recap.memory.store import RequestMemory


@dataclass(frozen=True)
class Method:
    """One decoding method."""

    name: str  # the value of ``method=``
    label: str  # for people (tables, the app's choices)
    colour: str  # for figures (hex)
    keeps_memory: bool  # carries a persistent TokenMemory across requests (needs one per request)
    factory: Callable[[DraftInputs], Drafter]
    cost_aware: bool = False  # grows its tree under the measured pass cost when config.cost_aware

    def build(
        self,
        memory: RequestMemory | None,
        config: RecapConfig,
        budget: int,
        blocked: frozenset[int],
        cost: PassCost | None = None,
    ) -> Drafter:
        """The drafter for one request (``cost``: the measured pass cost, for a cost-aware tree)."""
        return self.factory(DraftInputs(memory, config, budget, frozenset(blocked), cost))


REGISTRY: tuple[Method, ...] = (
    Method("ar", "Autoregressive", "#6b7280", False, make_ar),
    Method("pld", "Prompt lookup", "#a16207", False, make_pld),
    Method("tr", "Token Recycling", "#16a34a", True, make_tr),
    Method("recap", "RECAP", "#2563eb", True, make_recap, cost_aware=True),
)

#: Method names in registry order (``recap.METHODS``).
METHODS: tuple[str, ...] = tuple(m.name for m in REGISTRY)
#: Names of the methods that keep a persistent memory.
MEMORY_METHODS: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.keeps_memory)


def get_method(name: Any) -> Method:
    """The record of ``name``; a ValueError naming the choices when there is none."""
    for m in REGISTRY:
        if m.name == name:
            return m
    raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
