"""Real checkpoints, as their files ship: they load, say clearly what is wrong, and stay lossless.

The checkpoints (tests/real_models.py) carry the real tokenizer, chat template, processor /
preprocessor config and generation config of Qwen2-VL-2B-Instruct, llava-1.5-7b-hf,
Qwen2.5-VL-7B-Instruct and a LLaVA-NeXT (Mistral) snapshot without processor_config.json,
on tiny random weights.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from real_models import LLAVA, LLAVA_NEXT, NAMES, QWEN2_5_VL, QWEN2_VL
from test_lossless import make_image

import recap

N = 16
PROMPTS = ["Describe the image in detail.", "Write two sentences about 中文 and 😊."]


def tokens_after_prompt(out: torch.Tensor, inputs: dict) -> list[int]:
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def references(target: recap.Target, image, prompt: str) -> tuple[list[int], list[int]]:
    """(greedy generate, plain generate under the shipped generation config)."""
    inputs = recap.prepare_inputs(target, image, prompt)
    with torch.inference_mode():
        greedy = target.model.generate(**inputs, do_sample=False, max_new_tokens=N)
        plain = target.model.generate(**inputs, max_new_tokens=N)
    return tokens_after_prompt(greedy, inputs), tokens_after_prompt(plain, inputs)


# --------------------------------------------------------------------------- loading


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_loads_as_its_files_ship(load_real, real_dirs, name: str) -> None:
    target = load_real(name)
    shipped = json.loads((real_dirs[name] / "config.json").read_text())
    assert target.vocab_size == shipped["vocab_size"]
    generation = json.loads((real_dirs[name] / "generation_config.json").read_text())
    eos = generation["eos_token_id"]
    assert target.eos_token_ids == frozenset(eos if isinstance(eos, list) else [eos])
    image_id = shipped.get("image_token_id", shipped.get("image_token_index"))
    assert image_id in target.image_token_ids
    assert target.tokenizer.convert_tokens_to_ids(target.processor.image_token) == image_id
    assert target.short_name == name and os.sep not in target.short_name


def test_qwen2_5_vl_files_name_classes_transformers_lacks(real_dirs) -> None:
    import transformers

    pre = json.loads((real_dirs[QWEN2_5_VL] / "preprocessor_config.json").read_text())
    assert (pre["image_processor_type"] == "Qwen2_5_VLImageProcessor"
            and pre["processor_class"] == "Qwen2_5_VLProcessor")
    assert not hasattr(transformers, "Qwen2_5_VLImageProcessor")  # the lookup by that name cannot work
    assert (pre["min_pixels"], pre["max_pixels"]) == (3136, 12845056)


def test_llava_next_without_processor_config_takes_geometry_from_the_model_config(
    load_real, real_dirs
) -> None:
    from transformers import AutoProcessor

    assert not (real_dirs[LLAVA_NEXT] / "processor_config.json").exists()
    # transformers' own loading leaves patch_size unset and fails inside the processor:
    stock = AutoProcessor.from_pretrained(real_dirs[LLAVA_NEXT])
    with pytest.raises(TypeError):
        stock(images=[make_image(1)], text=["[INST] <image>\nhi [/INST]"], return_tensors="pt")
    processor = load_real(LLAVA_NEXT).processor
    assert (
        processor.patch_size, processor.vision_feature_select_strategy, processor.num_additional_image_tokens,
    ) == (14, "default", 1)  # vision_config.patch_size, the config's strategy, one CLS token (CLIP)


def test_qwen2_5_vl_fixture_reproduces_the_repetition_penalty(load_real) -> None:
    target = load_real(QWEN2_5_VL)
    assert target.model.generation_config.repetition_penalty == pytest.approx(1.05)
    inputs = recap.prepare_inputs(target, make_image(1), PROMPTS[0])
    with torch.inference_mode():
        shipped = target.model.generate(**inputs, do_sample=False, max_new_tokens=N)
        no_penalty = target.model.generate(**inputs, do_sample=False, max_new_tokens=N,
                                           repetition_penalty=1.0)
    assert shipped.tolist() != no_penalty.tolist(), "the fixture no longer exercises the repetition penalty"


# --------------------------------------------------------------------------- lossless


@pytest.mark.parametrize("name", NAMES)
def test_every_method_matches_both_generate_references(load_real, name: str) -> None:
    """Greedy ``generate(do_sample=False)`` and plain ``generate()`` under the shipped generation
    config (``do_sample: true, top_k: 1`` for the Qwen files), image and text prompts, one memory."""
    target = load_real(name)
    requests = [(make_image(1), PROMPTS[0]), (None, PROMPTS[1])]
    refs = [references(target, img, prompt) for img, prompt in requests]
    for method in recap.METHODS:
        memory = recap.TokenMemory.for_target(target)
        for (img, prompt), (greedy, plain) in zip(requests, refs):
            out = recap.generate(target, img, prompt, method=method, max_new_tokens=N, memory=memory)
            kind = "image" if img is not None else "text"
            assert out.token_ids == greedy, f"{name}/{method}/{kind}: differs from generate(do_sample=False)"
            assert out.token_ids == plain, f"{name}/{method}/{kind}: differs from plain generate()"


# --------------------------------------------------------------------------- broken directories


def broken_copy(
    src: Path, dst: Path, drop: tuple[str, ...] = (), edit: dict[str, object] | None = None
) -> Path:
    """A copy of a checkpoint without ``drop`` and with JSON keys changed (weights linked, not copied)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name in drop:
            continue
        if f.suffix == ".safetensors":
            os.symlink(f, dst / f.name)
        else:
            shutil.copyfile(f, dst / f.name)
    for spec, value in (edit or {}).items():  # "file.json:key" or "file.json:section.key"
        file, key = spec.split(":")
        path = dst / file
        data = json.loads(path.read_text()) if path.exists() else {}
        *sections, last = key.split(".")
        where = data
        for section in sections:
            where = where[section]
        where[last] = value
        path.write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize(
    ("name", "drop", "edit", "message"),
    [
        (QWEN2_VL, ("preprocessor_config.json",), None, r"preprocessor_config\.json"),
        (LLAVA, ("tokenizer.json", "tokenizer.model"), None, r"no tokenizer files: expected tokenizer\.json"),
        (QWEN2_VL, ("tokenizer.json", "merges.txt"), None, r"vocab\.json needs merges\.txt"),
        (LLAVA, ("chat_template.jinja", "chat_template.json"), None,
         r"no chat template.*chat_template\.jinja"),
        (LLAVA_NEXT, (), {"processor_config.json:patch_size": 16},
         r"patch_size 16 \(from processor_config\.json\).*config\.json vision_config\.patch_size is 14"),
        (LLAVA_NEXT, (), {"config.json:vision_config.patch_size": None},
         r"patch_size must be a positive integer, got None \(from config\.json \(no "
         r"processor_config\.json\)\)"),
        (LLAVA_NEXT, (), {"processor_config.json:vision_feature_select_strategy": "cls"},
         r"vision_feature_select_strategy must be one of"),
        (LLAVA, (), {"processor_config.json:num_additional_image_tokens": 3},
         r"num_additional_image_tokens must be 0 or 1"),
        (QWEN2_5_VL, (), {"preprocessor_config.json:patch_size": 16},
         r"preprocessor_config\.json patch_size is 16 but config\.json vision_config\.patch_size is 14"),
    ],
    ids=[
        "no-preprocessor", "no-tokenizer", "vocab-without-merges", "no-template", "next-patch-size",
        "next-null-patch", "next-strategy", "extra-tokens", "qwen-patch-size",
    ],
)
def test_broken_directory_names_the_file_and_key(real_dirs, tmp_path, name, drop, edit, message) -> None:
    path = broken_copy(real_dirs[name], tmp_path / name, drop, edit)
    with pytest.raises(recap.ModelLoadError, match=message) as err:
        recap.load_target(path, device="cpu", dtype=torch.float32)
    assert str(tmp_path) not in str(err.value), "the message names the checkpoint, not a server path"


@pytest.mark.parametrize("file",
                         ["preprocessor_config.json", "generation_config.json", "processor_config.json"])
def test_invalid_json_names_the_file(real_dirs, tmp_path, file: str) -> None:
    """transformers itself would ignore a broken generation_config.json (and lose the EOS ids)."""
    path = broken_copy(real_dirs[LLAVA_NEXT], tmp_path / "next")
    (path / file).write_text("{not json")
    with pytest.raises(recap.ModelLoadError, match=rf"{file.replace('.', '[.]')} is not valid JSON"):
        recap.load_target(path, device="cpu", dtype=torch.float32)


def test_llava_next_processor_config_with_null_patch_size_falls_back_to_the_model_config(
    real_dirs, tmp_path
) -> None:
    """Snapshots whose processor_config.json holds ``patch_size: null`` (the raw TypeError of the issue)."""
    path = broken_copy(real_dirs[LLAVA_NEXT], tmp_path / "next",
                       edit={"processor_config.json:patch_size": None})
    target = recap.load_target(path, device="cpu", dtype=torch.float32)
    assert target.processor.patch_size == 14
    out = recap.generate(target, make_image(2), PROMPTS[0], method="recap", max_new_tokens=4)
    assert len(out.token_ids) == 4


def test_image_the_processor_refuses_is_an_input_error(load_real) -> None:
    from PIL import Image

    with pytest.raises(recap.InputError,
                       match=r"processor of qwen2-vl-2b-instruct cannot build inputs.*aspect ratio"):
        recap.prepare_inputs(load_real(QWEN2_VL), Image.new("RGB", (1, 400)), PROMPTS[0])
