"""The app loads as the library and the command line load (issue 36, item 3): a model entry (the model
box, ``RECAP_MODEL``, each of ``RECAP_ALLOWED_MODELS``) is a path or hub id with ``@revision`` and
``revision=``, ``dtype=`` (``auto``: the checkpoint's) and ``device_map=`` options; the shared cache
loads each entry once with exactly those options."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from app.state.model_entry import ModelSpec, model_specs, parse_entry
from app.state.settings import Settings
from app.state.targets import ModelCache


def test_an_entry_is_a_source_with_its_loading_options() -> None:
    spec = parse_entry("Qwen/Qwen2.5-VL-7B-Instruct@a1b2c3 dtype=auto device_map=auto")
    assert spec == ModelSpec("qwen2.5-vl-7b-instruct", "Qwen/Qwen2.5-VL-7B-Instruct", revision="a1b2c3",
                             dtype="auto", device_map="auto")
    assert spec.load_kwargs() == {"revision": "a1b2c3", "dtype": "auto", "device_map": "auto"}
    assert spec.load_kwargs("cuda") == spec.load_kwargs()  # a device map places the layers itself
    assert parse_entry("org/m revision=v2 dtype=bfloat16").load_kwargs("cuda") == {
        "revision": "v2", "dtype": "bfloat16", "device": "cuda"}
    assert parse_entry("  org/m  ") == ModelSpec("m", "org/m")
    # two revisions of one hub id are two models; the same entry spelt twice is one
    assert parse_entry("org/m@v1").key != parse_entry("org/m@v2").key
    assert parse_entry("org/m@v1 dtype=auto").key == parse_entry("org/m dtype=auto revision=v1").key


@pytest.mark.parametrize(("entry", "says"), [
    ("org/m dtype=float8", "unknown dtype 'float8'"),
    ("org/m token=hf_x", "unknown model option 'token'"),
    ("org/m dtype=auto dtype=auto", "given twice"),
    ("org/m@v1 revision=v2", "two revisions"),
    ("./folder revision=v1", "a revision applies to a hub id"),
    ("org/m@ dtype=auto", "@revision needs a hub id"),
])
def test_a_bad_entry_is_named(entry: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_entry(entry)


def test_the_listed_models_keep_their_options_and_visitors_pick_them_by_name() -> None:
    settings = Settings(default_model="org/a dtype=auto",
                        allowed_models=("org/a@v1", "org/b device_map=auto"), public=True)
    names = [s.name for s in settings.models]
    assert names == ["a", "a-2", "b"]
    assert settings.check_model("a-2") == ModelSpec("a-2", "org/a", revision="v1")
    assert settings.check_model("b").device_map == "auto"
    refusal = "that model is not available in this deployment"
    # not listed, or malformed: one sentence, whatever was typed
    for typed in ("org/a dtype=float32", "org/c", "org/a dtype=float8"):
        with pytest.raises(ValueError, match=refusal):
            settings.check_model(typed)
    local = Settings(default_model="org/a")
    assert local.check_model("org/c@v3 dtype=auto") == ModelSpec("c", "org/c", revision="v3", dtype="auto")
    with pytest.raises(ValueError, match="unknown dtype"):
        local.check_model("org/c dtype=float8")


def test_the_shared_cache_loads_an_entry_with_its_options_once(tiny_dirs, tmp_path: Path) -> None:
    import transformers

    bf16_dir = tmp_path / "bf16"
    shutil.copytree(tiny_dirs["qwen2_vl"], bf16_dir)
    arch = json.loads((bf16_dir / "config.json").read_text())["architectures"][0]
    getattr(transformers, arch).from_pretrained(bf16_dir, dtype=torch.bfloat16).save_pretrained(bf16_dir)
    cache = ModelCache(device="cpu")
    (auto, plain) = model_specs(f"{bf16_dir} dtype=auto", (str(bf16_dir),))
    assert cache.get(auto).target.dtype == torch.bfloat16
    assert cache.get(plain).target.dtype == torch.float32  # the default on a CPU: another model
    assert cache.get(auto) is cache.get(parse_entry(f"{bf16_dir}/ dtype=auto")) and len(cache) == 2
