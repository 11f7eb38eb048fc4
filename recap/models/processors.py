"""Image-only Qwen-VL processors that work without torchvision.

transformers 5.x cannot build ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` /
``Qwen3VLProcessor`` without torchvision: their video sub-processor imports it. RECAP only
ever feeds images, so these subclasses drop the video sub-processor and keep everything
else (the PIL image processor, the tokenizer, the chat template, ``mm_token_type_ids``).
``SmolVLMImageOnlyProcessor`` does the same for SmolVLM2's ``SmolVLMProcessor`` (whose video
sub-processor needs torchvision and whose constructor needs ``num2words``).

``recap.load_target`` builds them explicitly from a checkpoint's files (``recap.models.families``):
the image processor from ``preprocessor_config.json`` whatever class it names (Qwen2.5-VL's
files name ``Qwen2_5_VLImageProcessor``, which transformers 5 lacks, so their own
``from_pretrained`` cannot read those files). ``from_pretrained`` works on directories
that transformers 5 saved with these classes (like ``assets/shapes-vlm``).

``register_auto_classes()`` makes ``AutoProcessor.from_pretrained`` return them for a
directory saved with one of these classes (importing this module calls it, and every
family module imports it: ``recap.load_target`` has done it). It uses
transformers' public ``AutoProcessor.register`` hook, keyed by the processor class name,
and changes nothing for other models.
"""

from __future__ import annotations

from typing import Any

from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor, Qwen3VLProcessor
from transformers.models.smolvlm.processing_smolvlm import SmolVLMProcessor
from transformers.processing_utils import ProcessorMixin


def _init_image_only(processor: Any, image_processor: Any, tokenizer: Any, chat_template: str | None) -> None:
    """The shared body of the two ``__init__``s: the stock one minus the video processor."""
    if tokenizer is None:
        raise ValueError("a Qwen-VL processor needs a tokenizer")
    processor.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
    processor.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
    processor.image_token_id = getattr(tokenizer, "image_token_id", None) or tokenizer.convert_tokens_to_ids(
        processor.image_token
    )
    processor.video_token_id = getattr(tokenizer, "video_token_id", None) or tokenizer.convert_tokens_to_ids(
        processor.video_token
    )
    # Skip the stock __init__ (it would pass a video processor positionally).
    ProcessorMixin.__init__(processor, image_processor, tokenizer, chat_template=chat_template)


class Qwen2_5_VLImageProcessor(Qwen2_5_VLProcessor):
    """``Qwen2_5_VLProcessor`` without the video sub-processor (no torchvision needed)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None,
                 **kwargs: Any):
        _init_image_only(self, image_processor, tokenizer, chat_template)


class Qwen2VLImageProcessor(Qwen2VLProcessor):
    """``Qwen2VLProcessor`` without the video sub-processor (no torchvision needed)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None,
                 **kwargs: Any):
        _init_image_only(self, image_processor, tokenizer, chat_template)


class Qwen3VLImageProcessor(Qwen3VLProcessor):
    """``Qwen3VLProcessor`` without the video sub-processor (no torchvision needed); keeps the
    stock one's vision start / end token attributes (its video path, the only user of them, is gone)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None,
                 **kwargs: Any):
        _init_image_only(self, image_processor, tokenizer, chat_template)
        for name, default in (("vision_start", "<|vision_start|>"), ("vision_end", "<|vision_end|>")):
            token = getattr(tokenizer, f"{name}_token", None) or default
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id",
                    getattr(tokenizer, f"{name}_token_id", None) or tokenizer.convert_tokens_to_ids(token))


class SmolVLMImageOnlyProcessor(SmolVLMProcessor):
    """``SmolVLMProcessor`` for images only: without its video sub-processor (torchvision) and
    ``num2words`` (which only spells a video's frame count). Everything images use is the stock
    one's: the tile prompt (``replace_image_token``), the token attributes read from the
    tokenizer with the stock defaults, the chat template. ``video_token`` is None, so a
    ``<video>`` typed in a prompt is text rather than a placeholder with no video behind it."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, image_seq_len: int = 169,
                 chat_template: str | None = None, **kwargs: Any):
        if tokenizer is None:
            raise ValueError("a SmolVLM processor needs a tokenizer")
        for name, default in (
            ("fake_image_token", "<fake_token_around_image>"), ("image_token", "<image>"),
            ("end_of_utterance_token", "<end_of_utterance>"), ("global_image_token", "<global-img>"),
        ):
            setattr(self, name, getattr(tokenizer, name, None) or default)
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.image_seq_len = image_seq_len
        self.video_token = None
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def apply_chat_template(self, conversation: Any, chat_template: str | None = None, **kwargs: Any) -> Any:
        """The stock template rendering, without the video processor's frame settings."""
        return ProcessorMixin.apply_chat_template(self, conversation, chat_template, **kwargs)


def register_auto_classes() -> None:
    """Let ``AutoProcessor`` resolve directories saved with the classes above (idempotent).

    Uses transformers' public ``AutoProcessor.register``: a registered class is found by the
    ``processor_class`` name in processor_config.json. Only done when torchvision is absent,
    where the stock Qwen-VL processors cannot be built anyway.
    """
    import importlib.util

    from transformers import AutoProcessor, Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig, Qwen3VLMoeConfig

    if importlib.util.find_spec("torchvision") is not None:
        return
    AutoProcessor.register(Qwen2_5_VLConfig, Qwen2_5_VLImageProcessor, exist_ok=True)
    AutoProcessor.register(Qwen2VLConfig, Qwen2VLImageProcessor, exist_ok=True)
    AutoProcessor.register(Qwen3VLConfig, Qwen3VLImageProcessor, exist_ok=True)
    AutoProcessor.register(Qwen3VLMoeConfig, Qwen3VLImageProcessor, exist_ok=True)


register_auto_classes()  # on import: a saved directory of these classes loads with AutoProcessor from then on
