"""Loading targets, one adapter per model family, and building inputs.

``load_target(path_or_id=None)`` loads a vision-language model and its processor:
Qwen2-VL, Qwen2.5-VL, LLaVA-1.5 and LLaVA-NeXT / 1.6. ``None`` is the embedded shapes
model in ``assets/shapes-vlm``. Never ``trust_remote_code``.

Everything a family does differently lives in its ``FamilyAdapter``:

* which token ids are image placeholders (never part of a memory key);
* per-request rope state to reset before a prefill (Qwen's ``rope_deltas``);
* position ids for a tree's nodes (Qwen M-RoPE: three equal rows
  ``prefix + depth + rope_delta``; LLaVA: ``prefix + depth``);
* how the processor is loaded (Qwen's stock processors need torchvision; we use the
  image-only subclasses in ``recap.processors``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from recap.processors import Qwen2_5_VLImageProcessor, Qwen2VLImageProcessor

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_DIR = REPO_ROOT / "assets" / "shapes-vlm"
SUPPORTED_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "llava", "llava_next")
FAMILY_NAMES = "Qwen2-VL, Qwen2.5-VL, LLaVA-1.5 (llava), LLaVA-NeXT / 1.6 (llava_next)"

#: Largest image (in pixels) accepted before resizing; PIL refuses decompression bombs beyond 2x this.
MAX_IMAGE_PIXELS = 40_000_000
#: Longest prompt accepted, in characters (the app documents the same limit).
MAX_PROMPT_CHARS = 4000


class ModelLoadError(RuntimeError):
    """A model or processor that could not be loaded; the message says why."""


class InputError(ValueError):
    """An image or prompt the model cannot take; the message says why."""


# --------------------------------------------------------------------------- adapters


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

    def load_processor(self, path_or_id: str) -> Any:
        if self.family == "qwen2_5_vl":
            return Qwen2_5_VLImageProcessor.from_pretrained(path_or_id)
        if self.family == "qwen2_vl":
            return Qwen2VLImageProcessor.from_pretrained(path_or_id)
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(path_or_id)


ADAPTERS: dict[str, FamilyAdapter] = {
    "qwen2_vl": FamilyAdapter("qwen2_vl", "Qwen2VLForConditionalGeneration", mrope=True),
    "qwen2_5_vl": FamilyAdapter("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", mrope=True),
    "llava": FamilyAdapter("llava", "LlavaForConditionalGeneration", mrope=False),
    "llava_next": FamilyAdapter("llava_next", "LlavaNextForConditionalGeneration", mrope=False),
}


# --------------------------------------------------------------------------- target


@dataclass
class Target:
    """A loaded target model with its processor and family adapter."""

    model: Any
    processor: Any
    adapter: FamilyAdapter
    name: str
    device: torch.device
    dtype: torch.dtype
    _texts: dict[int, str] = field(default_factory=dict, repr=False)
    prefill_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    @property
    def family(self) -> str:
        return self.adapter.family

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def eos_token_ids(self) -> frozenset[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = getattr(self.model.config, "eos_token_id", None)
        if eos is None:
            return frozenset()
        return frozenset([eos] if isinstance(eos, int) else [int(e) for e in eos])

    @property
    def image_token_ids(self) -> frozenset[int]:
        return self.adapter.image_token_ids(self.model)

    @property
    def max_positions(self) -> int | None:
        cfg = getattr(self.model.config, "text_config", self.model.config)
        return getattr(cfg, "max_position_embeddings", None)

    def token_text(self, token: int) -> str:
        """Text of one token (memoised: the app labels every tree node with it)."""
        text = self._texts.get(token)
        if text is None:
            text = self.tokenizer.decode([token], skip_special_tokens=False)
            self._texts[token] = text
        return text


def _detect_family(path_or_id: str) -> str:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path_or_id, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - every loader failure becomes one clear error
        raise ModelLoadError(f"cannot read a model config from {path_or_id!r}: {exc}") from exc
    family = getattr(config, "model_type", None)
    if family not in ADAPTERS:
        raise ValueError(f"unsupported model family {family!r} in {path_or_id!r}; supported: {FAMILY_NAMES}")
    return family


def load_target(
    path_or_id: str | os.PathLike[str] | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    attn_implementation: str | None = None,
) -> Target:
    """Load a supported VLM and its processor.

    path_or_id: a directory saved with ``save_pretrained`` (model + processor) or a hub
    id (where a hub is reachable); ``None`` is the embedded model in assets/shapes-vlm.
    device / dtype: ``None`` picks CUDA with bf16 when a GPU is present, else CPU fp32.
    """
    if path_or_id is None:
        if not (DEFAULT_MODEL_DIR / "config.json").is_file():
            raise ModelLoadError(
                f"the embedded default model is missing: expected {DEFAULT_MODEL_DIR} "
                "(train it with `python -m recap.shapes.train --out assets/shapes-vlm`)"
            )
        path_or_id = DEFAULT_MODEL_DIR
    name = str(path_or_id)
    # A hub id is "org/name": one slash, no leading "/", "." or "~". Anything else is a path.
    looks_local = isinstance(path_or_id, os.PathLike) or name.startswith(("/", ".", "~")) or name.count("/") > 1
    if looks_local or Path(name).exists():
        name = str(Path(name).expanduser())
        if not Path(name).exists():
            raise ModelLoadError(f"model path does not exist: {name}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        if not hasattr(torch, dtype) or not isinstance(getattr(torch, dtype), torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}")
        dtype = getattr(torch, dtype)

    family = _detect_family(name)
    adapter = ADAPTERS[family]
    import transformers

    model_cls = getattr(transformers, adapter.model_class)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = model_cls.from_pretrained(name, trust_remote_code=False, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"cannot load {adapter.model_class} from {name!r}: {exc}") from exc
    try:
        processor = adapter.load_processor(name)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"cannot load the processor of {name!r}: {exc}") from exc
    if getattr(processor, "image_processor", None) is None or getattr(processor, "tokenizer", None) is None:
        raise ModelLoadError(
            f"{name!r} gave a {type(processor).__name__} where a processor with an image processor and "
            "a tokenizer was expected (is processor_config.json / preprocessor_config.json missing?)"
        )
    model.to(device).eval()
    return Target(model=model, processor=processor, adapter=adapter, name=name, device=device, dtype=dtype)


# --------------------------------------------------------------------------- inputs


def load_image(image: Image.Image | str | os.PathLike[str] | None) -> Image.Image | None:
    """Open and validate an image (PIL image, path, or None); returns RGB or None."""
    if image is None:
        return None
    if isinstance(image, Image.Image):
        img = image
    else:
        path = Path(image)
        if not path.is_file():
            raise InputError(f"image file not found: {path}")
        try:
            with Image.open(path) as opened:
                opened.load()
                img = opened.copy()
        except Image.DecompressionBombError as exc:
            raise InputError(f"image {path.name} is too large to open safely: {exc}") from exc
        except (OSError, ValueError, SyntaxError) as exc:
            raise InputError(f"{path.name} is not a readable image: {exc}") from exc
    if img.width < 1 or img.height < 1:
        raise InputError("the image is empty (0 pixels)")
    if img.width * img.height > MAX_IMAGE_PIXELS:
        img = img.copy()
        img.thumbnail((4096, 4096))
    return img.convert("RGB")


def image_key(image: Image.Image | None) -> str | None:
    """A short fingerprint of an image (memory provenance: 'was it the same image?')."""
    if image is None:
        return None
    small = image.convert("RGB").resize((32, 32))
    return hashlib.sha1(small.tobytes() + f"{image.size}".encode()).hexdigest()[:12]


def prepare_inputs(target: Target, image: Image.Image | str | os.PathLike[str] | None, prompt: str) -> dict[str, Any]:
    """The model inputs for one user turn (the image, then the prompt).

    The dict is exactly what ``target.model.generate(**inputs, do_sample=False)`` takes:
    it is the reference every method's output is compared with.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"the prompt has {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
    img = load_image(image)
    content: list[dict[str, Any]] = []
    if img is not None:
        content.append({"type": "image"})
    content.append({"type": "text", "text": prompt})
    messages = [{"role": "user", "content": content}]
    processor = target.processor
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if img is not None:
        kwargs["images"] = [img]
    inputs = dict(processor(**kwargs))
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(target.device)
            if value.is_floating_point():
                value = value.to(target.dtype)
        out[key] = value
    n = int(out["input_ids"].shape[-1])
    if n < 2:
        raise InputError("the chat template produced fewer than two tokens; cannot decode")
    limit = target.max_positions
    if limit is not None and n >= limit:
        raise InputError(f"the prompt is {n} tokens long with its image; this model takes at most {limit - 1}")
    return out
