"""HF's greedy outputs, the lossless tests' references, computed once per session.

Many tests compare the engine with ``model.generate(do_sample=False)`` on the same session-cached
target, image, prompt and length (the lossless matrix, the family tests, the drafter plugin, the
hot path); each such reference is computed the first time and reused. The key is everything the
output depends on: the target object itself (held weakly, so a target built inside a test is
never confused with a later one at the same address), the image's pixels (or its path), the
prompt, the length, the model's generation config as it is at the call (tests change it) and
any other ``generate`` arguments. Only greedy decoding is cached: it is deterministic.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from typing import Any

import torch

import recap

_CACHE: dict[tuple, tuple[weakref.ref, list[int]]] = {}


def image_fingerprint(image: Any) -> Any:
    if image is None:
        return None
    if isinstance(image, (str, os.PathLike)):
        return ("path", os.fspath(image))
    return ("pixels", image.mode, image.size, hashlib.sha256(image.tobytes()).hexdigest())


def greedy_reference(
    target: recap.Target, image: Any, prompt: str, n: int, **generate_kwargs: Any
) -> list[int]:
    """``model.generate(**prepare_inputs(...), do_sample=False, max_new_tokens=n, **generate_kwargs)``'s
    new tokens."""
    key = (
        id(target),
        image_fingerprint(image),
        prompt,
        n,
        target.model.generation_config.to_json_string(),
        repr(sorted(generate_kwargs.items())),
    )
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is target:
        return list(hit[1])
    inputs = recap.prepare_inputs(target, image, prompt)
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=n, **generate_kwargs)
    tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    _CACHE[key] = (weakref.ref(target), tokens)
    return list(tokens)
