"""LLaVA-1.5 (``llava``), and the base of LLaVA-NeXT (``recap.models.families.llava_next``).

* Positions: plain RoPE (the ``FamilyAdapter`` defaults): ``prefix + depth``, no per-request state.
* Processor: ``LlavaProcessor`` over ``CLIPImageProcessorPil`` (``LlavaImageProcessorPil``
  where ``preprocessor_config.json`` names ``LlavaImageProcessor``, which pads).
  ``patch_size``, ``vision_feature_select_strategy`` and ``num_additional_image_tokens``
  come from ``processor_config.json``; where it is missing (older snapshots, most
  fine-tunes), or a key in it is null, from the model config, as transformers' llava-hf
  conversions set them: ``vision_config.patch_size``, ``vision_feature_select_strategy``,
  and one additional image token (the CLS embedding) for a CLIP tower, none for SigLIP.
  The values are checked against the model config: a mismatch would only surface later as
  an image-token count error deep inside transformers.
"""

from __future__ import annotations

from typing import Any

from recap.core.errors import ModelLoadError
from recap.models.families.base import FamilyAdapter, check_equal, positive_int
from recap.models.files import CheckpointFiles, build_image_processor

#: Additional image tokens (beyond the patches) of a vision tower, by its model type: CLIP
#: prepends a CLS embedding, SigLIP does not (the values transformers' conversions use).
ADDITIONAL_IMAGE_TOKENS = {"clip_vision_model": 1, "siglip_vision_model": 0}
FEATURE_STRATEGIES = ("default", "full")


class LlavaAdapter(FamilyAdapter):
    family = "llava"
    display_name = "LLaVA-1.5 (llava)"
    model_class = "LlavaForConditionalGeneration"

    def image_processor_class(self, files: CheckpointFiles) -> type:
        """The PIL image processor class for this checkpoint's ``preprocessor_config.json``."""
        import transformers as tf

        named = str((files.read_json("preprocessor_config.json") or {}).get("image_processor_type") or "")
        return (
            tf.LlavaImageProcessorPil if named.startswith("LlavaImageProcessor") else tf.CLIPImageProcessorPil
        )

    def processor_class(self) -> type:
        """The transformers processor class of the family."""
        import transformers as tf

        return tf.LlavaProcessor

    def make_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        image_processor = build_image_processor(files, self.image_processor_class(files))
        settings = llava_settings(files, config, tokenizer)
        return self.construct_processor(files, self.processor_class(), image_processor=image_processor,
                                        tokenizer=tokenizer, chat_template=template, **settings)


def llava_settings(files: CheckpointFiles, config: Any, tokenizer: Any) -> dict[str, Any]:
    """patch_size, vision_feature_select_strategy, num_additional_image_tokens, image_token
    (see the module docstring for where each comes from)."""
    saved = files.read_json("processor_config.json") or {}
    vision = config.vision_config
    where = "processor_config.json" if saved else "config.json (no processor_config.json)"
    patch = saved.get("patch_size")
    if patch is None:
        patch = getattr(vision, "patch_size", None)
    if not positive_int(patch):
        raise ModelLoadError(
            f"{files.label}: patch_size must be a positive integer, got {patch!r} (from {where}); "
            "set vision_config.patch_size in config.json or patch_size in processor_config.json"
        )
    check_equal(files, f"patch_size {patch!r} (from {where})", patch, "vision_config.patch_size",
                getattr(vision, "patch_size", None))
    strategy = saved.get("vision_feature_select_strategy") or getattr(config,
                                                                      "vision_feature_select_strategy", None)
    if strategy not in FEATURE_STRATEGIES:
        raise ModelLoadError(
            f"{files.label}: vision_feature_select_strategy must be one of {FEATURE_STRATEGIES}, got "
            f"{strategy!r} "
            f"(from {where})"
        )
    check_equal(files, "processor_config.json vision_feature_select_strategy", strategy,
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
        raise ModelLoadError(f"{files.label}: processor_config.json num_additional_image_tokens must "
                             f"be 0 or 1, got {extra!r}")
    image_token = saved.get("image_token") or getattr(tokenizer, "image_token", None) or "<image>"
    return {
        "patch_size": patch, "vision_feature_select_strategy": strategy, "num_additional_image_tokens": extra,
        "image_token": image_token,
    }
