"""The family registry: one ``register`` line per supported model family.

Everything that names the families reads it: ``load_target``'s lookup by ``config.json``'s
``model_type`` (``ADAPTERS``), ``SUPPORTED_FAMILIES`` (``recap.SUPPORTED_FAMILIES``, the app's
model help) and the names in the unsupported-family error (``family_names()``). A new family
is one module with its ``FamilyAdapter`` subclass (``recap.models.families.base``) plus one
``register`` line below.

``register`` / ``unregister`` add and remove a family at run time (a family defined outside
this package, a test's); both views below are live, so they list it at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import overload

from recap.models.families.base import FamilyAdapter
from recap.models.families.gemma3 import Gemma3Adapter
from recap.models.families.idefics3 import Idefics3Adapter
from recap.models.families.llava import LlavaAdapter
from recap.models.families.llava_next import LlavaNextAdapter
from recap.models.families.qwen2_5_vl import Qwen2_5_VLAdapter
from recap.models.families.qwen2_vl import Qwen2VLAdapter
from recap.models.families.qwen3_vl import Qwen3VLAdapter, Qwen3VLMoeAdapter
from recap.models.families.smolvlm import SmolVLMAdapter

_ADAPTERS: dict[str, FamilyAdapter] = {}
#: The registered adapters by family (``model_type``), in registration order: a read-only live view.
ADAPTERS: Mapping[str, FamilyAdapter] = MappingProxyType(_ADAPTERS)


class _RegisteredFamilies(Sequence[str]):
    """The registered families' names in registration order, read at each use (so a family
    registered later is listed); indexes, iterates and tests membership like the tuple it was."""

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return tuple(_ADAPTERS)[index]

    def __len__(self) -> int:
        return len(_ADAPTERS)

    def __contains__(self, family: object) -> bool:
        return family in _ADAPTERS

    def __repr__(self) -> str:
        return repr(tuple(_ADAPTERS))


#: The supported families (``model_type`` values), in registration order; live.
SUPPORTED_FAMILIES: Sequence[str] = _RegisteredFamilies()


def family_names() -> str:
    """The registered families as people name them, for messages:
    ``"Qwen2-VL, Qwen2.5-VL, LLaVA-1.5 (llava), LLaVA-NeXT / 1.6 (llava_next)"``."""
    return ", ".join(adapter.display_name for adapter in _ADAPTERS.values())


def register(adapter: FamilyAdapter) -> FamilyAdapter:
    """Add a family; returns ``adapter``. TypeError unless it is a ``FamilyAdapter`` instance whose
    ``family``, ``display_name`` and ``model_class`` are non-empty strings; ValueError when its
    family is already registered (``unregister`` it first to replace it)."""
    if not isinstance(adapter, FamilyAdapter):
        raise TypeError(f"a family adapter must be a FamilyAdapter instance, not {type(adapter).__name__}")
    for name in ("family", "display_name", "model_class"):
        value = getattr(adapter, name, None)
        if not isinstance(value, str) or not value.strip():
            raise TypeError(f"{type(adapter).__name__}.{name} must be a non-empty string, got {value!r}")
    held = _ADAPTERS.get(adapter.family)
    if held is not None:
        raise ValueError(f"model family {adapter.family!r} is already registered ({held!r})")
    _ADAPTERS[adapter.family] = adapter
    return adapter


def unregister(family: str) -> FamilyAdapter:
    """Remove a family; returns its adapter. ValueError naming the registered ones when it is not one."""
    if family not in _ADAPTERS:
        raise ValueError(f"model family {family!r} is not registered; registered: {', '.join(_ADAPTERS)}")
    return _ADAPTERS.pop(family)


register(Qwen2VLAdapter())
register(Qwen2_5_VLAdapter())
register(Qwen3VLAdapter())
register(Qwen3VLMoeAdapter())
register(LlavaAdapter())
register(LlavaNextAdapter())
register(Idefics3Adapter())
register(SmolVLMAdapter())
register(Gemma3Adapter())
