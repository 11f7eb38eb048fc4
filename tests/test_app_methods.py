"""The app's methods are the library's registry: choices, labels, colours and memory flags come from it."""

from __future__ import annotations

import pytest

import recap.methods
from app.presenters import charts, tree
from app.state import requests, settings
from app.tabs import compare
from recap.methods import REGISTRY, Method, registered


def test_every_registered_method_is_a_choice_with_its_label_richest_first() -> None:
    assert settings.app_methods()[: len(REGISTRY)] == tuple(reversed(REGISTRY))
    assert set(settings.app_methods()) == set(registered())
    assert settings.method_choices() == [(m.label, m.name) for m in settings.app_methods()]
    assert settings.method_labels() == {m.name: m.label for m in registered()}
    assert settings.DEFAULT_METHOD.name == settings.method_choices()[0][1]


def test_memory_panels_offer_exactly_the_methods_that_keep_a_memory() -> None:
    keeping = {m.name for m in registered() if m.keeps_memory}
    assert settings.memory_choices() == [
        (label, name) for label, name in settings.method_choices() if name in keeping
    ]
    assert set(settings.memory_methods()) == keeping


def test_figures_colour_each_method_with_its_registry_colour() -> None:
    assert {m.name: charts.method_colour(m.name) for m in registered()} == {
        m.name: m.colour for m in registered()
    }
    assert charts.method_colour("a method from elsewhere") == charts.OTHER_METHOD_COLOR


def test_figures_name_and_colour_an_origin_the_app_does_not_know() -> None:
    assert tree.origin_colour("a plugin's origin") == tree.OTHER_ORIGIN_COLOR
    assert tree.origin_label("a plugin's origin") == "a plugin's origin"
    assert tree.origin_colour("m1") == tree.ORIGIN_COLORS["m1"]


def test_the_comparison_decodes_the_reference_first_and_lists_every_method() -> None:
    assert compare.run_order()[0] == settings.REFERENCE_METHOD.name
    assert (
        sorted(compare.run_order())
        == sorted(compare.table_order())
        == sorted(m.name for m in registered())
    )
    assert compare.table_order() == tuple(m.name for m in settings.app_methods())


def test_a_method_registered_later_is_listed_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = Method("plugin", "A plug-in drafter", "#123456", True, REGISTRY[0].factory)
    builtins = registered()
    monkeypatch.setattr(recap.methods, "registered", lambda: (*builtins, plugin))
    assert settings.app_methods()[-1] == plugin and settings.app_methods()[0] == settings.DEFAULT_METHOD
    assert (
        "A plug-in drafter",
        "plugin",
    ) in settings.method_choices() and "plugin" in settings.memory_methods()
    assert charts.method_colour("plugin") == "#123456"
    assert compare.table_order()[-1] == "plugin" and compare.run_order()[-1] == "plugin"
    s = settings.Settings(default_model="m")
    assert requests.check_request(s, "Describe.", "plugin", 8) == ("Describe.", "plugin", 8)
