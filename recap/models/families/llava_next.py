"""LLaVA-NeXT / 1.6 (``llava_next``): LLaVA-1.5's positions and processor settings
(``recap.models.families.llava``) with ``LlavaNextImageProcessorPil`` (any-resolution tiles)
and ``LlavaNextProcessor``."""

from __future__ import annotations

from recap.models.families.llava import LlavaAdapter
from recap.models.files import CheckpointFiles


class LlavaNextAdapter(LlavaAdapter):
    family = "llava_next"
    display_name = "LLaVA-NeXT / 1.6 (llava_next)"
    model_class = "LlavaNextForConditionalGeneration"

    def image_processor_class(self, files: CheckpointFiles) -> type:
        import transformers as tf

        return tf.LlavaNextImageProcessorPil

    def processor_class(self) -> type:
        import transformers as tf

        return tf.LlavaNextProcessor
