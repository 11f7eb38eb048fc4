"""The family registry: the built-in families, their positions, and a new family added from
outside the package (defined here, registered, listed, loaded and decoded losslessly)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_models
import torch
from conftest import DEVICE
from test_lossless import make_image, reference
from transformers import AutoConfig, LlavaConfig

import recap
from recap.models.families.base import FamilyAdapter
from recap.models.families.llava import LlavaAdapter
from recap.models.families.registry import ADAPTERS, SUPPORTED_FAMILIES, family_names, register, unregister

MADE_UP = "recap_test_llava"


class MadeUpConfig(LlavaConfig):
    """LLaVA's config under a model_type no library knows (registered with AutoConfig below)."""

    model_type = MADE_UP


class MadeUpAdapter(LlavaAdapter):
    """A new family as a project would add one: one class, one ``register`` call."""

    family = MADE_UP
    display_name = "Made-up LLaVA (recap_test_llava)"
    model_class = "LlavaForConditionalGeneration"


class MissingClassAdapter(MadeUpAdapter):
    model_class = "NoSuchModelForConditionalGeneration"


@pytest.fixture(scope="module")
def made_up_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LLaVA checkpoint whose config.json names the made-up model_type."""
    AutoConfig.register(MADE_UP, MadeUpConfig, exist_ok=True)  # transformers' own registry: the config class
    directory = tiny_models.build("llava", tmp_path_factory.mktemp("made-up-family"))
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = MADE_UP
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_builtin_families_in_registration_order() -> None:
    assert tuple(SUPPORTED_FAMILIES) == (
        "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "llava", "llava_next", "idefics3", "smolvlm",
        "gemma3",
    )
    assert recap.SUPPORTED_FAMILIES is SUPPORTED_FAMILIES
    assert family_names().startswith("Qwen2-VL, Qwen2.5-VL, ")
    assert "LLaVA-1.5 (llava), LLaVA-NeXT / 1.6 (llava_next)" in family_names()
    assert family_names().count(", ") == len(SUPPORTED_FAMILIES) - 1
    assert {family: adapter.family for family, adapter in ADAPTERS.items()} == {
        f: f for f in SUPPORTED_FAMILIES
    }
    assert [ADAPTERS[f].model_class for f in SUPPORTED_FAMILIES] == [
        "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
        "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
        "Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration",
        "Gemma3ForConditionalGeneration",
    ]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen_positions_are_three_equal_rows_with_the_delta(family: str) -> None:
    pos = ADAPTERS[family].tree_positions(10, torch.tensor([0, 1, 1, 2]), -3)
    assert pos.shape == (3, 1, 4)
    assert all(pos[row, 0].tolist() == [7, 8, 8, 9] for row in range(3))


@pytest.mark.parametrize("family", ["llava", "llava_next"])
def test_llava_positions_are_prefix_plus_depth_without_rope_state(family: str) -> None:
    adapter = ADAPTERS[family]
    assert adapter.tree_positions(10, torch.tensor([0, 1, 1, 2]), 0).tolist() == [[10, 11, 11, 12]]
    model = object()  # plain RoPE reads nothing from the model
    adapter.before_prefill(model)
    assert adapter.rope_delta(model) == 0


def test_registration_is_validated() -> None:
    with pytest.raises(TypeError, match="FamilyAdapter instance"):
        register(LlavaAdapter)  # the class, not an instance
    with pytest.raises(ValueError, match="'llava' is already registered"):
        register(LlavaAdapter())

    class Nameless(LlavaAdapter):
        display_name = ""

    with pytest.raises(TypeError, match="display_name must be a non-empty string"):
        register(Nameless())

    class NoProcessor(FamilyAdapter):
        family, display_name, model_class = "x", "X", "XForConditionalGeneration"

    with pytest.raises(TypeError, match="abstract"):
        NoProcessor()  # type: ignore[abstract]
    with pytest.raises(ValueError, match=f"{MADE_UP!r} is not registered; registered: qwen2_vl"):
        unregister(MADE_UP)


def test_a_family_defined_outside_the_package_is_listed_loaded_and_lossless(made_up_dir: Path) -> None:
    with pytest.raises(recap.ModelLoadError,
                       match=f"unsupported model family {MADE_UP!r}.*Gemma 3 \\(gemma3\\)$"):
        recap.load_target(made_up_dir, device=DEVICE)
    adapter = register(MadeUpAdapter())
    try:
        assert SUPPORTED_FAMILIES[-1] == MADE_UP and MADE_UP in recap.SUPPORTED_FAMILIES
        assert family_names().endswith(", Made-up LLaVA (recap_test_llava)")
        target = recap.load_target(made_up_dir, device=DEVICE, dtype=torch.float32)
        assert target.adapter is adapter and target.family == MADE_UP
        assert type(target.model).__name__ == "LlavaForConditionalGeneration"
        image, prompt = make_image(3), "Describe the image."
        out = recap.generate(target, image, prompt, method="recap", max_new_tokens=12)
        assert out.token_ids == reference(target, image, prompt, 12)
    finally:
        assert unregister(MADE_UP) is adapter
    assert MADE_UP not in SUPPORTED_FAMILIES and "Made-up" not in family_names()
    with pytest.raises(recap.ModelLoadError, match=f"unsupported model family {MADE_UP!r}"):
        recap.load_target(made_up_dir, device=DEVICE)


def test_a_model_class_this_transformers_lacks_is_a_clear_load_error(made_up_dir: Path) -> None:
    register(MissingClassAdapter())
    try:
        with pytest.raises(recap.ModelLoadError,
                           match="has no NoSuchModelForConditionalGeneration, the model class"):
            recap.load_target(made_up_dir, device=DEVICE)
    finally:
        unregister(MADE_UP)
