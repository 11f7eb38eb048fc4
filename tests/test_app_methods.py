"""The app's methods are the library's registry: choices, labels, colours and memory flags come from it."""

from __future__ import annotations

from app import compare_tab, figures, settings
from recap.methods import MEMORY_METHODS, REGISTRY


def test_every_registered_method_is_a_choice_with_its_label_richest_first() -> None:
    assert settings.METHOD_CHOICES == [(m.label, m.name) for m in reversed(REGISTRY)]
    assert settings.METHOD_NAMES == {m.name: m.label for m in REGISTRY}
    assert settings.DEFAULT_METHOD.name == settings.METHOD_CHOICES[0][1]


def test_memory_panels_offer_exactly_the_methods_that_keep_a_memory() -> None:
    assert settings.MEMORY_CHOICES == [(label, name) for label, name in settings.METHOD_CHOICES if name in MEMORY_METHODS]
    assert {name for _, name in settings.MEMORY_CHOICES} == set(MEMORY_METHODS)


def test_figures_colour_each_method_with_its_registry_colour() -> None:
    assert dict(figures.METHOD_COLORS) == {m.name: m.colour for m in REGISTRY}


def test_the_comparison_decodes_the_reference_first_and_lists_every_method() -> None:
    assert compare_tab.RUN_ORDER[0] == settings.REFERENCE_METHOD.name
    assert sorted(compare_tab.RUN_ORDER) == sorted(compare_tab.ORDER) == sorted(m.name for m in REGISTRY)
