"""One adapter per model family: everything a family does differently.

* which token ids are image placeholders (never part of a memory key);
* per-request rope state to reset before a prefill (Qwen's ``rope_deltas``);
* position ids for a tree's nodes (Qwen M-RoPE: three equal rows
  ``prefix + depth + rope_delta``; LLaVA: ``prefix + depth``);
* how the processor is built from the checkpoint's files (``build_processor``).

Processors are built explicitly, by class, from the files (``recap.models.files``), never by
the class names the files give:

* Qwen2-VL / Qwen2.5-VL: ``Qwen2VLImageProcessorPil`` (the PIL image processor of both;
  Qwen2.5-VL's files name ``Qwen2_5_VLImageProcessor``, which transformers 5 lacks) inside
  the image-only processors of ``recap.models.processors`` (the stock ones need torchvision).
* LLaVA-1.5: ``CLIPImageProcessorPil`` (``LlavaImageProcessorPil`` where the file names
  ``LlavaImageProcessor``, which pads); LLaVA-NeXT: ``LlavaNextImageProcessorPil``.
  ``patch_size``, ``vision_feature_select_strategy`` and ``num_additional_image_tokens``
  come from ``processor_config.json``; where it is missing (older snapshots, most
  fine-tunes), or a key in it is null, from the model config, as transformers' llava-hf
  conversions set them: ``vision_config.patch_size``, ``vision_feature_select_strategy``,
  and one additional image token (the CLS embedding) for a CLIP tower, none for SigLIP.
  The values are checked against the model config: a mismatch would only surface later as
  an image-token count error deep inside transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from recap.core.errors import ModelLoadError
from recap.models.files import (
    CheckpointFiles,
    build_image_processor,
    image_processor_config,
    load_chat_template,
    load_tokenizer,
    token_id,
)

#: Additional image tokens (beyond the patches) of a vision tower, by its model type: CLIP
#: prepends a CLS embedding, SigLIP does not (the values transformers' conversions use).
ADDITIONAL_IMAGE_TOKENS = {"clip_vision_model": 1, "siglip_vision_model": 0}
FEATURE_STRATEGIES = ("default", "full")
#: Processor outputs with one entry per prompt token (the others describe the images).
PER_TOKEN_INPUTS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids"})


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_equal(files: CheckpointFiles, what: str, file_value: Any, config_key: str, config_value: Any) -> None:
    if file_value != config_value:
        raise ModelLoadError(
            f"{files.label}: {what} is {file_value!r} but config.json {config_key} is {config_value!r}; "
            "they must agree (fix the file that differs from the original checkpoint)"
        )


@dataclass(frozen=True)
class FamilyAdapter:
    family: str
    model_class: str  # transformers class name
    mrope: bool  # Qwen-style 3-row M-RoPE positions with a per-request delta

    def image_token_ids(self, model: Any) -> frozenset[int]:
        cfg = model.config
        ids = set()
        for name in ("image_token_id", "image_token_index", "video_token_id"):
            value = getattr(cfg, name, None)
            if isinstance(value, int):
                ids.add(value)
        return frozenset(ids)

    def prefill_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The prompt's model inputs without its last token (the first tree's root): per-token
        inputs are cut, per-image ones (pixel values, grid sizes) kept whole."""
        return {k: (v[:, :-1] if k in PER_TOKEN_INPUTS else v) for k, v in inputs.items()}

    def before_prefill(self, model: Any) -> None:
        """Reset per-request state kept on the model (stale Qwen rope deltas are wrong)."""
        if self.mrope:
            model.model.rope_deltas = None

    def rope_delta(self, model: Any) -> int:
        if not self.mrope:
            return 0
        delta = getattr(model.model, "rope_deltas", None)
        return 0 if delta is None else int(delta.reshape(-1)[0])

    def tree_positions(self, prefix_len: int, depths: torch.Tensor, rope_delta: int) -> torch.Tensor:
        """Position ids of tree nodes. depths: (N,). Returns (3, 1, N) for M-RoPE, else (1, N)."""
        pos = (prefix_len + rope_delta + depths).view(1, -1)  # (1, N)
        if self.mrope:
            return pos.unsqueeze(0).expand(3, 1, -1)  # (3, 1, N): text positions, all rows equal
        return pos

    # ----------------------------------------------------------------- processors

    def build_processor(self, files: CheckpointFiles, config: Any) -> Any:
        """The processor of this checkpoint, built from its files (see the module docstring)."""
        image_processor_config(files)  # the files a bare weights copy lacks first: say so before anything else
        tokenizer = load_tokenizer(files)
        template = load_chat_template(files, tokenizer)
        if self.mrope:
            processor = self._qwen_processor(files, config, tokenizer, template)
        else:
            processor = self._llava_processor(files, config, tokenizer, template)
        image_id = token_id(tokenizer, processor.image_token)
        config_id = getattr(config, "image_token_id", None)
        if config_id is None:
            config_id = getattr(config, "image_token_index", None)
        _check_equal(files, f"the tokenizer's id of the image token {processor.image_token!r}", image_id,
                     "image_token_id", config_id)
        return processor

    def _qwen_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        from transformers import Qwen2VLImageProcessorPil

        from recap.models.processors import Qwen2_5_VLImageProcessor, Qwen2VLImageProcessor

        image_processor = build_image_processor(files, Qwen2VLImageProcessorPil)
        vision = config.vision_config
        for key, config_key in (("patch_size", "patch_size"), ("merge_size", "spatial_merge_size"),
                                ("temporal_patch_size", "temporal_patch_size")):
            value = getattr(image_processor, key, None)
            if not _positive_int(value):
                raise ModelLoadError(f"{files.label}: preprocessor_config.json {key} must be a positive integer, got {value!r}")
            _check_equal(files, f"preprocessor_config.json {key}", value, f"vision_config.{config_key}",
                         getattr(vision, config_key, None))
        cls = Qwen2_5_VLImageProcessor if self.family == "qwen2_5_vl" else Qwen2VLImageProcessor
        try:
            return cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=template)
        except Exception as exc:  # noqa: BLE001
            raise ModelLoadError(f"{files.label}: cannot build the {self.family} processor: {exc}") from exc

    def _llava_settings(self, files: CheckpointFiles, config: Any, tokenizer: Any) -> dict[str, Any]:
        """patch_size, vision_feature_select_strategy, num_additional_image_tokens, image_token."""
        saved = files.read_json("processor_config.json") or {}
        vision = config.vision_config
        where = "processor_config.json" if saved else "config.json (no processor_config.json)"
        patch = saved.get("patch_size")
        if patch is None:
            patch = getattr(vision, "patch_size", None)
        if not _positive_int(patch):
            raise ModelLoadError(
                f"{files.label}: patch_size must be a positive integer, got {patch!r} (from {where}); "
                "set vision_config.patch_size in config.json or patch_size in processor_config.json"
            )
        _check_equal(files, f"patch_size {patch!r} (from {where})", patch, "vision_config.patch_size",
                     getattr(vision, "patch_size", None))
        strategy = saved.get("vision_feature_select_strategy") or getattr(config, "vision_feature_select_strategy", None)
        if strategy not in FEATURE_STRATEGIES:
            raise ModelLoadError(
                f"{files.label}: vision_feature_select_strategy must be one of {FEATURE_STRATEGIES}, got {strategy!r} "
                f"(from {where})"
            )
        _check_equal(files, "processor_config.json vision_feature_select_strategy", strategy,
                     "vision_feature_select_strategy", getattr(config, "vision_feature_select_strategy", None))
        extra = saved.get("num_additional_image_tokens")
        if extra is None:
            tower = getattr(vision, "model_type", None)
            if tower not in ADDITIONAL_IMAGE_TOKENS:
                raise ModelLoadError(
                    f"{files.label}: no processor_config.json and a {tower!r} vision tower: cannot tell "
                    "num_additional_image_tokens; add a processor_config.json that sets it"
                )
            extra = ADDITIONAL_IMAGE_TOKENS[tower]
        if isinstance(extra, bool) or extra not in (0, 1):
            raise ModelLoadError(f"{files.label}: processor_config.json num_additional_image_tokens must be 0 or 1, got {extra!r}")
        image_token = saved.get("image_token") or getattr(tokenizer, "image_token", None) or "<image>"
        return {"patch_size": patch, "vision_feature_select_strategy": strategy,
                "num_additional_image_tokens": extra, "image_token": image_token}

    def _llava_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        import transformers as tf

        if self.family == "llava_next":
            image_cls = tf.LlavaNextImageProcessorPil
        else:
            named = str((files.read_json("preprocessor_config.json") or {}).get("image_processor_type") or "")
            image_cls = tf.LlavaImageProcessorPil if named.startswith("LlavaImageProcessor") else tf.CLIPImageProcessorPil
        image_processor = build_image_processor(files, image_cls)
        settings = self._llava_settings(files, config, tokenizer)
        cls = tf.LlavaNextProcessor if self.family == "llava_next" else tf.LlavaProcessor
        try:
            return cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=template, **settings)
        except Exception as exc:  # noqa: BLE001
            raise ModelLoadError(f"{files.label}: cannot build the {self.family} processor: {exc}") from exc


ADAPTERS: dict[str, FamilyAdapter] = {
    "qwen2_vl": FamilyAdapter("qwen2_vl", "Qwen2VLForConditionalGeneration", mrope=True),
    "qwen2_5_vl": FamilyAdapter("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", mrope=True),
    "llava": FamilyAdapter("llava", "LlavaForConditionalGeneration", mrope=False),
    "llava_next": FamilyAdapter("llava_next", "LlavaNextForConditionalGeneration", mrope=False),
}
