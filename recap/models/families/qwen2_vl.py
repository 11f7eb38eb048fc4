"""Qwen2-VL (``qwen2_vl``), and the base of Qwen2.5-VL (``recap.models.families.qwen2_5_vl``).

* Positions: M-RoPE, three equal rows ``prefix + depth + rope_delta`` for text, where the
  per-request ``rope_delta`` is what the prefill leaves in ``model.model.rope_deltas`` (the
  image's grid takes fewer positions than its tokens). A stale delta from the previous request
  would be wrong, so it is reset before every prefill.
* Processor: ``Qwen2VLImageProcessorPil`` (the PIL image processor of both Qwen families)
  inside an image-only processor of ``recap.models.processors`` (the stock ones need
  torchvision). ``patch_size``, ``merge_size`` and ``temporal_patch_size`` in
  ``preprocessor_config.json`` must equal the vision config's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from recap.core.errors import ModelLoadError
from recap.models.families.base import FamilyAdapter, check_equal, positive_int
from recap.models.files import CheckpointFiles, build_image_processor
from recap.models.processors import Qwen2VLImageProcessor

#: preprocessor_config.json keys and the vision config keys they must equal.
VISION_KEYS = (("patch_size", "patch_size"), ("merge_size", "spatial_merge_size"),
               ("temporal_patch_size", "temporal_patch_size"))


class Qwen2VLAdapter(FamilyAdapter):
    family = "qwen2_vl"
    display_name = "Qwen2-VL"
    model_class = "Qwen2VLForConditionalGeneration"
    #: The image-only processor class (``recap.models.processors``) of the family.
    processor_class: ClassVar[type] = Qwen2VLImageProcessor

    def before_prefill(self, model: Any) -> None:
        """Drop the previous request's rope delta (the prefill computes this one's)."""
        model.model.rope_deltas = None

    def rope_delta(self, model: Any) -> int:
        delta = getattr(model.model, "rope_deltas", None)
        return 0 if delta is None else int(delta.reshape(-1)[0])

    def tree_positions(self, prefix_len: int, depths: torch.Tensor, rope_delta: int) -> torch.Tensor:
        """Position ids of tree nodes. depths: (N,). Returns (3, 1, N): text positions, all rows equal."""
        return super().tree_positions(prefix_len, depths, rope_delta).unsqueeze(0).expand(3, 1, -1)

    def make_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        from transformers import Qwen2VLImageProcessorPil

        image_processor = build_image_processor(files, Qwen2VLImageProcessorPil)
        vision = config.vision_config
        for key, config_key in VISION_KEYS:
            value = getattr(image_processor, key, None)
            if not positive_int(value):
                raise ModelLoadError(f"{files.label}: preprocessor_config.json {key} must be a "
                                     f"positive integer, got {value!r}")
            check_equal(files, f"preprocessor_config.json {key}", value, f"vision_config.{config_key}",
                        getattr(vision, config_key, None))
        return self.construct_processor(files, self.processor_class, image_processor=image_processor,
                                        tokenizer=tokenizer, chat_template=template)
