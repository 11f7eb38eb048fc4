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

A drafter in another installed package registers itself in every process through an entry
point of the group ``recap.drafters`` (``ENTRY_POINT_GROUP``), named as its method and naming
its ``Method``; in that package's ``pyproject.toml``::

    [project.entry-points."recap.drafters"]
    mine = "my_drafter:METHOD"      # my_drafter.METHOD = Method("mine", ...)

They load the first time the registry is read (``registered()``, ``method_names()``,
``register()``, or ``get_method`` of a name that is not built in), once per process, after
the built-ins and before anything ``register`` adds. A plugin that cannot be imported, names
something that is not a ``Method``, names one under another name or breaks a rule of
``register`` is a ``PluginError`` naming the entry point and its distribution, and no plugin
is registered until that is fixed.
``REGISTRY``, ``METHODS`` and ``MEMORY_METHODS`` are the built-in methods only (constants for
code and docs that name them); the trace format accepts any identifier-like method name.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from recap.core.errors import PluginError
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
#: The entry point group through which installed packages add drafters.
ENTRY_POINT_GROUP = "recap.drafters"

_plugins_lock = threading.RLock()
_plugins_loaded = False  # set once the installed plugins are registered
_plugins_loading = False  # True while they load (a plugin's own registry reads see the built-ins)


def _registry() -> dict[str, Method]:
    """The registry, once this process has registered the installed plugins (``ENTRY_POINT_GROUP``)."""
    global _plugins_loaded, _plugins_loading
    if _plugins_loaded:
        return _registered
    with _plugins_lock:  # another thread waits here until the plugins are in
        if _plugins_loaded or _plugins_loading:
            return _registered
        _plugins_loading = True
        try:
            register_entry_points(entry_points(group=ENTRY_POINT_GROUP))
            _plugins_loaded = True
        finally:
            _plugins_loading = False
    return _registered


def registered() -> tuple[Method, ...]:
    """Every method now registered: the built-ins, the installed plugins, then the others in the order
    ``register`` added them."""
    return tuple(_registry().values())


def method_names() -> tuple[str, ...]:
    """The names of ``registered()``."""
    return tuple(_registry())


def get_method(name: Any) -> Method:
    """The record of ``name``; a ValueError naming the choices when there is none."""
    method = _registered.get(name) if isinstance(name, str) else None  # a built-in needs no plugin
    if method is None and isinstance(name, str):
        method = _registry().get(name)
    if method is None:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(_registry())}")
    return method


def _check(method: Method) -> None:
    """A ValueError / TypeError saying what is wrong with ``method`` as a new registry entry."""
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


def register(method: Method) -> Method:
    """Add a method (returned, so it can be kept); a ValueError / TypeError saying what is wrong."""
    _registry()  # the installed plugins first: a clash with one is reported here, not at their load
    _check(method)
    _registered[method.name] = method
    return method


def unregister(name: str) -> None:
    """Remove a method ``register`` or a plugin added (the built-ins stay); a ValueError when there is
    none."""
    if name in METHODS:
        raise ValueError(f"{name!r} is a built-in method and cannot be removed")
    if name not in _registry():
        raise ValueError(f"no method named {name!r} is registered")
    del _registered[name]


def _describe(ep: EntryPoint) -> str:
    """``'mine = my_drafter:METHOD' (group recap.drafters, from my-drafter 0.1)``: what to look for."""
    dist = getattr(ep, "dist", None)
    source = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    return f"drafter plugin '{ep.name} = {ep.value}' (entry point group {ENTRY_POINT_GROUP}, from {source})"


def _load_plugin(ep: EntryPoint) -> Method:
    """The ``Method`` an entry point names, checked; a PluginError naming the entry point."""
    try:
        method = ep.load()
    except Exception as exc:  # a plugin's own import error, whatever its type, is reported as the plugin's
        raise PluginError(f"{_describe(ep)} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if not isinstance(method, Method):
        raise PluginError(f"{_describe(ep)} names an object of type {type(method).__name__}, not a "
                          "recap.methods.Method")
    if method.name != ep.name:
        raise PluginError(f"{_describe(ep)} names the method {method.name!r}: the entry point must be named "
                          f"as its method")
    return method


def register_entry_points(eps: Iterable[EntryPoint]) -> tuple[Method, ...]:
    """Register the methods ``eps`` name, all or none (each is checked first); a PluginError naming the
    first bad one.

    The registry calls it once per process with the installed ``ENTRY_POINT_GROUP``; a plugin
    module that registers its own ``Method`` when imported is taken as registered.
    """
    methods: list[Method] = []
    for ep in eps:
        method = _load_plugin(ep)
        if _registered.get(method.name) is method:  # the module registered itself on import
            continue
        if any(m.name == method.name for m in methods):
            raise PluginError(f"{_describe(ep)}: another plugin already names a method {method.name!r}")
        try:
            _check(method)
        except (TypeError, ValueError) as exc:
            raise PluginError(f"{_describe(ep)}: {exc}") from None
        methods.append(method)
    for method in methods:
        _registered[method.name] = method
    return tuple(methods)
