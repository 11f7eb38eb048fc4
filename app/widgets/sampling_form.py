"""The sampling settings: the generation-config fields the app edits, defined once.

They are not ``RecapConfig`` fields (``app.widgets.config_form``): they say how the *target* decodes
(``generate(do_sample=True)`` under temperature / top-p / top-k), not how a drafter drafts,
and go to ``recap.iter_steps`` as its ``generation_config`` and ``seed``. Every ``Knob`` below is
one widget of the Decode and Compare tabs' *Sampling* group and one API parameter of ``/run``
and ``/compare`` (named as the knob, appended after the existing parameters so positional
callers keep working; each defaults to the widget's value, sampling off). ``KNOB_NAMES`` is
their order; ``parse_sampling`` reads them into a ``Sampling`` (a ``UserError`` naming the knob
and its range for a bad value); ``build_widgets`` lays them out.

Off (the default), the run decodes under the model's own generation config (the embedded
model's is greedy). On, ``do_sample`` with the group's temperature, top-p and top-k overrides
it; top-k is always sent (0: off), because a checkpoint may ship ``top_k: 1`` (Qwen2-VL and
Qwen2.5-VL do), under which a temperature alone stays greedy, as in ``generate()``.

The seed is read either way: every run of the app draws from a private generator seeded with
it (``recap.generate(seed=...)``), so a sampled run, the group's or a model config's own, is
reproducible, and in Compare one seed gives every method the same draws. Its ceilings are
fixed here, not per deployment: no knob changes the cost of a step (``max new tokens`` bounds
the steps; a high temperature only makes them shorter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import gradio as gr

from recap.core.config import RecapConfig
from recap.verification.seed import MAX_SEED

from ..boundary.errors import UserError
from ..boundary.validation import as_bool, as_float, as_int
from ..state.decoding import DEFAULT_SEED, Sampling
from ..state.settings import Settings
from .components import loose
from .config_form import parse_config

#: Hottest temperature the app samples at (the How it works chart goes to 5: acceptance is gone by then).
MAX_TEMPERATURE = 10.0
#: Largest top-k (0 turns it off; a k past the vocabulary keeps every token, as in transformers).
MAX_SAMPLING_TOP_K = 1000
#: "New seed" draws from 0 .. this (a number a visitor can read and type back; any seed up to MAX_SEED works).
NEW_SEED_BELOW = 1_000_000


@dataclass(frozen=True)
class Knob:
    """One widget of the Sampling group, and the API parameter of the same name."""

    name: str  # the API parameter (and the key ``parse_sampling`` reads)
    kind: Literal["bool", "float", "int"]
    label: str
    what: str  # how messages name it
    default: bool | float | int
    low: float = 0.0  # the range: low < value (``low_open``) or low <= value, and value <= high
    high: float = 0.0
    low_open: bool = False
    info: str | None = None

    def check(self, value: Any) -> bool | float | int:
        """The value as its kind within its range, or a UserError naming the knob and the range."""
        what = f"sampling: {self.what}"
        if self.kind == "bool":
            return as_bool(what, value)
        number: float | int = as_int(what, value) if self.kind == "int" else as_float(what, value)
        below = number <= self.low if self.low_open else number < self.low
        if below or number > self.high:
            lowest = f"above {_num(self.low)}" if self.low_open else f"at least {_num(self.low)}"
            raise UserError(f"{what} must be {lowest} and at most {_num(self.high)}, got {_num(number)}")
        return number

    def widget(self, elem_id: str) -> gr.Component:
        """The widget, showing the default (unconverted input: ``check`` names what is wrong)."""
        if self.kind == "bool":
            component: gr.Component = gr.Checkbox(
                self.default, label=self.label, info=self.info, elem_id=elem_id
            )
        else:
            component = gr.Number(self.default, label=self.label, info=self.info, elem_id=elem_id,
                                  precision=0 if self.kind == "int" else None)
        return loose(component)


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


KNOBS: tuple[Knob, ...] = (
    Knob("sampling", "bool", "sample", "sampling on", False,
         info="off: the model's own generation config (the embedded model's is greedy)"),
    Knob("temperature", "float", "temperature", "temperature", 0.7, 0.0, MAX_TEMPERATURE, low_open=True),
    Knob("top_p", "float", "top-p", "top-p", 0.9, 0.0, 1.0, low_open=True, info="1: off"),
    Knob("sampling_top_k", "int", "top-k", "top-k", 0, 0, MAX_SAMPLING_TOP_K, info="0: off"),
    Knob("seed", "int", "seed", "seed", DEFAULT_SEED, 0, MAX_SEED, info="same seed, same tokens"),
)
KNOB_NAMES: tuple[str, ...] = tuple(k.name for k in KNOBS)
_BY_NAME = {k.name: k for k in KNOBS}


def default_values() -> dict[str, Any]:
    """The knobs' initial values by name, in API order."""
    return {k.name: k.default for k in KNOBS}


def parse_sampling(values: Mapping[str, Any]) -> Sampling:
    """The Sampling group's values (by name) -> ``Sampling``; UserError naming the knob.

    Off, temperature / top-p / top-k are not read (whatever they hold is no error, as the
    budget box under *auto*); the seed is read either way.
    """
    missing = [n for n in KNOB_NAMES if n not in values]
    if missing:
        raise UserError(f"sampling settings missing: {', '.join(missing)}")
    on = bool(_BY_NAME["sampling"].check(values["sampling"]))
    seed = int(_BY_NAME["seed"].check(values["seed"]))
    if not on:
        return Sampling(on=False, seed=seed)
    return Sampling(True, float(_BY_NAME["temperature"].check(values["temperature"])),
                    float(_BY_NAME["top_p"].check(values["top_p"])),
                    int(_BY_NAME["sampling_top_k"].check(values["sampling_top_k"])), seed)


def split(named: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A handler's keyword inputs -> (the advanced settings, the sampling knobs), by name."""
    knobs = {k: v for k, v in named.items() if k in _BY_NAME}
    return {k: v for k, v in named.items() if k not in _BY_NAME}, knobs


def parse_settings(named: Mapping[str, Any], settings: Settings) -> tuple[RecapConfig, Sampling]:
    """A decode handler's keyword inputs -> its RecapConfig (within the deployment's limits) and
    Sampling; a ``UserError`` names the first bad setting."""
    drafter_settings, knobs = split(named)
    return parse_config(drafter_settings, settings), parse_sampling(knobs)


#: The browser draws a new seed itself: no round trip, nothing queued behind a running decode.
NEW_SEED_JS = f"() => Math.floor(Math.random() * {NEW_SEED_BELOW})"


def build_widgets(prefix: str, intro: str) -> dict[str, gr.Component]:
    """The Sampling group (an accordion, call inside a layout block); its knobs by name, in API order.

    ``prefix`` starts the elements' ids (``{prefix}-sampling``, ``{prefix}-temperature``, ...,
    ``{prefix}-new-seed`` the button); ``intro`` is the line above the knobs.
    """
    with gr.Accordion("Sampling", open=False, elem_id=f"{prefix}-sampling-group"):
        gr.Markdown(intro)
        made = {"sampling": KNOBS[0].widget(f"{prefix}-sampling")}
        with gr.Row():
            for knob in KNOBS[1:4]:
                made[knob.name] = knob.widget(f"{prefix}-{knob.name.replace('_', '-')}")
        with gr.Row():
            made["seed"] = KNOBS[4].widget(f"{prefix}-seed")
            new_seed = gr.Button("new seed", size="sm", scale=0, min_width=110, elem_id=f"{prefix}-new-seed")
    new_seed.click(None, None, made["seed"], js=NEW_SEED_JS, api_visibility="private")
    return {name: made[name] for name in KNOB_NAMES}
