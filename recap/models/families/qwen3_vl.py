"""Qwen3-VL (``qwen3_vl``: Qwen/Qwen3-VL-2B / 4B / 8B / 32B-Instruct) and its MoE (``qwen3_vl_moe``).

What differs from Qwen2-VL (``recap.models.families.qwen2_vl``) and why the adapter still
reuses its positions, checked against transformers 5.24's ``modeling_qwen3_vl``:

* **Interleaved M-RoPE** (``mrope_interleaved``): the rotary frequencies of the temporal,
  height and width rows are interleaved (T H W T H W ...) instead of cut into three
  blocks. For text tokens the three rows are equal, so any arrangement of them gives the
  same rotation: a tree node's position is three equal rows ``prefix + depth + rope_delta``,
  as for Qwen2-VL. ``get_rope_index`` lays text out as ``index + delta`` after the last
  image (an image advances the position by ``max(h, w) / merge`` for its ``t * h * w /
  merge**2`` tokens; ``delta = max position + 1 - length``), and it stores ``delta`` on
  ``model.model.rope_deltas`` during a prefill that gets ``input_ids``, ``mm_token_type_ids``
  and ``image_grid_thw``: exactly what ``generate()`` adds to every decode position. A
  text-only prompt leaves no delta (0, as ``generate()``'s zeros).
* **A fourth position row**: ``generate()`` passes (4, B, L) positions, row 0 the plain 1D
  text positions that only build the causal mask; with the explicit tree mask that row
  has no effect, and (3, 1, N) positions leave it unset (the mask passes through as given).
* **DeepStack**: visual features of some vision layers (``deepstack_visual_indexes``) are
  added to the hidden states of the first decoder layers at the image tokens. They exist
  only while the image tokens are fed, i.e. in the prefill (``generate()`` drops
  ``pixel_values`` after its first forward too): every image token is in the prefill
  (the prompt's last token, the first tree's root, is text), so the default
  ``prefill_inputs`` (per-token inputs cut, ``pixel_values`` / ``image_grid_thw`` whole)
  is what the model needs, and the tree passes carry none.
* **16-pixel patches**: ``patch_size`` 16 (``merge_size`` 2, ``temporal_patch_size`` 2) in
  ``preprocessor_config.json``, checked against the vision config like Qwen2-VL's 14.
* **Processor**: ``Qwen2VLImageProcessorPil`` (the files name ``Qwen2VLImageProcessorFast``,
  which needs torchvision) inside ``recap.models.processors.Qwen3VLImageProcessor``; the
  shipped ``video_preprocessor_config.json`` is not read (its processor needs torchvision
  and RECAP feeds no video).

The MoE checkpoints (Qwen/Qwen3-VL-30B-A3B-Instruct, -235B-A22B-: ``qwen3_vl_moe``) are the
same model with sparse expert MLPs in the decoder (``modeling_qwen3_vl_moe`` inherits the
positions, ``rope_deltas``, DeepStack and processor): ``Qwen3VLMoeAdapter`` differs only in
its ``model_type`` and model class.
"""

from __future__ import annotations

from typing import ClassVar

from recap.models.families.qwen2_vl import Qwen2VLAdapter
from recap.models.processors import Qwen3VLImageProcessor


class Qwen3VLAdapter(Qwen2VLAdapter):
    family = "qwen3_vl"
    display_name = "Qwen3-VL"
    model_class = "Qwen3VLForConditionalGeneration"
    processor_class: ClassVar[type] = Qwen3VLImageProcessor


class Qwen3VLMoeAdapter(Qwen3VLAdapter):
    family = "qwen3_vl_moe"
    display_name = "Qwen3-VL MoE (qwen3_vl_moe)"
    model_class = "Qwen3VLMoeForConditionalGeneration"
