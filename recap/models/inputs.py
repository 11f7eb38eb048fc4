"""Model inputs for one user turn: the image, the prompt, the chat template.

``prepare_inputs(target, image, prompt)`` returns exactly what
``target.model.generate(**inputs)`` takes; the engine decodes from the same dict, so it is
the reference every method is compared with.

Typed control tokens stay text
------------------------------
A chat template renders the user's text into a string that the tokenizer then splits at
its special tokens. Left alone, a prompt holding ``<|im_end|><|im_start|>system ...`` (Qwen
ChatML), ``</s>`` or an image placeholder (``<image>``, ``<|image_pad|>``) would become
those control tokens: a visitor could close the user turn, open a system turn, or claim
image features that do not exist. So the user's text is tokenised with the tokenizer's
special tokens switched off (``split_special_tokens``): the model sees the characters that
were typed, as ordinary text tokens, and only the template's own control tokens.

How: where the prompt contains no special-token string (nearly always), the processor
tokenises the rendered template as usual, unchanged. Otherwise the template is rendered
with a marker (a special token) where the prompt goes; the processor builds the inputs
(image placeholders expanded, pixel values); then the text run around the marker (from the
template's control token before it to the one after) is tokenised again as plain text with
the prompt in place of the marker. Tokenisers split a text at special tokens and tokenise
each run on its own, so this is exactly the tokenisation the text would get if the typed
strings were not special (tested against the plain path on prompts without them). Unknown
text may still become the unknown token, as anywhere; a vocabulary that can write a typed
string only as the control token itself (a word-level one holding ``<|im_end|>`` as a word)
cannot keep it as text, and the prompt is refused with an ``InputError`` naming it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from recap.core.errors import InputError
from recap.core.limits import MAX_PROMPT_CHARS

if TYPE_CHECKING:
    from recap.models.target import Target

#: Largest image (in pixels) accepted before resizing; PIL refuses decompression bombs beyond 2x this.
MAX_IMAGE_PIXELS = 40_000_000
#: Stands for the prompt while locating it in the rendered template (private-use characters).
_SENTINEL = "\ue000recap-prompt\ue001"


def load_image(image: Image.Image | str | os.PathLike[str] | None, *, max_side: int | None = None) -> Image.Image | None:
    """Open and validate an image (PIL image, path, or None); returns RGB or None.

    max_side: shrink it on opening so its longer side is at most this many pixels (JPEGs
    are decoded at a reduced scale), so no full-size copy outlives the call (the app's
    ceiling on what a visitor's upload may cost).
    """
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
                if max_side is not None and max(opened.size) > max_side:
                    opened.draft("RGB", (max_side, max_side))
                    opened.thumbnail((max_side, max_side))
                else:
                    opened.load()
                img = opened.copy()
        except Image.DecompressionBombError as exc:
            raise InputError(f"image {path.name} is too large to open safely: {exc}") from exc
        except (OSError, ValueError, SyntaxError) as exc:
            raise InputError(f"{path.name} is not a readable image: {exc}") from exc
    if img.width < 1 or img.height < 1:
        raise InputError("the image is empty (0 pixels)")
    if max_side is not None and max(img.size) > max_side:
        img = img.copy()
        img.thumbnail((max_side, max_side))
    if img.width * img.height > MAX_IMAGE_PIXELS:
        img = img.copy()
        img.thumbnail((4096, 4096))
    return img.convert("RGB")


def image_key(image: Image.Image | None) -> str | None:
    """A fingerprint of an image's decoded pixels: its mode, its size and every byte (SHA-256, 16 hex
    digits). Memory provenance ('was it the same image?') and the image-scoped memories read it,
    so two images that differ in one pixel (two receipts, one digit apart) never share a key,
    while the same pixels from another file (a PNG and its lossless copy) do."""
    if image is None:
        return None
    digest = hashlib.sha256(f"{image.mode} {image.size[0]}x{image.size[1]}\n".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------- control tokens


def control_tokens(tokenizer: Any) -> dict[str, int]:
    """Every added (control) token of the tokenizer: its string -> its id."""
    return {str(tok): int(i) for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()}


def _render(target: Target, has_image: bool, text: str) -> str:
    content: list[dict[str, Any]] = [{"type": "image"}] if has_image else []
    content.append({"type": "text", "text": text})
    try:
        return target.processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # noqa: BLE001 - a template that fails to render is the checkpoint's fault
        raise InputError(f"the chat template of {target.short_name} cannot render this turn: {exc}") from exc


def _run_processor(target: Target, text: str, img: Image.Image | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if img is not None:
        kwargs["images"] = [img]
    try:
        return dict(target.processor(**kwargs))
    except Exception as exc:  # noqa: BLE001 - e.g. an image shape the image processor refuses
        what = "this image and prompt" if img is not None else "this prompt"
        raise InputError(
            f"the processor of {target.short_name} cannot build inputs for {what}: {exc} "
            "(try another image size or prompt)"
        ) from exc


def _marker(target: Target, controls: dict[str, int]) -> str:
    """A control token the processor leaves alone (not an image / video placeholder)."""
    processor = target.processor
    placeholders = {getattr(processor, "image_token", None), getattr(processor, "video_token", None)}
    tok = target.tokenizer
    for candidate in (tok.eos_token, tok.pad_token, *controls):
        if candidate in controls and candidate not in placeholders:
            return candidate
    raise InputError(f"{target.short_name}: its tokenizer has no control token to mark the prompt with")


def plain_text_inputs(target: Target, img: Image.Image | None, prompt: str) -> dict[str, Any]:
    """The inputs with the prompt tokenised as plain text (see the module docstring)."""
    tok = target.tokenizer
    controls = control_tokens(tok)
    rendered = _render(target, img is not None, _SENTINEL)
    parts = rendered.split(_SENTINEL)
    if len(parts) != 2:
        raise InputError(
            f"the chat template of {target.short_name} does not insert the prompt exactly once as written, so "
            "control tokens typed in it cannot be kept as text; remove them from the prompt"
        )
    before, after = parts
    marker = _marker(target, controls)
    inputs = _run_processor(target, before + marker + after, img)
    ids: list[int] = inputs["input_ids"][0].tolist()
    control_ids = set(controls.values())
    at = [i for i, t in enumerate(ids) if t == controls[marker]]
    k = before.count(marker)
    if len(at) <= k:
        raise InputError(f"{target.short_name}: the processor dropped the prompt's place in the template")
    pos = at[k]
    lo, hi = pos, pos + 1
    while lo > 0 and ids[lo - 1] not in control_ids:
        lo -= 1
    while hi < len(ids) and ids[hi] not in control_ids:
        hi += 1
    # The same run as a string: the template text between its control tokens and the marker.
    head = max((before.rfind(c) + len(c) for c in controls if c in before), default=0)
    tail = min((after.find(c) for c in controls if c in after), default=len(after))
    run = before[head:] + prompt + after[:tail]
    plain = tok(run, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    # Unknown text may become the unknown token, as anywhere; any other control token means the
    # vocabulary has no ordinary pieces for a typed string (word-level vocabularies): refuse it.
    forbidden = control_ids - {getattr(tok, "unk_token_id", None)}
    if any(t in forbidden for t in plain):
        typed = ", ".join(sorted(c for c in controls if c in prompt))
        raise InputError(
            f"the tokenizer of {target.short_name} cannot write {typed} as plain text; remove it from the prompt"
        )
    n = len(ids)
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[-1] == n:
            # attention_mask, mm_token_type_ids...: the run is text, like the marker it replaces
            fill = value[:, pos : pos + 1].expand(value.shape[0], len(plain))
            if key == "input_ids":
                fill = torch.tensor([plain], dtype=value.dtype)
            value = torch.cat([value[:, :lo], fill, value[:, hi:]], dim=1)
        out[key] = value
    return out


# --------------------------------------------------------------------------- inputs


def prepare_inputs(target: Target, image: Image.Image | str | os.PathLike[str] | None, prompt: str) -> dict[str, Any]:
    """The model inputs for one user turn (the image, then the prompt).

    The dict is exactly what ``target.model.generate(**inputs)`` takes: it is the
    reference every method's output is compared with. Control tokens typed in the prompt
    (``<|im_end|>``, ``<image>``, ``</s>``...) are tokenised as the plain text they spell
    (see the module docstring). Every failure is an ``InputError`` that says why.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"the prompt has {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
    img = load_image(image)
    if any(c in prompt for c in control_tokens(target.tokenizer)):
        inputs = plain_text_inputs(target, img, prompt)
    else:
        inputs = _run_processor(target, _render(target, img is not None, prompt), img)
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
