"""SmolVLM2 (``smolvlm``): Idefics3's positions, prefill inputs, image tokens and tile geometry
(``recap.models.families.idefics3``) with SmolVLM2's own classes.

* Processor: ``SmolVLMImageOnlyProcessor`` (``recap.models.processors``: the stock
  ``SmolVLMProcessor`` needs a video processor, hence torchvision, and ``num2words``) over
  ``SmolVLMImageProcessorPil``.
* The tile markers are the tokenizer's own where it names them (SmolVLM2's
  ``tokenizer_config.json`` sets ``fake_image_token`` and ``global_image_token`` in
  ``extra_special_tokens``), else Idefics3's strings, as the stock processor reads them.
"""

from __future__ import annotations

from typing import Any

from recap.models.families.idefics3 import (
    FAKE_IMAGE_TOKEN,
    GLOBAL_IMAGE_TOKEN,
    ROW_COL_TOKENS,
    Idefics3Adapter,
)
from recap.models.processors import SmolVLMImageOnlyProcessor


class SmolVLMAdapter(Idefics3Adapter):
    family = "smolvlm"
    display_name = "SmolVLM2 (smolvlm)"
    model_class = "SmolVLMForConditionalGeneration"

    def image_processor_class(self) -> type:
        import transformers as tf

        return tf.SmolVLMImageProcessorPil

    def processor_class(self) -> type:
        return SmolVLMImageOnlyProcessor

    def marker_tokens(self, tokenizer: Any) -> tuple[str, ...]:
        fake = getattr(tokenizer, "fake_image_token", None) or FAKE_IMAGE_TOKEN
        glob = getattr(tokenizer, "global_image_token", None) or GLOBAL_IMAGE_TOKEN
        return (fake, glob, *ROW_COL_TOKENS)
