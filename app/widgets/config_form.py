"""The advanced settings: ``RecapConfig``'s fields as the app shows, names and checks them, defined once.

Every field of ``recap.RecapConfig`` has one ``Setting`` here: the widgets it is edited
with (each widget is also the ``/run`` API parameter of the same name), the row of the
Decode tab's "Advanced settings" they sit in, and the deployment ceiling
(``app.state.settings.Limits``) that bounds it. The widgets, their order (the fields' order, so
the ``/run`` parameters keep their positions), ``parse_config`` and ``check_limits`` all
read ``SETTINGS``; nothing else in the app lists the fields. A field visitors do not edit
has a Setting without widgets and keeps the library's default. A field of ``RecapConfig``
without a Setting (or a Setting without a field) fails at import, naming it.

Adding a setting: the field (and its check) in ``RecapConfig``, one ``Setting`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import gradio as gr

from recap.core.config import FUSION_MODES, RecapConfig

from ..boundary.errors import UserError
from ..boundary.guard import guarded
from ..boundary.validation import as_bool, as_float, as_int
from ..state.settings import Settings
from .components import loose

#: The app's defaults: the library's, with the image-scoped memories on (each session owns its memory).
SESSION_CONFIG = RecapConfig(scoped_memory=True)

Kind = Literal["int", "float", "bool", "choice"]
Value = int | float | bool | str


@dataclass(frozen=True)
class Param:
    """One widget of the advanced settings, and the ``/run`` API parameter of the same name."""

    name: str  # the API parameter's name: also the key ``parse_config`` reads
    kind: Kind  # int / float: a number box; bool: a checkbox; choice: a dropdown of ``choices``
    label: str
    what: str = ""  # how validation messages name it (default: ``name``)
    info: str | None = None
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> Value:
        """The value as its kind, or a UserError naming the widget; a choice is checked by RecapConfig."""
        what = self.what or self.name
        if self.kind == "int":
            return as_int(what, value)
        if self.kind == "float":
            return as_float(what, value)
        if self.kind == "bool":
            return as_bool(what, value)
        return str(value)

    def widget(self, value: Any) -> gr.Component:
        """The widget showing ``value`` (unconverted input: ``check`` names what is wrong)."""
        if self.kind == "bool":
            component: gr.Component = gr.Checkbox(value, label=self.label, info=self.info)
        elif self.kind == "choice":
            component = gr.Dropdown(list(self.choices), value=value, label=self.label)
        else:
            component = gr.Number(value, label=self.label, precision=0 if self.kind == "int" else None)
        return loose(component)


def _one(params: tuple[Param, ...], values: Mapping[str, Any]) -> Any:
    (param,) = params
    return param.check(values[param.name])


def _shown_as_is(default: Any) -> tuple[Any, ...]:
    return (default,)


@dataclass(frozen=True)
class Setting:
    """How the app edits one ``RecapConfig`` field."""

    field: str
    params: tuple[Param, ...] = ()  # (): visitors do not edit it; the library's default is used
    row: int = 0  # the Advanced settings row of its widgets (rows top to bottom; fields in order in a row)
    ceiling: str | None = None  # the ``Limits`` field bounding it in this deployment
    # the widgets' values (by name) -> the field's value, checked; and the field's default -> the widgets'
    # values
    read: Callable[[tuple[Param, ...], Mapping[str, Any]], Any] = _one
    shown: Callable[[Any], tuple[Any, ...]] = _shown_as_is

    def value(self, values: Mapping[str, Any]) -> Any:
        return self.read(self.params, values)

    def initial(self, default: Any) -> dict[str, Any]:
        """Its widgets' initial values by name, for the field's value ``default`` (none when it has no
        widget)."""
        if not self.params:
            return {}
        return dict(zip((p.name for p in self.params), self.shown(default), strict=True))


def _read_budget(params: tuple[Param, ...], values: Mapping[str, Any]) -> int | str:
    nodes, auto = params
    # auto first: under "auto" the number box is not read, so whatever it holds is no error
    return "auto" if auto.check(values[auto.name]) else nodes.check(values[nodes.name])


#: What the budget box shows when the library's default budget is "auto" (unread while auto is ticked).
AUTO_SHOWN_NODES = 24


def _shown_budget(default: int | str) -> tuple[int, bool]:
    return (default, False) if isinstance(default, int) else (AUTO_SHOWN_NODES, True)


def _read_each(params: tuple[Param, ...], values: Mapping[str, Any]) -> tuple[Value, ...]:
    return tuple(p.check(values[p.name]) for p in params)


def _number(name: str, label: str = "", what: str = "") -> Param:
    return Param(name, "int", label or name, what)


def _real(name: str, label: str = "", what: str = "") -> Param:
    return Param(name, "float", label or name, what)


def _flag(name: str, label: str = "", what: str = "", info: str | None = None) -> Param:
    return Param(name, "bool", label or name, what, info)


_DECLARED: tuple[Setting, ...] = (
    Setting(
        "budget",
        (
            _number("budget", "budget (nodes per tree)"),
            _flag(
                "auto_budget", "budget: auto", "budget: auto", info="measure the best budget for this machine"
            ),
        ),
        row=0,
        ceiling="max_budget",
        read=_read_budget,
        shown=_shown_budget,
    ),
    Setting("budget_cap"),  # the deployment's ceiling, set by parse_config under "auto"; not a visitor's
    Setting(
        "cost_aware",
        (
            _flag(
                "cost_aware",
                "budget is a cap (cost-aware trees)",
                "cost-aware trees",
                info="RECAP stops growing a step's tree at the first node that no longer pays for "
                "its verify time on this machine; each step's size shows in the tree's title",
            ),
        ),
        row=0,
    ),
    Setting("max_depth", (_number("max_depth"),), row=1, ceiling="max_depth"),
    Setting("top_k", (_number("top_k", "top_k (k)"),), row=1, ceiling="max_top_k"),
    Setting("max_children", (_number("max_children"),), row=1, ceiling="max_children"),
    Setting(
        "specificity",
        (
            _real("specificity_1", "specificity s(1): M1", "specificity s(1)"),
            _real("specificity_2", "s(2): M2", "specificity s(2)"),
            _real("specificity_3", "s(3): M3", "specificity s(3)"),
        ),
        row=2,
        read=_read_each,
        shown=tuple,
    ),
    Setting("fusion", (Param("fusion", "choice", "fusion", choices=FUSION_MODES),), row=3),
    Setting("eps", (_real("eps"),), row=3),
    Setting("depth_discount", (_real("depth_discount"),), row=3),
    Setting("use_m2", (_flag("use_m2"),), row=4),
    Setting("use_m3", (_flag("use_m3"),), row=4),
    Setting("suffix", (_flag("suffix", "suffix matches"),), row=4),
    Setting("suffix_min_len", (_number("suffix_min_len"),), row=5),
    Setting("suffix_max_tokens", (_number("suffix_max_tokens"),), row=5),
    Setting("calibrate"),  # the app always ranks paths by learned acceptance rates (the library's default)
    Setting(
        "scoped_memory",
        (
            _flag(
                "scoped_memory",
                "keep M2 / M3 per image",
                "image-scoped memories",
                info="later questions on the same image draft from the contextual rows its "
                "earlier questions wrote (never another image's)",
            ),
        ),
        row=4,
    ),
    Setting("size_loop"),  # the library's default: under "auto" the closed size loop sizes each tree
)


def in_field_order(declared: tuple[Setting, ...]) -> tuple[Setting, ...]:
    """``declared`` in ``RecapConfig``'s field order; TypeError naming a field without a Setting, or a
    stray one."""
    by_field = {s.field: s for s in declared}
    names = [f.name for f in fields(RecapConfig)]
    missing = [n for n in names if n not in by_field]
    unknown = [n for n in by_field if n not in names]
    if missing or unknown or len(by_field) != len(declared):
        raise TypeError(
            f"app.widgets.config_form.SETTINGS must hold each RecapConfig field once: missing {missing}, "
            f"not fields {unknown}"
        )
    return tuple(by_field[n] for n in names)


#: One Setting per ``RecapConfig`` field, in the fields' order.
SETTINGS: tuple[Setting, ...] = in_field_order(_DECLARED)
#: The advanced settings' widgets: the ``/run`` API parameters after the request's four, in this order.
PARAMS: tuple[Param, ...] = tuple(p for s in SETTINGS for p in s.params)
PARAM_NAMES: tuple[str, ...] = tuple(p.name for p in PARAMS)


def default_values() -> dict[str, Any]:
    """The widgets' initial values (the library's defaults) by parameter name, in API order."""
    defaults = SESSION_CONFIG
    out: dict[str, Any] = {}
    for s in SETTINGS:
        out.update(s.initial(getattr(defaults, s.field)))
    return out


def build_widgets() -> dict[str, Any]:
    """The advanced settings' widgets, row by row (call inside a layout block); by name, in API order."""
    values = default_values()
    made: dict[str, Any] = {}
    for row in sorted({s.row for s in SETTINGS if s.params}):
        with gr.Row():
            for s in SETTINGS:
                if s.params and s.row == row:
                    made.update({p.name: p.widget(values[p.name]) for p in s.params})
    # "budget: auto" ticked: the number is not read (parse_config), so it cannot be typed either
    made["budget"].interactive = not values["auto_budget"]
    made["auto_budget"].change(guarded(_budget_box), made["auto_budget"], made["budget"], queue=False,
                               api_visibility="private")
    return {name: made[name] for name in PARAM_NAMES}


def _budget_box(auto: Any) -> Any:
    """The budget box under "budget: auto": greyed out while it is ticked (what parse_config ignores)."""
    return gr.update(interactive=not bool(auto))


def parse_config(values: Mapping[str, Any], settings: Settings | None = None) -> RecapConfig:
    """The advanced settings (by parameter name) -> RecapConfig, within the deployment's limits when given.

    UserError names the field (and the ceiling, for a value over one).
    """
    missing = [n for n in PARAM_NAMES if n not in values]
    if missing or len(values) != len(PARAM_NAMES):
        raise UserError(f"expected {len(PARAM_NAMES)} advanced settings, got {len(values)}"
                        + (f" (missing: {', '.join(missing)})" if missing else ""))
    edited = {s.field: s.value(values) for s in SETTINGS if s.params}
    try:
        config = RecapConfig(**edited)
    except ValueError as exc:  # RecapConfig names the field
        raise UserError(f"advanced settings: {exc}") from None
    if settings is not None:
        check_limits(config, settings)
        if config.budget == "auto":
            # "auto" may take up to the library's cap (256); a deployment's ceiling may be lower. A
            # cap, not a number budget: fixed-size drafters (TR) still choose their size by cost
            config = replace(config, budget_cap=settings.limits.max_budget)
    return config


def check_limits(config: RecapConfig, settings: Settings) -> None:
    """The tree's size knobs within this deployment's ceilings (``Limits``)."""
    lim = settings.limits
    sized: dict[str, int] = {}
    for s in SETTINGS:
        if s.ceiling is None:
            continue
        ceiling = getattr(lim, s.ceiling)
        value = getattr(config, s.field)
        value = ceiling if value == "auto" else int(value)  # a budget of "auto" picks at most the ceiling
        if value > ceiling:
            raise UserError(
                f"advanced settings: {s.field} is {value}; this deployment allows at most {ceiling}"
            )
        sized[s.field] = value
    work = sized["budget"] * sized["max_depth"] * sized["max_children"]
    if work > lim.max_tree_work:
        raise UserError(
            f"advanced settings: budget x max_depth x max_children is {work}; this deployment allows at most "
            f"{lim.max_tree_work} (lower one of them)"
        )
