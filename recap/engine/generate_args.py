"""What transformers' ``generate()`` takes, as the engine takes it (issue 38).

``recap.generate`` / ``recap.iter_steps`` accept three things the way ``generate()`` does:

* **Generation settings as keywords** (``do_sample=True, temperature=0.7``): ``generation_settings``
  merges them into the call's ``generation_config`` exactly as ``generate(generation_config=gc,
  **settings)`` would (they win over the config's fields; the rest still comes from the model's
  own config, then transformers' defaults). A name that is no ``GenerationConfig`` field is
  refused (``ValueError`` naming it), as is ``max_length`` (the engine counts new tokens).
* **A streamer** with transformers' protocol (``put(tensor)``, ``end()``; ``TextStreamer``,
  ``TextIteratorStreamer``): the prompt's ids (1, P) first, then one ``put`` of shape (1,) per
  emitted token, then ``end()``: the calls ``generate(streamer=...)`` makes, so a streamer written
  for it reads the same. A step's tokens are all known at once; they are put one by one anyway.
* **Prepared model inputs** (``inputs=``: ``recap.prepare_inputs``' dict, or a processor's output as
  ``generate(**inputs)`` takes it) instead of a request: ``request_inputs`` checks them (one
  unpadded sequence, ids inside the vocabulary) and names the request for the memories: its
  images' key is a fingerprint of the image tensors (not of the PIL pixels ``recap.generate``
  fingerprints: the two paths key the same image differently), its prompt the decoded ids.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from transformers import GenerationConfig

from recap.core.errors import InputError
from recap.models.inputs import chat_inputs, images_key, load_chat
from recap.models.target import Target

#: The settings a keyword may set: every public field of a GenerationConfig.
SETTING_NAMES = frozenset(name for name in vars(GenerationConfig()) if not name.startswith("_"))
#: Model inputs that describe the request's images (or videos), not its tokens: their tensors key the
#: request's image-scoped memory rows when inputs come prepared.
IMAGE_INPUTS = (
    "pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "image_sizes",
    "pixel_attention_mask", "second_per_grid_ts",
)


def generation_settings(
    generation_config: GenerationConfig | Mapping[str, Any] | None, settings: Mapping[str, Any]
) -> GenerationConfig | Mapping[str, Any] | None:
    """``generation_config`` with ``settings`` (generation-config fields as keywords) applied on top."""
    if not settings:
        return generation_config
    unknown = sorted(set(settings) - SETTING_NAMES)
    if unknown:
        raise ValueError(
            f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: recap "
            "takes its own arguments and GenerationConfig fields as keywords (do_sample=, temperature=, ...)"
        )
    if "max_length" in settings:
        raise ValueError("max_length= is not taken: recap counts new tokens, so set max_new_tokens= instead")
    if generation_config is None:
        return dict(settings)
    if isinstance(generation_config, GenerationConfig):
        merged = copy.deepcopy(generation_config)  # the caller's config is left as it was
        merged.update(**settings)
        return merged
    if isinstance(generation_config, Mapping):
        return {**generation_config, **settings}
    return generation_config  # not a config: the engine names its type


# --------------------------------------------------------------------------- streamer


def check_streamer(streamer: Any) -> None:
    """ValueError unless ``streamer`` is None or has transformers' streamer methods."""
    if streamer is None:
        return
    missing = [name for name in ("put", "end") if not callable(getattr(streamer, name, None))]
    if missing:
        raise ValueError(
            "streamer must have put() and end() (transformers' streamer protocol, e.g. "
            f"TextIteratorStreamer); {type(streamer).__name__} has no {' or '.join(missing)}()"
        )


def stream_prompt(streamer: Any, input_ids: torch.Tensor) -> None:
    """The prompt's ids (1, P) on the host: the first ``put`` generate() makes."""
    streamer.put(input_ids.detach().cpu())


def stream_tokens(streamer: Any, tokens: list[int], done: bool) -> None:
    """A step's emitted tokens, one ``put`` of shape (1,) each as generate() makes them; ``end()`` after
    the last step."""
    for token in tokens:
        streamer.put(torch.tensor([token], dtype=torch.long))
    if done:
        streamer.end()


# --------------------------------------------------------------------------- the request


@dataclass(frozen=True)
class Request:
    """The model inputs of one request and how the memories name it."""

    inputs: dict[str, Any]
    image_key: str | None  # the images' fingerprint (None: no image)
    prompt: str  # the question, as the memory's request provenance records it
    turn: int  # which user turn it answers (prepared inputs: 1, their turns are unknown)


def request_inputs(
    target: Target,
    image: Image.Image | str | Any | None,
    prompt: str | None,
    *,
    messages: Any,
    allow_paths: bool,
    inputs: Mapping[str, Any] | None,
) -> Request:
    """The request of an engine call: a conversation (``messages``, or ``image`` and ``prompt``) built
    into model inputs, or ``inputs`` already built, checked."""
    if inputs is None:
        chat = load_chat(target, image, prompt, messages=messages, allow_paths=allow_paths)
        return Request(
            chat_inputs(target, chat), images_key(chat.images),  # type: ignore[arg-type]
            chat.prompt, sum(m["role"] == "user" for m in chat.messages),
        )
    if image is not None or prompt is not None or messages is not None:
        raise InputError("pass either inputs or a request (an image and a prompt, or messages), not both")
    return prepared_request(target, inputs)


def prepared_request(target: Target, inputs: Mapping[str, Any]) -> Request:
    """Model inputs built elsewhere, checked: one unpadded sequence of at least two ids in the vocabulary."""
    if not isinstance(inputs, Mapping):
        raise ValueError(
            f"inputs must be a dict of model inputs (a processor's output), got {type(inputs).__name__}"
        )
    ids = inputs.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.long, torch.int):
        raise ValueError("inputs must hold input_ids, an integer tensor of shape (1, prompt length)")
    if ids.shape[0] != 1:
        raise ValueError(
            f"recap decodes one sequence at a time, but input_ids holds a batch of {ids.shape[0]}; "
            "decode each prompt on its own"
        )
    if ids.shape[1] < 2:
        raise InputError("the prompt has fewer than two tokens; cannot decode")
    if int(ids.min()) < 0 or int(ids.max()) >= target.vocab_size:
        raise InputError(f"input_ids holds ids outside the vocabulary of {target.vocab_size}")
    limit = target.max_positions
    if limit is not None and ids.shape[1] >= limit:
        raise InputError(f"the prompt is {ids.shape[1]} tokens long; this model takes at most {limit - 1}")
    mask = inputs.get("attention_mask")
    if mask is not None and not bool((torch.as_tensor(mask) == 1).all()):
        raise ValueError(
            "attention_mask masks some prompt tokens (padding); recap decodes one unpadded sequence, "
            "so pass the prompt without padding"
        )
    out = {k: v.to(target.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    # the memory's provenance shows the request's text; a target wrapped without a processor has none
    tok = None if target.processor is None else target.tokenizer
    text = "" if tok is None else tok.decode(ids[0].tolist(), skip_special_tokens=True)
    return Request(out, _tensors_key([out.get(name) for name in IMAGE_INPUTS]), text.strip(), 1)


def _tensors_key(values: list[Any]) -> str | None:
    """A fingerprint of the image tensors (their shapes, dtypes and bytes: the full SHA-256); None when
    there are none."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return None
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(f"{tuple(t.shape)} {t.dtype}\n".encode())
        digest.update(t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
