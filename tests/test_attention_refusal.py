"""Attention implementations that cannot apply the tree mask are refused at load (issue 28.5).

A tree pass hands the model an additive 4D mask (``recap.verification.treemask``); only eager and
sdpa attention apply it as given. Every other value transformers 5 accepts for
``attn_implementation`` (its ``ALL_ATTENTION_FUNCTIONS`` keys, the ``paged|`` prefixed forms its
``_check_and_adjust_attn_implementation`` strips, hub kernels ``org/repo[@rev][:fn]``) would verify
a tree without its mask, so ``load_target`` refuses it, by name, before reading a file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_lossless import make_image, reference
from transformers.integrations.hub_kernels import is_kernel
from transformers.modeling_flash_attention_utils import FLASH_ATTN_KERNEL_FALLBACK
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import recap
from recap.models.target import EXACT_ATTENTION


def transformers_values() -> list[str]:
    """Every attn_implementation string this transformers accepts, by kind."""
    keys = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
    paged = [f"paged|{k}" for k in keys if not k.startswith("paged|")]
    kernels = sorted(set(FLASH_ATTN_KERNEL_FALLBACK.values())) + ["some-org/attn-kernel@v2:forward"]
    assert all(is_kernel(k) for k in kernels), "transformers would not read these as hub kernels"
    return sorted(set(keys + paged + kernels))


REFUSED = [v for v in transformers_values() if v not in EXACT_ATTENTION]


def test_the_list_covers_every_kind_transformers_accepts() -> None:
    values = transformers_values()
    for kind in ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention", "paged|eager",
                 "paged|sdpa", "kernels-community/flash-attn2"):
        assert kind in values
    assert set(EXACT_ATTENTION) == {"eager", "sdpa"}


@pytest.mark.parametrize("value", REFUSED)
def test_an_attention_that_cannot_take_the_tree_mask_is_refused_by_name(value: str, tmp_path: Path) -> None:
    # a path that does not exist: the argument is refused before anything is read
    with pytest.raises(ValueError) as err:
        recap.load_target(tmp_path / "missing", attn_implementation=value)
    message = str(err.value)
    assert repr(value) in message and "'eager'" in message and "'sdpa'" in message


def test_a_dict_per_sub_config_is_checked_value_by_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flash_attention_2"):
        recap.load_target(tmp_path / "missing", attn_implementation={"text_config": "flash_attention_2"})


def test_a_checkpoint_whose_config_asks_for_one_is_refused(tiny_dirs: dict, tmp_path: Path) -> None:
    ckpt = tmp_path / "paged"
    shutil.copytree(tiny_dirs["qwen2_vl"], ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config["_attn_implementation"] = "paged|eager"
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json's attn_implementation 'paged\|eager'"):
        recap.load_target(ckpt)
    target = recap.load_target(ckpt, attn_implementation="eager")  # the caller's wins, as in transformers
    assert target.model.config._attn_implementation == "eager"


@pytest.mark.parametrize("value", [None, *EXACT_ATTENTION])
def test_eager_sdpa_and_the_default_load_and_stay_exact(tiny_dirs: dict, value: str | None) -> None:
    target = recap.load_target(tiny_dirs["qwen2_vl"], dtype=torch.float32, attn_implementation=value)
    assert target.model.config._attn_implementation in EXACT_ATTENTION
    img = make_image(4)
    out = recap.generate(target, img, "describe the image .", max_new_tokens=12)
    assert out.token_ids == reference(target, img, "describe the image .", 12)
