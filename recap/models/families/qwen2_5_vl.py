"""Qwen2.5-VL (``qwen2_5_vl``): Qwen2-VL's positions and processor build
(``recap.models.families.qwen2_vl``) with its own processor and model classes.

Its files name ``Qwen2_5_VLImageProcessor`` as the image processor, which transformers 5
lacks; the processor is built by class, so that name does not matter.
"""

from __future__ import annotations

from typing import ClassVar

from recap.models.families.qwen2_vl import Qwen2VLAdapter
from recap.models.processors import Qwen2_5_VLImageProcessor


class Qwen2_5_VLAdapter(Qwen2VLAdapter):
    family = "qwen2_5_vl"
    display_name = "Qwen2.5-VL"
    model_class = "Qwen2_5_VLForConditionalGeneration"
    processor_class: ClassVar[type] = Qwen2_5_VLImageProcessor
