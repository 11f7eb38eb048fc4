"""The method registry: one record per decoding method, read by everything else at call time.

A method is its name (what ``recap.generate(method=...)`` takes), a label for people, a
colour for figures, whether it keeps a persistent ``TokenMemory`` across requests (the
benchmark and the app then carry one for it), and the factory that builds its drafter for
one request from a ``recap.drafting.protocol.DraftSetup``. The factory decides what its
drafter needs (a memory, a budget, a measured pass cost); the engine builds every method's
drafter the same way (``Method.build``) and has no per-method branch.

A new drafter is one module (its class, honouring ``recap.drafting.protocol``, and its
factory) plus one line: ``register(Method(...))``. The engine, the benchmark (suites, runner,
reports), the command line and the app ask ``registered()`` / ``get_method`` when they run,
so a method registered after import is seen everywhere; ``unregister`` removes it again.
``REGISTRY``, ``METHODS`` and ``MEMORY_METHODS`` are the built-in methods only (constants for
code and docs that name them); the trace format accepts any identifier-like method name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recap.drafting.ar import make_ar
from recap.drafting.pld import make_pld
from recap.drafting.protocol import Drafter, DraftSetup, check_drafter
from recap.drafting.recap_drafter import make_recap
from recap.drafting.token_recycling import make_tr
from recap.trace.fields import IDENTIFIER_PATTERN


@dataclass(frozen=True)
class Method:
    """One decoding method."""

    name: str  # the value of ``method=``: an identifier (``IDENTIFIER_PATTERN``, what a trace accepts)
    label: str  # for people (tables, the app's choices)
    colour: str  # for figures: "#rrggbb"
    keeps_memory: bool  # carries a persistent TokenMemory across requests (callers keep one for it)
    factory: Callable[[DraftSetup], Drafter]

    def build(self, setup: DraftSetup) -> Drafter:
        """This method's drafter for one request, checked against the drafter contract (TypeError)."""
        drafter = self.factory(setup)
        check_drafter(drafter, self.name)
        return drafter


#: The built-in methods, in the order tables list them.
REGISTRY: tuple[Method, ...] = (
    Method("ar", "Autoregressive", "#6b7280", False, make_ar),
    Method("pld", "Prompt lookup", "#a16207", False, make_pld),
    Method("tr", "Token Recycling", "#16a34a", True, make_tr),
    Method("recap", "RECAP", "#2563eb", True, make_recap),
)
#: Built-in method names in registry order (``recap.METHODS``).
METHODS: tuple[str, ...] = tuple(m.name for m in REGISTRY)
#: Names of the built-in methods that keep a persistent memory.
MEMORY_METHODS: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.keeps_memory)

_registered: dict[str, Method] = {m.name: m for m in REGISTRY}  # insertion order = registry order
#: Names a method may not take: the benchmark's own rows (transformers' generate()).
RESERVED = frozenset({"hf", "hf-pld"})


def registered() -> tuple[Method, ...]:
    """Every method now registered: the built-ins, then the others in registration order."""
    return tuple(_registered.values())


def method_names() -> tuple[str, ...]:
    """The names of ``registered()``."""
    return tuple(_registered)


def get_method(name: Any) -> Method:
    """The record of ``name``; a ValueError naming the choices when there is none."""
    method = _registered.get(name) if isinstance(name, str) else None
    if method is None:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(_registered)}")
    return method


def register(method: Method) -> Method:
    """Add a method (returned, so it can be kept); a ValueError / TypeError saying what is wrong."""
    if not isinstance(method, Method):
        raise TypeError(f"register() takes a recap.methods.Method, got {type(method).__name__}")
    name = method.name
    if not (isinstance(name, str) and re.fullmatch(IDENTIFIER_PATTERN, name)):
        raise ValueError(
            f"a method name is a lowercase letter, then at most 31 lowercase letters, digits, '_' or '-' "
            f"(what a trace records); got {name!r}"
        )
    if name in _registered or name in RESERVED:
        raise ValueError(f"a method named {name!r} is already registered")
    if not isinstance(method.label, str) or not method.label.strip():
        raise ValueError(f"method {name!r} needs a label for people")
    colour = method.colour
    if not (isinstance(colour, str) and len(colour) == 7 and colour[0] == "#"
            and all(c in "0123456789abcdefABCDEF" for c in colour[1:])):
        raise ValueError(f"method {name!r} needs a colour '#rrggbb', got {colour!r}")
    if not isinstance(method.keeps_memory, bool) or not callable(method.factory):
        raise TypeError(f"method {name!r} needs keeps_memory (a bool) and a factory (a callable)")
    _registered[name] = method
    return method


def unregister(name: str) -> None:
    """Remove a method ``register`` added (the built-ins stay); a ValueError when there is none."""
    if name in METHODS:
        raise ValueError(f"{name!r} is a built-in method and cannot be removed")
    if name not in _registered:
        raise ValueError(f"no method named {name!r} is registered")
    del _registered[name]
