"""The advanced settings' one definition (app/config_form.py), without a server: fields, order, widgets,
checks."""

from __future__ import annotations

import dataclasses
import re

import gradio as gr
import pytest

from app.boundary.errors import UserError
from app.state.settings import PUBLIC_LIMITS, Settings
from app.widgets.config_form import (
    PARAM_NAMES,
    SETTINGS,
    Setting,
    build_widgets,
    default_values,
    in_field_order,
    parse_config,
)
from recap.core.config import RecapConfig


def test_every_recap_config_field_has_one_setting_in_the_fields_order() -> None:
    assert [s.field for s in SETTINGS] == [f.name for f in dataclasses.fields(RecapConfig)]
    assert len(set(PARAM_NAMES)) == len(PARAM_NAMES)
    with pytest.raises(TypeError, match="missing \\['calibrate'\\]"):
        in_field_order(tuple(s for s in SETTINGS if s.field != "calibrate"))
    with pytest.raises(TypeError, match="not fields \\['sampling'\\]"):
        in_field_order((*SETTINGS, Setting("sampling")))


def test_the_defaults_read_back_as_the_librarys_defaults() -> None:
    assert list(default_values()) == list(PARAM_NAMES)
    assert parse_config(default_values()) == RecapConfig(scoped_memory=True)  # sessions own their memory


def test_the_widgets_are_the_parameters_with_their_defaults() -> None:
    with gr.Blocks():
        widgets = build_widgets()
    assert list(widgets) == list(PARAM_NAMES)
    assert {name: w.value for name, w in widgets.items()} == default_values()
    assert isinstance(widgets["fusion"], gr.Dropdown) and isinstance(widgets["use_m2"], gr.Checkbox)
    assert widgets["top_k"].precision == 0 and widgets["eps"].precision is None


def test_the_number_box_is_not_read_under_auto() -> None:
    assert parse_config({**default_values(), "auto_budget": True, "budget": "x"}).budget == "auto"
    with pytest.raises(UserError, match="budget must be a whole number"):
        parse_config({**default_values(), "auto_budget": False, "budget": "x"})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("auto_budget", "yes", "budget: auto must be true or false"),
        ("specificity_2", "x", "specificity s(2) must be"),
        ("cost_aware", 1, "cost-aware trees must be true or false"),
        ("fusion", "mean", "advanced settings: fusion"),
        ("max_children", 0, "advanced settings: max_children must be an integer in"),
    ],
)
def test_each_widget_is_named_in_its_message(name: str, value: object, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        parse_config({**default_values(), name: value})


def test_a_missing_setting_is_named() -> None:
    values = default_values()
    del values["eps"]
    with pytest.raises(UserError, match=f"expected {len(PARAM_NAMES)} advanced settings, got .*missing: eps"):
        parse_config(values)


def test_each_ceiling_is_this_deployments() -> None:
    settings = Settings(default_model="m", public=True, limits=PUBLIC_LIMITS)
    with pytest.raises(
        UserError, match=f"top_k is {PUBLIC_LIMITS.max_top_k + 1}; .* at most {PUBLIC_LIMITS.max_top_k}"
    ):
        parse_config({**default_values(), "top_k": PUBLIC_LIMITS.max_top_k + 1}, settings)
    # auto: at most the cap
    auto = parse_config({**default_values(), "auto_budget": True, "max_depth": 2}, settings)
    # "auto" stays auto (TR sizes its fixed trees by cost too) under the deployment's ceiling as a
    # cap, not the library's 256: cost-aware trees grow up to it, fixed ones choose at most it
    assert auto.cost_aware and auto.budget == "auto" and auto.auto_cap == PUBLIC_LIMITS.max_budget
    fixed = parse_config({**default_values(), "auto_budget": True, "cost_aware": False}, settings)
    assert fixed.budget == "auto" and fixed.auto_cap == PUBLIC_LIMITS.max_budget
    # a number budget is the tree's size, no cap beside it
    number = parse_config({**default_values(), "auto_budget": False, "budget": 16}, settings)
    assert number.budget == 16 and number.budget_cap is None


def test_the_budget_box_is_greyed_out_while_auto_is_ticked() -> None:
    """parse_config reads no number under "budget: auto" (above): the box says so by not taking one."""
    import gradio as gr

    from app.widgets.config_form import _budget_box, build_widgets

    with gr.Blocks() as demo:
        made = build_widgets()
    assert default_values()["auto_budget"] is True and made["budget"].interactive is False
    auto, box = made["auto_budget"]._id, made["budget"]._id
    wired = [d for d in demo.config["dependencies"]
             if auto in [t[0] for t in d["targets"]] and box in d["outputs"]]
    assert len(wired) == 1  # ticking / unticking auto toggles the box
    assert _budget_box(False)["interactive"] is True and _budget_box(True)["interactive"] is False
