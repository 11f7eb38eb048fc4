"""Idefics3 (``idefics3``): the first SmolVLM releases (SmolVLM-256M / 500M / 2.2B-Instruct ship
as ``Idefics3ForConditionalGeneration``) and Idefics3 itself; the base of SmolVLM2
(``recap.models.families.smolvlm``).

* Positions: plain 1D RoPE (the text model is Llama / SmolLM2): the ``FamilyAdapter`` defaults.
* Prefill inputs: ``pixel_values`` (batch, tiles, C, H, W) and ``pixel_attention_mask``
  (batch, tiles, H, W) describe the image's tiles, not tokens: the default cut (per-token
  inputs only) keeps them whole.
* Image tokens: only ``<image>`` (the config's ``image_token_id``) is replaced by vision
  features. The tile markers the processor writes around them (``<fake_token_around_image>``,
  ``<row_r_col_c>``, ``<global-img>``, the newlines between tile rows) are ordinary text
  embeddings, so the default ``image_token_ids`` (the config's image id) is what memory keys
  skip and drafts never propose.
* Processor: ``Idefics3Processor`` over ``Idefics3ImageProcessorPil`` (no torchvision). The
  image is resized to ``size["longest_edge"]``, cut into square tiles of
  ``max_image_size["longest_edge"]`` pixels plus one global image (image splitting), and each
  tile becomes ``image_seq_len`` ``<image>`` tokens: the vision tower's
  ``(image_size // patch_size)**2`` patches, pixel-shuffled by ``scale_factor`` (``**2``
  patches per token). ``image_seq_len`` comes from ``processor_config.json`` (SmolVLM ships
  64: 512-pixel tiles, 16-pixel patches, a shuffle of 4), else from that arithmetic; the file's
  value, the tile size and the tile markers are checked against the model config and the
  tokenizer, since a mismatch only surfaces later as an image-feature count error inside
  transformers.
"""

from __future__ import annotations

from typing import Any

from recap.core.errors import ModelLoadError
from recap.models.families.base import FamilyAdapter, check_equal, positive_int
from recap.models.files import CheckpointFiles, build_image_processor, token_id

#: The tile markers the processor writes (besides ``<image>``, which the base checks).
FAKE_IMAGE_TOKEN = "<fake_token_around_image>"
GLOBAL_IMAGE_TOKEN = "<global-img>"
ROW_COL_TOKENS = tuple(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7))


class Idefics3Adapter(FamilyAdapter):
    family = "idefics3"
    display_name = "SmolVLM / Idefics3 (idefics3)"
    model_class = "Idefics3ForConditionalGeneration"

    def image_processor_class(self) -> type:
        """The PIL image processor class of the family."""
        import transformers as tf

        return tf.Idefics3ImageProcessorPil

    def processor_class(self) -> type:
        """The processor class of the family (it needs no torchvision)."""
        import transformers as tf

        return tf.Idefics3Processor

    def marker_tokens(self, tokenizer: Any) -> tuple[str, ...]:
        """The tile markers this family's processor writes around the ``<image>`` runs."""
        return (FAKE_IMAGE_TOKEN, GLOBAL_IMAGE_TOKEN, *ROW_COL_TOKENS)

    def make_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        image_processor = build_image_processor(files, self.image_processor_class())
        image_seq_len = tile_geometry(files, config, image_processor)
        check_markers(files, config, tokenizer, self.marker_tokens(tokenizer))
        return self.construct_processor(files, self.processor_class(), image_processor=image_processor,
                                        tokenizer=tokenizer, image_seq_len=image_seq_len,
                                        chat_template=template)


def tile_geometry(files: CheckpointFiles, config: Any, image_processor: Any) -> int:
    """The ``<image>`` tokens per tile (see the module docstring), after checking that the
    processor's tiles are what the vision tower takes."""
    vision = config.vision_config
    scale = getattr(config, "scale_factor", None)
    image_size = getattr(vision, "image_size", None)
    patch = getattr(vision, "patch_size", None)
    for key, value in (("scale_factor", scale), ("vision_config.image_size", image_size),
                       ("vision_config.patch_size", patch),):
        if not positive_int(value):
            raise ModelLoadError(f"{files.label}: config.json {key} must be a "
                                 f"positive integer, got {value!r}")
    side = (
        image_size // patch
    )  # the patch embedding is a stride-patch convolution: a partial patch is dropped
    if side % scale:
        raise ModelLoadError(
            f"{files.label}: config.json vision_config.image_size {image_size} // patch_size {patch} = "
            f"{side} patches "
            f"per side must be a multiple of scale_factor {scale} (the pixel shuffle); restore config.json "
            "from the "
            "original checkpoint"
        )
    expected = (side // scale) ** 2
    tile = (getattr(image_processor, "max_image_size", None) or {}).get("longest_edge")
    check_equal(files, "preprocessor_config.json max_image_size.longest_edge (the tile size)", tile,
                "vision_config.image_size", image_size)
    longest = (getattr(image_processor, "size", None) or {}).get("longest_edge")
    if not positive_int(longest):
        raise ModelLoadError(
            f"{files.label}: preprocessor_config.json size.longest_edge must be a positive integer, got "
            f"{longest!r}"
        )
    saved = (files.read_json("processor_config.json") or {}).get("image_seq_len")
    if saved is None:
        return expected
    if not positive_int(saved):
        raise ModelLoadError(f"{files.label}: processor_config.json image_seq_len must be a "
                             f"positive integer, got {saved!r}")
    check_equal(
        files, "processor_config.json image_seq_len", saved,
        f"(vision_config.image_size // patch_size)**2 / scale_factor**2 = ({image_size} // {patch})**2 / "
        f"{scale}**2", expected,
    )
    return saved


def check_markers(files: CheckpointFiles, config: Any, tokenizer: Any, markers: tuple[str, ...]) -> None:
    """Every tile marker must be one token of the model's vocabulary: a missing one would be
    added by the processor past the embedding matrix (or spelled as text the model never saw)."""
    vocab = getattr(getattr(config, "text_config", config), "vocab_size", None)
    for marker in markers:
        tid = token_id(tokenizer, marker)
        if tid is None or (positive_int(vocab) and tid >= vocab):
            raise ModelLoadError(
                f"{files.label}: the tokenizer has no token {marker!r} within the model's {vocab} embeddings "
                "(the processor writes it around image tiles); restore the tokenizer files from the original "
                "checkpoint"
            )
