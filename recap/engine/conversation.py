"""Conversations: every user turn decoded with the history, on one memory (``converse``).

``converse(target, ["What is in the image?", "What color is it?"], image=img)`` asks the turns
in order. Turn t is decoded on the conversation so far (the earlier questions and the model's
own answers as assistant turns, then question t), exactly as ``generate(target, messages=...)``
decodes it, so every turn is what ``model.generate()`` gives on the same rendered
conversation. One persistent ``TokenMemory`` serves all the turns (made here when the caller
passes none and the method keeps one).

What carries from turn to turn
------------------------------
The 1-token memory and the calibration always carry (they are the persistent memory's). The
contextual rows (M2, M3: predictions the target made under this conversation's images) carry
as ``carry`` says:

* ``"conversation"`` (the default): the rows every earlier turn of this conversation wrote,
  whatever images it showed, and nothing from other conversations: the turns are filed under one
  scope key of their own (``conversation_scope``);
* ``"image"``: the rows of every earlier request on the same images that shares the memory,
  this conversation's turns and other conversations' (what ``RecapConfig(scoped_memory=True)``
  does for single requests);
* ``"none"``: fresh M2 / M3 every turn (``scoped_memory=False``).

Why the conversation by default: a turn's prompt holds the whole history, and its prefill writes
the M2 / M3 rows of every history position again, so what a carry adds is the rows of earlier
trees' nodes off the accepted paths, and the follow-up answers of a model that converses reuse
them. On the follow-up suite (``python -m recap bench --suite followup``, every mode a row;
docs/benchmark.md "Conversations", read from docs/bench/conversation/results.json) carrying the
conversation's rows took the fewest passes, on the later turns and over the suite. On the
stage-4 model, whose follow-up answers were short, none and conversation had tied
(docs/bench/HISTORY.md). ``carry="none"`` switches it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from PIL import Image
from transformers import GenerationConfig

from recap.core.config import RecapConfig
from recap.core.errors import InputError
from recap.engine.loop import Generation, generate
from recap.memory.store import TokenMemory
from recap.methods import get_method
from recap.models.inputs import load_image
from recap.models.target import Target
from recap.verification.seed import turn_seed

#: What may carry from one turn to the next (see the module docstring).
CARRY_MODES = ("conversation", "image", "none")
DEFAULT_CARRY = "conversation"
#: Most user turns one ``converse`` call decodes.
MAX_TURNS = 32


@dataclass
class ConversationRun:
    """What ``converse`` returns: one ``Generation`` per user turn, and the whole conversation."""

    generations: list[Generation]
    #: The conversation as chat messages, each answer appended as an assistant turn (images
    #: inline as given): pass it back with a new user turn to continue it.
    messages: list[dict[str, Any]]

    @property
    def texts(self) -> list[str]:
        return [g.text for g in self.generations]

    @property
    def mat_by_turn(self) -> list[float]:
        return [g.mat for g in self.generations]


def carry_settings(carry: str, config: RecapConfig, scope: str) -> tuple[RecapConfig, str | None]:
    """The config and ``memory_scope`` a turn is decoded with under ``carry``; ``scope`` is the
    conversation's own key (``conversation_scope``)."""
    if carry not in CARRY_MODES:
        raise ValueError(f"carry must be one of {', '.join(CARRY_MODES)}, got {carry!r}")
    if carry == "none":
        return replace(config, scoped_memory=False), None
    on = replace(config, scoped_memory=True)
    return on, (scope if carry == "conversation" else None)


def conversation_scope(memory: TokenMemory | None, name: str = "") -> str:
    """A scope key for one conversation on ``memory``: unique among its requests (deterministic:
    the number of requests it had seen when the conversation began), or ``name`` when given."""
    if name:
        return f"conversation:{name}"
    return f"conversation@{len(memory.requests) if memory is not None else 0}"


def user_turn(turn: Any, image: Image.Image | None = None) -> dict[str, Any]:
    """A user message from a turn: a string, or a list of content items (images inline)."""
    if isinstance(turn, str):
        content: list[dict[str, Any]] = [{"type": "text", "text": turn}]
    elif isinstance(turn, (list, tuple)):
        content = list(turn)
    else:
        raise InputError(f"a turn is a string or a list of content items, got {type(turn).__name__}")
    if image is not None:
        content = [{"type": "image", "image": image}, *content]
    return {"role": "user", "content": content}


def converse(
    target: Target,
    turns: Sequence[Any],
    *,
    image: Image.Image | str | os.PathLike[str] | None = None,
    system: str | None = None,
    method: str = "recap",
    max_new_tokens: int = 128,
    memory: TokenMemory | None = None,
    config: RecapConfig | None = None,
    carry: str = DEFAULT_CARRY,
    trace: bool = False,
    generation_config: GenerationConfig | Mapping[str, Any] | None = None,
    seed: int | None = None,
    allow_paths: bool = False,
    owner: str | None = None,
) -> ConversationRun:
    """Decode a whole conversation, turn after turn, on one memory (see the module docstring).

    turns: the user turns, each a string or a list of content items (a later turn may show
    another image: ``[{"type": "image", "image": img}, {"type": "text", "text": ...}]``).
    image: shown in the first turn (a PIL image or the caller's own path). system: an optional
    system message. seed: with a sampling config, turn t draws from a private generator seeded
    with ``seed + t`` (``recap.verification.seed.turn_seed``, as the app's follow-ups; None:
    torch's default generator, as ``generate()``). The other keywords are ``generate()``'s;
    ``allow_paths`` lets image items name files, ``owner`` keeps a carried scope to the
    conversation's owner.
    """
    if isinstance(turns, str) or not isinstance(turns, Sequence) or not turns:
        raise InputError("turns must be a non-empty list of user turns (strings or content lists)")
    if len(turns) > MAX_TURNS:
        raise InputError(f"the conversation has {len(turns)} turns; the limit is {MAX_TURNS}")
    cfg = config or RecapConfig()
    if memory is None and get_method(method).keeps_memory:
        memory = TokenMemory.for_target(target, cfg.top_k)
    turn_config, scope = carry_settings(carry, cfg, conversation_scope(memory))
    messages: list[dict[str, Any]] = [] if system is None else [{"role": "system", "content": system}]
    first = load_image(image)
    generations: list[Generation] = []
    for t, turn in enumerate(turns):
        messages.append(user_turn(turn, first if t == 0 else None))
        out = generate(
            target, messages=messages, allow_paths=allow_paths, memory_scope=scope, method=method,
            max_new_tokens=max_new_tokens, memory=memory, config=turn_config, trace=trace,
            generation_config=generation_config, seed=turn_seed(seed, t), owner=owner,
        )
        generations.append(out)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": out.text}]})
    return ConversationRun(generations, messages)
