"""Gemma 3 (``gemma3``): google/gemma-3-4b-it, -12b-it, -27b-it (``Gemma3ForConditionalGeneration``).

* Positions: plain RoPE (the ``FamilyAdapter`` defaults): ``prefix + depth``, an image's soft
  tokens one position each, no per-request state.
* Attention: two kinds of decoder layer (``text_config.layer_types``): ``sliding_attention``,
  where a token sees the last ``text_config.sliding_window`` positions, itself included (1024
  on the real checkpoints, five layers in six), and ``full_attention``. ``attention_windows``
  says so, and verification gives the model one tree mask per kind
  (``recap.verification.verify``): a node at depth d, at position ``prefix + d``, sees the
  cached positions and the ancestors within the window of its own position. The engine's
  cache keeps a sliding layer's last ``window - 1`` entries only (``DynamicCache`` built from
  the config, as ``generate()`` builds it); the KV compaction keeps that true.
* Prefill inputs: the processor's ``token_type_ids`` (1 at image soft tokens, whose prefill
  attention is bidirectional within an image: the model's own masks) have one entry per
  prompt token, so they are cut with the prompt. Tree passes carry none, like
  ``generate()``'s decoding steps (all text).
* Processor: ``Gemma3Processor`` over ``Gemma3ImageProcessorPil`` (``preprocessor_config.json``
  names ``Gemma3ImageProcessor``, which needs torchvision). The tokenizer's ``boi_token``,
  ``image_token`` and ``eoi_token`` (``extra_special_tokens`` in ``tokenizer_config.json``)
  must be config.json's ``boi_token_index``, ``image_token_index`` and ``eoi_token_index``;
  ``image_seq_length`` (``processor_config.json``, else ``preprocessor_config.json``) must be
  ``mm_tokens_per_image``, and the image size the vision tower's ``image_size``: otherwise the
  soft-token count and the image features disagree deep inside transformers. Gemma's chat
  template writes ``<bos>`` itself; like ``apply_chat_template(tokenize=True)``, the processor
  then adds no second one (``Gemma3ChatProcessor``).
* Refused: a text config with ``use_bidirectional_attention`` (an embedding model's setting:
  its text tokens do not attend causally, so no tree mask describes it).
"""

from __future__ import annotations

from typing import Any

from transformers import Gemma3Processor

from recap.core.errors import ModelLoadError
from recap.models.families.base import FamilyAdapter, check_equal, positive_int
from recap.models.files import CheckpointFiles, build_image_processor, token_id

#: The tokenizer's image tokens and the config.json keys holding their ids.
IMAGE_TOKENS = (("boi_token", "boi_token_index"), ("image_token", "image_token_index"),
                ("eoi_token", "eoi_token_index"))
SLIDING = "sliding_attention"


class Gemma3ChatProcessor(Gemma3Processor):
    """``Gemma3Processor`` that adds no special tokens to a text already starting with BOS, the
    rule of ``ProcessorMixin.apply_chat_template(tokenize=True)``: Gemma's template renders
    ``<bos>``, and a second one would change what the model reads."""

    def __call__(self, images: Any = None, text: Any = None, **kwargs: Any) -> Any:
        first = text if isinstance(text, str) else (text[0] if isinstance(text, list) and text else None)
        bos = getattr(self.tokenizer, "bos_token", None)
        if bos and isinstance(first, str) and first.startswith(bos):
            kwargs.setdefault("add_special_tokens", False)
        return super().__call__(images=images, text=text, **kwargs)


class Gemma3Adapter(FamilyAdapter):
    family = "gemma3"
    display_name = "Gemma 3 (gemma3)"
    model_class = "Gemma3ForConditionalGeneration"

    def prefill_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The defaults, plus ``token_type_ids`` cut like the prompt (one entry per token)."""
        cut = super().prefill_inputs(inputs)
        if "token_type_ids" in cut:
            cut["token_type_ids"] = cut["token_type_ids"][:, :-1]
        return cut

    def attention_windows(self, model: Any) -> dict[str, int | None]:
        """``{"sliding_attention": sliding_window, "full_attention": None}`` for the layer types present."""
        text = model.config.get_text_config()
        return {kind: (int(text.sliding_window) if kind == SLIDING else None)
                for kind in dict.fromkeys(text.layer_types)}

    def check_image_token(self, files: CheckpointFiles, config: Any, tokenizer: Any, processor: Any) -> None:
        """The three image tokens' ids against config.json (the placeholder typed in a prompt is
        ``<start_of_image>``; the processor expands it into ``mm_tokens_per_image`` soft tokens)."""
        for attr, key in IMAGE_TOKENS:
            check_equal(files, f"the tokenizer's id of its {attr} {getattr(tokenizer, attr)!r}",
                        token_id(tokenizer, getattr(tokenizer, attr)), key, getattr(config, key, None))

    def make_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        from transformers import Gemma3ImageProcessorPil

        text = config.get_text_config()
        if getattr(text, "use_bidirectional_attention", False):
            raise ModelLoadError(
                f"{files.label}: config.json text_config.use_bidirectional_attention is true (an embedding "
                "model's "
                "setting): its text does not attend causally, so it cannot be decoded token by token"
            )
        missing = [attr for attr, _ in IMAGE_TOKENS if not isinstance(getattr(tokenizer, attr, None), str)]
        if missing:
            raise ModelLoadError(
                f"{files.label}: the tokenizer has no {', '.join(missing)}: tokenizer_config.json must list "
                "boi_token, image_token and eoi_token in extra_special_tokens, as Gemma 3 ships it"
            )
        image_processor = build_image_processor(files, Gemma3ImageProcessorPil)
        size = getattr(image_processor, "size", None)
        side = config.vision_config.image_size
        got = (getattr(size, "height", None), getattr(size, "width", None))
        check_equal(files, "preprocessor_config.json size (height, width)", got, "vision_config.image_size",
                    (side, side))
        saved = files.read_json("processor_config.json") or {}
        length = saved.get("image_seq_length")
        where = "processor_config.json"
        if length is None:
            length = (files.read_json("preprocessor_config.json") or {}).get("image_seq_length")
            where = "preprocessor_config.json"
        if not positive_int(length):
            raise ModelLoadError(f"{files.label}: {where} image_seq_length must be a "
                                 f"positive integer, got {length!r}")
        check_equal(files, f"{where} image_seq_length", length, "mm_tokens_per_image",
                    config.mm_tokens_per_image)
        return self.construct_processor(files, Gemma3ChatProcessor, image_processor=image_processor,
                                        tokenizer=tokenizer, chat_template=template, image_seq_length=length)
