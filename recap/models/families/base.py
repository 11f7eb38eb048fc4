"""The model-family contract: everything a family does differently, as one ``FamilyAdapter``.

A family is the ``model_type`` of a checkpoint's ``config.json``. Its adapter is a stateless
object (one instance serves every checkpoint of the family) kept by the registry
(``recap.models.families.registry``). The loader, the engine and verification use exactly this:

* ``family`` (str): the ``model_type`` served; ``display_name`` (str): how messages name the
  family (``"LLaVA-1.5 (llava)"``); ``model_class`` (str): the transformers class that loads
  its weights (``getattr(transformers, model_class)``).
* ``build_processor(files, config)``: the checkpoint's processor, built by class from its
  files (``recap.models.files``), never by the class names the files give. A missing or
  malformed file, or a value that disagrees with ``config``, is a ``ModelLoadError`` naming
  the file. The base does the steps every family shares (the image processor's file first,
  the tokenizer, the chat template, the image token's id checked against the config)
  around ``make_processor``, the one method a family must write.
* ``max_images`` (int | None): most images in one conversation (None: no family bound).
* ``image_token_ids(model)`` -> frozenset[int]: image placeholder ids (never in a memory key).
* ``prefill_inputs(inputs)`` -> dict: the prompt's model inputs without its last token (the
  first tree's root): per-token inputs cut, per-image ones (pixel values, grid sizes) whole.
* ``before_prefill(model)``: reset per-request state kept on the model; ``rope_delta(model)``
  -> int: the text's position offset set by the prefill. Plain RoPE keeps neither (no-op, 0).
* ``tree_positions(prefix_len, depths, rope_delta)`` -> Tensor: position ids of tree nodes at
  ``depths`` (N,) below a prefix of ``prefix_len`` tokens: ``(1, N)`` rows of
  ``prefix_len + rope_delta + depth``; an M-RoPE family returns ``(3, 1, N)``.
* ``attention_windows(model)`` -> dict[str, int | None] | None: for a model whose decoder
  layers attend over different spans, each layer type (the names of the text config's
  ``layer_types``, which the model's forward takes a mask dict by) and its sliding window in
  tokens, the query's own included (None: the whole context). Verification then builds one
  tree mask per type. None (the default): one mask serves every layer.
* ``check_image_token(files, config, tokenizer, processor)``: the image placeholder's id
  against the config (default: ``processor.image_token`` is ``image_token_id`` /
  ``image_token_index``); a ``ModelLoadError`` naming the file where they differ.

The defaults below are a plain-RoPE family's; a family overrides what differs. Validation is
loud: a subclass without ``make_processor`` cannot be instantiated, and ``register`` refuses
an adapter whose names are missing or already registered.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from recap.core.errors import ModelLoadError
from recap.models.files import (
    CheckpointFiles,
    image_processor_config,
    load_chat_template,
    load_tokenizer,
    token_id,
)

#: Processor outputs with one entry per prompt token (the others describe the images).
PER_TOKEN_INPUTS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids"})
#: Config attributes that hold an image (or video) placeholder id, by family.
IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index", "video_token_id")


def positive_int(value: Any) -> bool:
    """Whether a config value is a positive integer (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_equal(
    files: CheckpointFiles, what: str, file_value: Any, config_key: str, config_value: Any
) -> None:
    """A ``ModelLoadError`` unless a file's value equals the model config's."""
    if file_value != config_value:
        raise ModelLoadError(
            f"{files.label}: {what} is {file_value!r} but config.json {config_key} is {config_value!r}; "
            "they must agree (fix the file that differs from the original checkpoint)"
        )


class FamilyAdapter(ABC):
    """One model family (see the module docstring for the contract)."""

    family: ClassVar[str]
    display_name: ClassVar[str]
    model_class: ClassVar[str]
    #: Most images one conversation may show with this family (None: the library's own bound,
    #: ``recap.models.messages.MAX_IMAGES``); every built-in family takes several.
    max_images: ClassVar[int | None] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(family={self.family!r})"

    def image_token_ids(self, model: Any) -> frozenset[int]:
        cfg = model.config
        return frozenset(v for v in (getattr(cfg, k, None) for k in IMAGE_TOKEN_KEYS) if isinstance(v, int))

    def prefill_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The prompt's model inputs without its last token (the first tree's root): per-token
        inputs are cut, per-image ones (pixel values, grid sizes) kept whole."""
        return {k: (v[:, :-1] if k in PER_TOKEN_INPUTS else v) for k, v in inputs.items()}

    def before_prefill(self, model: Any) -> None:  # noqa: B027 - a default, not abstract: plain RoPE keeps no state
        """Reset per-request state kept on the model (none for plain RoPE)."""

    def rope_delta(self, model: Any) -> int:
        """The text's position offset after the prefill (0 for plain RoPE)."""
        return 0

    def tree_positions(self, prefix_len: int, depths: torch.Tensor, rope_delta: int) -> torch.Tensor:
        """Position ids of tree nodes. depths: (N,). Returns (1, N)."""
        return (prefix_len + rope_delta + depths).view(1, -1)

    def attention_windows(self, model: Any) -> dict[str, int | None] | None:
        """Each decoder layer type's sliding window (None: full attention), or None when one
        tree mask serves every layer (every family but one whose layers differ)."""
        return None

    def build_processor(self, files: CheckpointFiles, config: Any) -> Any:
        """The processor of this checkpoint, built from its files (see the module docstring)."""
        image_processor_config(
            files
        )  # the files a bare weights copy lacks first: say so before anything else
        tokenizer = load_tokenizer(files)
        template = load_chat_template(files, tokenizer)
        processor = self.make_processor(files, config, tokenizer, template)
        self.check_image_token(files, config, tokenizer, processor)
        return processor

    def check_image_token(self, files: CheckpointFiles, config: Any, tokenizer: Any, processor: Any) -> None:
        """``processor.image_token``'s id must be the config's image token id (ModelLoadError)."""
        image_id = token_id(tokenizer, processor.image_token)
        config_id = getattr(config, "image_token_id", None)
        if config_id is None:
            config_id = getattr(config, "image_token_index", None)
        check_equal(files, f"the tokenizer's id of the image token {processor.image_token!r}", image_id,
                    "image_token_id", config_id)

    @abstractmethod
    def make_processor(self, files: CheckpointFiles, config: Any, tokenizer: Any, template: str) -> Any:
        """The family's processor around the loaded tokenizer and chat template: its image
        processor read from ``files``, settings checked against ``config`` (``ModelLoadError``)."""

    def construct_processor(self, files: CheckpointFiles, cls: type, **parts: Any) -> Any:
        """``cls(**parts)``, any failure a ``ModelLoadError`` naming the checkpoint and family."""
        try:
            return cls(**parts)
        except Exception as exc:  # noqa: BLE001
            raise ModelLoadError(f"{files.label}: cannot build the {self.family} processor: {exc}") from exc
