"""Bad input to the library: each raises a clear exception that names the problem."""

from __future__ import annotations

import json

import pytest

import recap
from recap.core.limits import MAX_PROMPT_CHARS
from recap.models.inputs import load_image


@pytest.fixture(scope="module")
def target(load_tiny):
    return load_tiny("qwen2_5_vl")


def test_unknown_method(target):
    with pytest.raises(ValueError, match="unknown method 'beam'"):
        recap.generate(target, None, "describe the image .", method="beam")


@pytest.mark.parametrize("n", [0, -3, 10**9, 2.5, True])
def test_max_new_tokens_out_of_range(target, n):
    with pytest.raises(ValueError, match="max_new_tokens"):
        recap.generate(target, None, "describe the image .", max_new_tokens=n)


def test_unreadable_image_path(target, tmp_path):
    bad = tmp_path / "photo.png"
    bad.write_bytes(b"this is not a png")
    with pytest.raises(recap.InputError, match="photo.png is not a readable image"):
        recap.generate(target, bad, "describe the image .")


def test_missing_image_path(target, tmp_path):
    with pytest.raises(recap.InputError, match="image file not found"):
        recap.generate(target, tmp_path / "nope.png", "describe the image .")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_big_image_is_shrunk_on_opening_to_max_side(tmp_path, fmt):
    from PIL import Image

    path = tmp_path / f"big.{fmt.lower()}"
    Image.new("RGB", (3000, 1200), (200, 30, 30)).save(path, fmt)
    img = load_image(path, max_side=512)
    assert max(img.size) <= 512 and img.size[0] > img.size[1]  # the aspect ratio is kept
    assert max(load_image(Image.new("RGB", (2000, 900)), max_side=512).size) <= 512
    assert load_image(path).size == (3000, 1200)  # no ceiling asked: full size


@pytest.mark.parametrize("prompt", ["", "   ", None])
def test_empty_prompt(target, prompt):
    with pytest.raises(recap.InputError, match="prompt is empty"):
        recap.generate(target, None, prompt)


def test_huge_prompt(target):
    with pytest.raises(recap.InputError, match=f"limit is {MAX_PROMPT_CHARS}"):
        recap.generate(target, None, "the " * MAX_PROMPT_CHARS)


@pytest.mark.parametrize(
    "field, value",
    [("budget", 0), ("budget", "lots"), ("max_depth", 0), ("top_k", 0), ("max_children", 999),
     ("specificity", (1, 2)), ("specificity", (1, -2, 4)), ("fusion", "avg"), ("eps", -1.0),
     ("depth_discount", 0.0), ("suffix", "yes")],
)
def test_invalid_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        recap.RecapConfig(**{field: value})


def test_unsupported_family(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(recap.ModelLoadError,
                       match="unsupported model family 'bert'.*BertModel.*Qwen2-VL.*Gemma 3"):
        recap.load_target(tmp_path)


@pytest.mark.parametrize(
    ("model_type", "architecture"),
    [
        ("whisper", "WhisperForConditionalGeneration"),  # an audio model transformers knows
        ("qwen2", "Qwen2ForCausalLM"),  # a text-only model
        ("made_up_vlm", "MadeUpForConditionalGeneration"),  # a model_type transformers does not know
    ],
)
def test_a_model_of_no_supported_family_names_its_architecture(tmp_path, model_type, architecture):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": model_type, "architectures": [architecture]})
    )
    with pytest.raises(recap.ModelLoadError) as err:
        recap.load_target(tmp_path)
    message = str(err.value)
    assert architecture in message and repr(model_type) in message
    assert all(name in message for name in ("Qwen2.5-VL", "LLaVA-1.5", "SmolVLM", "Gemma 3", "Qwen3-VL"))


def test_missing_model_directory(tmp_path):
    with pytest.raises(recap.ModelLoadError, match="does not exist"):
        recap.load_target(tmp_path / "absent")


def test_an_unreachable_hub_id_is_a_clear_load_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(recap.ModelLoadError,
                       match="cannot read a model config from 'no-such-org/no-such-model'"):
        recap.load_target("no-such-org/no-such-model")


def test_directory_without_processor_fails_loudly(tiny_dirs, tmp_path):
    import shutil

    for f in tiny_dirs["llava"].iterdir():
        if f.name.startswith(("config", "model", "generation")) or f.name.startswith("tokenizer"):
            shutil.copy(f, tmp_path / f.name)
    with pytest.raises(recap.ModelLoadError, match="processor"):
        recap.load_target(tmp_path)


def test_memory_of_another_vocabulary_is_refused_by_generate(target):
    with pytest.raises(ValueError, match="vocabulary"):
        recap.generate(target, None, "describe the image .", memory=recap.TokenMemory(target.vocab_size + 5))


@pytest.mark.parametrize(
    "text, match",
    [
        ("{", "not a JSON"), ("[]", "JSON object"), ('{"schema": "other"}', "not a RECAP trace"),
        ('{"schema": "recap-trace", "version": 99}', "unsupported trace version"),
        ('{"schema": "recap-trace", "version": 1, "steps": []}', "missing field 'method'"),
    ],
)
def test_malformed_traces(text, match):
    with pytest.raises(recap.TraceError, match=match):
        recap.DecodeTrace.from_json(text)
