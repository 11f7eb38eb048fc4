"""Conversations as chat messages: checked and ready for the chat template.

A request is a conversation in transformers' chat-message form, the images inline::

    [{"role": "user", "content": [{"type": "image", "image": img},
                                  {"type": "text", "text": "What is it?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "A red circle."}]},
     {"role": "user", "content": [{"type": "text", "text": "Where is it?"}]}]

``chat(messages, ...)`` checks it and returns a ``Chat``: the messages as the template renders
them (every content a list of ``{"type": "image"}`` / ``{"type": "text", "text": ...}`` items)
and the images taken out of them, in order (``recap.models.inputs.load_chat`` opens them).
One image and one prompt are the one-turn case (``one_turn``): ``prepare_inputs(target, image,
prompt)`` builds that list, so a single question and a conversation go through the same code.

Rules (each broken one is an ``InputError`` naming the message and what is wrong):

* roles: an optional ``system`` message first, then ``user`` and ``assistant`` alternating,
  starting and ending with ``user`` (the turn to answer);
* content: a string, or a list of ``text`` / ``image`` items; every user message holds
  some non-blank text, every other message a text item (an answer may be blank); images
  only in user messages; each text at most ``MAX_PROMPT_CHARS`` characters;
* images: at most ``MAX_IMAGES`` in a conversation, fewer where the family says so
  (``FamilyAdapter.max_images``); an item's ``image`` is a PIL image, or a file path only
  when the caller passes ``allow_paths=True`` (a public surface never does: a visitor's
  text must not reach the file system).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from recap.core.errors import InputError
from recap.core.limits import MAX_PROMPT_CHARS

#: Most images one conversation may show (a family may allow fewer).
MAX_IMAGES = 8
#: Most messages in one conversation (a system message, then user / assistant turns).
MAX_MESSAGES = 64
ROLES = ("system", "user", "assistant")

ImageLike = Image.Image | str | os.PathLike[str]


@dataclass(frozen=True)
class Chat:
    """A checked conversation (see the module docstring)."""

    #: The messages as the chat template takes them: content lists of image / text items, no pixels.
    messages: list[dict[str, Any]]
    #: The images in the order their items appear: as given by ``chat``, opened (RGB) by
    #: ``recap.models.inputs.load_chat``.
    images: list[ImageLike]

    @property
    def texts(self) -> list[str]:
        """Every text item, in order (system, user and assistant alike)."""
        return [item["text"] for m in self.messages for item in m["content"] if item["type"] == "text"]

    @property
    def prompt(self) -> str:
        """The last user message's text (its items joined by newlines): the question to answer."""
        last = self.messages[-1]["content"]
        return "\n".join(item["text"] for item in last if item["type"] == "text")

    def with_texts(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """The messages with each text item replaced, in order, by ``texts``."""
        it = iter(texts)
        return [
            {"role": m["role"], "content": [
                {"type": "text", "text": next(it)} if item["type"] == "text" else dict(item)
                for item in m["content"]
            ]}
            for m in self.messages
        ]


def one_turn(image: ImageLike | None, prompt: str) -> list[dict[str, Any]]:
    """The messages of a single question: the image (if any), then the prompt."""
    content: list[dict[str, Any]] = [] if image is None else [{"type": "image", "image": image}]
    content.append({"type": "text", "text": prompt})
    return [{"role": "user", "content": content}]


def chat(messages: Any, *, allow_paths: bool = False, max_images: int | None = None) -> Chat:
    """Check ``messages`` (see the module docstring for the rules); the images are not opened yet."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InputError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    if len(messages) > MAX_MESSAGES:
        raise InputError(f"the conversation has {len(messages)} messages; the limit is {MAX_MESSAGES}")
    limit = MAX_IMAGES if max_images is None else min(MAX_IMAGES, max_images)
    out: list[dict[str, Any]] = []
    images: list[ImageLike] = []
    for i, message in enumerate(messages):
        role = _role(i, message, out)
        content = _items(i, role, message.get("content"))
        rendered: list[dict[str, Any]] = []
        for item in content:
            if item["type"] == "image":
                if len(images) >= limit:
                    raise InputError(
                        f"message {i} shows image {len(images) + 1}; a conversation with this model takes at "
                        f"most {limit} image{'s' if limit != 1 else ''}"
                    )
                images.append(_image(i, item, allow_paths))
                rendered.append({"type": "image"})
            else:
                rendered.append({"type": "text", "text": item["text"]})
        out.append({"role": role, "content": rendered})
    if out[-1]["role"] != "user":
        raise InputError("the conversation must end with a user message (the turn to answer)")
    return Chat(out, images)


def _role(i: int, message: Any, before: list[dict[str, Any]]) -> str:
    if not isinstance(message, dict):
        raise InputError(f"message {i} is a {type(message).__name__}, "
                         "not a {'role': ..., 'content': ...} dict")
    role = message.get("role")
    if role not in ROLES:
        raise InputError(f"message {i} has role {role!r}; roles are {', '.join(ROLES)}")
    turns = [m["role"] for m in before if m["role"] != "system"]
    if role == "system":
        if before:
            raise InputError(f"message {i}: a system message may only come first")
        return role
    expected = "user" if not turns or turns[-1] == "assistant" else "assistant"
    if role != expected:
        raise InputError(f"message {i} is a {role} message after a {turns[-1] if turns else 'start'}; "
                         "user and assistant messages must alternate, the user first")
    return role


def _items(i: int, role: str, content: Any) -> list[dict[str, Any]]:
    """The message's content as checked items."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, (list, tuple)):
        raise InputError(f"message {i} ({role}) has no content: "
                         "give a string or a list of text / image items")
    items: list[dict[str, Any]] = []
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text":
            text = item.get("text")
            if not isinstance(text, str):
                raise InputError(f"message {i} ({role}): a text item needs its 'text' as a string")
            if len(text) > MAX_PROMPT_CHARS:
                raise InputError(f"message {i} ({role}) has a text of {len(text)} characters; "
                                 f"the limit is {MAX_PROMPT_CHARS}")
        elif kind == "image":
            if role != "user":
                raise InputError(f"message {i} ({role}) holds an image; images go in user messages only")
            if item.get("image") is None:
                raise InputError(f"message {i} ({role}): an image item needs its 'image' (a PIL image)")
        else:
            raise InputError(f"message {i} ({role}): content items are "
                             f"{{'type': 'text'}} or {{'type': 'image'}}, got {item!r:.80}")
        items.append(item)
    texts = [it["text"] for it in items if it["type"] == "text"]
    if role == "user" and not any(t.strip() for t in texts):
        raise InputError(f"message {i} (user): the prompt is empty (a user message needs some text)")
    if not texts:  # an assistant's answer may be blank (the model may say nothing), never missing
        raise InputError(f"message {i} ({role}) has no text item")
    return items


def _image(i: int, item: dict[str, Any], allow_paths: bool) -> ImageLike:
    image = item["image"]
    if not isinstance(image, Image.Image):
        if not isinstance(image, (str, os.PathLike)):
            raise InputError(f"message {i}: an image item's 'image' must be a PIL image, "
                             f"got {type(image).__name__}")
        if not allow_paths:
            raise InputError(f"message {i}: an image given as a file path is not allowed here; "
                             "pass a PIL image (library callers may pass allow_paths=True)")
    return image
