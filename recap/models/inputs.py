"""Model inputs for one request: a conversation (or an image and a prompt), the chat template.

``prepare_inputs(target, messages=...)`` (or ``prepare_inputs(target, image, prompt)``, the
one-turn conversation) returns exactly what ``target.model.generate(**inputs)`` takes on the
rendered conversation; the engine decodes from the same dict, so it is the reference every
method is compared with. The messages are checked by ``recap.models.messages``.

Typed control tokens stay text
------------------------------
A chat template renders the user's text into a string that the tokenizer then splits at
its special tokens. Left alone, a prompt holding ``<|im_end|><|im_start|>system ...`` (Qwen
ChatML), ``</s>`` or an image placeholder (``<image>``, ``<|image_pad|>``) would become
those control tokens: a visitor could close the user turn, open a system turn, or claim
image features that do not exist. So the user's text is tokenised with the tokenizer's
special tokens switched off (``split_special_tokens``): the model sees the characters that
were typed, as ordinary text tokens, and only the template's own control tokens.

How: where no text of the conversation contains a special-token string (nearly always), the
processor tokenises the rendered template as usual, unchanged. Otherwise the template is
rendered with a marker (a special token) where each text goes; the processor builds the
inputs (image placeholders expanded, pixel values); then each text run around the markers
(from the template's control token before it to the one after) is tokenised again as plain
text with the texts in place of the markers. Every text is treated so (the user's, and the
assistant turns a caller passes back: a public surface must not trust either). Tokenisers
split a text at special tokens and tokenise each run on its own, so this is exactly the
tokenisation the text would get if the typed strings were not special (tested against the
plain path on prompts without them). Unknown
text may still become the unknown token, as anywhere; a vocabulary that can write a typed
string only as the control token itself (a word-level one holding ``<|im_end|>`` as a word)
cannot keep it as text, and the prompt is refused with an ``InputError`` naming it. Added
tokens the tokenizer does not mark special (Qwen3's ``<think>``) are not control tokens: they
are tokenised as in ``generate()``'s own inputs.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from recap.core.errors import InputError
from recap.core.limits import MAX_PROMPT_CHARS
from recap.models.messages import Chat, chat, one_turn

if TYPE_CHECKING:
    from recap.models.target import Target

#: Largest image (in pixels) accepted before resizing (PIL refuses decompression bombs beyond 2x this).
MAX_IMAGE_PIXELS = 40_000_000
#: Stands for the prompt while locating it in the rendered template (private-use characters).
_SENTINEL = "\ue000recap-prompt\ue001"


def load_image(
    image: Image.Image | str | os.PathLike[str] | None, *, max_side: int | None = None
) -> Image.Image | None:
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
    """A fingerprint of an image's decoded pixels: its mode, its size and every byte (the full SHA-256,
    64 hex digits: no two images should ever meet under one key). Memory provenance ('was it the same
    image?') and the image-scoped memories read it, so two images that differ in one pixel (two
    receipts, one digit apart) never share a key, while the same pixels from another file (a PNG and
    its lossless copy) do."""
    if image is None:
        return None
    digest = hashlib.sha256(f"{image.mode} {image.size[0]}x{image.size[1]}\n".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------- control tokens


def control_tokens(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's special added tokens (its control tokens): string -> id.

    Added tokens not marked special (Qwen3's ``<think>``, ``<tool_call>``) are vocabulary the
    tokenizer writes for that text like any other word: a prompt may hold them, as it would in
    ``generate()``'s own inputs, and they are not forgeries.
    """
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {str(tok): int(i) for i, tok in added.items() if getattr(tok, "special", True)}


def _render(target: Target, messages: list[dict[str, Any]]) -> str:
    try:
        return target.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as exc:  # noqa: BLE001 - a template that fails to render is the checkpoint's fault
        raise InputError(
            f"the chat template of {target.short_name} cannot render this conversation: {exc}"
        ) from exc


def _run_processor(target: Target, text: str, images: list[Image.Image]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if images:
        kwargs["images"] = list(images)
    try:
        return dict(target.processor(**kwargs))
    except Exception as exc:  # noqa: BLE001 - e.g. an image shape the image processor refuses
        what = "these images and texts" if images else "this prompt"
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


def _sentinel(i: int) -> str:
    return f"{_SENTINEL}{i}\ue002"


def plain_text_inputs(target: Target, conversation: Chat) -> dict[str, Any]:
    """The inputs with every text of the conversation tokenised as plain text (see the module docstring).

    Texts between the same two control tokens of the template (LLaVA's ``USER: ... ASSISTANT:``
    turns share one run) are tokenised together, with the template text between them.
    """
    tok = target.tokenizer
    controls = control_tokens(tok)
    texts = conversation.texts
    sentinels = [_sentinel(i) for i in range(len(texts))]
    rendered = _render(target, conversation.with_texts(sentinels))
    if any(rendered.count(s) != 1 for s in sentinels):
        raise InputError(
            f"the chat template of {target.short_name} does not insert each text exactly once as written, so "
            "control tokens typed in it cannot be kept as text; remove them from the prompt"
        )
    order = sorted(range(len(texts)), key=lambda i: rendered.index(sentinels[i]))
    marker = _marker(target, controls)
    # The string the processor gets (each text replaced by the marker), and which occurrence of the
    # marker each text's is; then each text's run: from the control token before it to the one after.
    pieces: list[str] = []
    last = 0
    nth: dict[int, int] = {}
    runs: dict[tuple[int, int], list[int]] = {}
    for i in order:
        at = rendered.index(sentinels[i])
        pieces.append(rendered[last:at])
        nth[i] = "".join(pieces).count(marker)
        pieces.append(marker)
        last = at + len(sentinels[i])
        head = max((j + len(c) for c in controls for j in [rendered.rfind(c, 0, at)] if j >= 0), default=0)
        tail = min((j for c in controls for j in [rendered.find(c, last)] if j >= 0), default=len(rendered))
        runs.setdefault((head, tail), []).append(i)
    pieces.append(rendered[last:])
    inputs = _run_processor(target, "".join(pieces), conversation.images)  # type: ignore[arg-type]
    ids: list[int] = inputs["input_ids"][0].tolist()
    control_ids = set(controls.values())
    marks = [i for i, t in enumerate(ids) if t == controls[marker]]
    if len(marks) <= max(nth.values()):
        raise InputError(f"{target.short_name}: the processor dropped the prompt's place in the template")
    # Unknown text may become the unknown token, as anywhere; any other control token means the
    # vocabulary has no ordinary pieces for a typed string (word-level vocabularies): refuse it.
    forbidden = control_ids - {getattr(tok, "unk_token_id", None)}
    n = len(ids)
    splices: list[tuple[int, int, int, list[int]]] = []  # (lo, hi, a marker's position, plain ids)
    for (head, tail), members in runs.items():
        first, final = marks[nth[members[0]]], marks[nth[members[-1]]]
        if any(t in control_ids for t in ids[first + 1 : final] if t != controls[marker]):
            raise InputError(f"{target.short_name}: the processor put control tokens inside the prompt")
        lo, hi = first, final + 1
        while lo > 0 and ids[lo - 1] not in control_ids:
            lo -= 1
        while hi < n and ids[hi] not in control_ids:
            hi += 1
        run = rendered[head:tail]
        for i in members:
            run = run.replace(sentinels[i], texts[i])
        plain = tok(run, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if any(t in forbidden for t in plain):
            typed = ", ".join(sorted(c for c in controls if any(c in texts[i] for i in members)))
            raise InputError(
                f"the tokenizer of {target.short_name} cannot write {typed} as plain text; "
                "remove it from the prompt"
            )
        splices.append((lo, hi, first, plain))
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[-1] == n:
            # from the right, so that the earlier runs' places stay put
            for lo, hi, pos, plain in sorted(splices, reverse=True):
                # attention_mask, mm_token_type_ids...: the run is text, like the marker it replaces
                fill = value[:, pos : pos + 1].expand(value.shape[0], len(plain))
                if key == "input_ids":
                    fill = torch.tensor([plain], dtype=value.dtype)
                value = torch.cat([value[:, :lo], fill, value[:, hi:]], dim=1)
        out[key] = value
    return out


# --------------------------------------------------------------------------- inputs


def images_key(images: list[Image.Image]) -> str | None:
    """The fingerprint of a conversation's images: one image's own key, several combined (the full
    SHA-256 of their keys in order; None: none)."""
    keys = [image_key(img) for img in images]
    if not keys:
        return None
    if len(keys) == 1:
        return keys[0]
    return hashlib.sha256("+".join(str(k) for k in keys).encode()).hexdigest()


def load_chat(
    target: Target,
    image: Image.Image | str | os.PathLike[str] | None = None,
    prompt: str | None = None,
    *,
    messages: Any = None,
    allow_paths: bool = False,
) -> Chat:
    """The request as a checked conversation with its images opened: ``messages``, or
    ``image`` and ``prompt`` as its one turn (``recap.models.messages``). The image argument may
    be a path (the caller's own); a path inside ``messages`` only with ``allow_paths``."""
    if messages is not None:
        if image is not None or prompt is not None:
            raise InputError("pass either messages or an image and a prompt, not both")
        checked = chat(messages, allow_paths=allow_paths, max_images=target.adapter.max_images)
    else:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("the prompt is empty")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InputError(f"the prompt has {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
        img = load_image(image)
        checked = chat(one_turn(img, prompt))
    opened = [load_image(img) for img in checked.images]
    return replace(checked, images=opened)


def prepare_inputs(
    target: Target,
    image: Image.Image | str | os.PathLike[str] | None = None,
    prompt: str | None = None,
    *,
    messages: Any = None,
    allow_paths: bool = False,
) -> dict[str, Any]:
    """The model inputs for one request: an image and a prompt, or a conversation as ``messages``.

    ``messages`` are transformers' chat messages with the images inline (``recap.models.messages``
    has the rules); ``image`` and ``prompt`` are the one-turn conversation. The dict is exactly
    what ``target.model.generate(**inputs)`` takes on the rendered conversation: it is the
    reference every method's output is compared with. Control tokens typed in any text
    (``<|im_end|>``, ``<image>``, ``</s>``...) are tokenised as the plain text they spell
    (see the module docstring). Every failure is an ``InputError`` that says why.
    """
    return chat_inputs(target, load_chat(target, image, prompt, messages=messages, allow_paths=allow_paths))


def chat_inputs(target: Target, conversation: Chat) -> dict[str, Any]:
    """The model inputs of a checked conversation whose images are open (``load_chat``)."""
    controls = control_tokens(target.tokenizer)
    if any(c in text for text in conversation.texts for c in controls):
        inputs = plain_text_inputs(target, conversation)
    else:
        images: list[Image.Image] = conversation.images  # type: ignore[assignment]
        inputs = _run_processor(target, _render(target, conversation.messages), images)
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
        raise InputError(
            f"the prompt is {n} tokens long with its images; this model takes at most {limit - 1}"
        )
    return out
