"""Typed records of the tabs' outputs.

A record is a dataclass whose fields name an event's output components. One instance
holds the components (the layout), another the values a handler returns; ``values.to(ui)``
lines them up for Gradio, and a field left at ``KEEP`` leaves its component as it is. No
positional output tuples, no dictionaries keyed by strings. A field's type says both what
it holds: the component, and the value a handler gives it (``tree: gr.Plot | go.Figure``;
a component alone, e.g. ``gr.Slider``, where handlers return an updated component).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gradio as gr


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: A record field left at KEEP leaves its component as it is (``gr.skip()``).
KEEP: Any = _Keep()


@dataclass
class Record:
    """Base of a tab's typed output record (subclasses are dataclasses with ``= KEEP`` defaults)."""

    def outputs(self) -> list[Any]:
        """The components, in field order (call on the instance that holds the layout)."""
        return [getattr(self, f.name) for f in fields(self)]

    def to(self, ui: Record) -> list[Any]:
        """These values in the order of ``ui.outputs()`` (``ui`` is the same record type)."""
        if type(ui) is not type(self):
            raise TypeError(f"{type(self).__name__} values wired to {type(ui).__name__} components")
        return [gr.skip() if getattr(self, f.name) is KEEP else getattr(self, f.name) for f in fields(self)]
