"""A session's conversation: the turns of the Decode view, each with its decode (no Gradio).

A Run starts a conversation (its request is turn 1); a follow-up question decodes the next
turn on the conversation so far: the first turn's image, every earlier question and the
model's own answers (each answer as its trace's text, which is ``recap.generate``'s text),
then the new question, as ``recap.generate(target, messages=...)`` takes them
(``Conversation.messages``). Each turn keeps its ``Run``, so choosing an answer re-points the
views (tree, inspector, play, mask, aliasing, memory) at that turn's trace: they all read
``Session.current``.

A follow-up is bounded before anything is decoded (``check_follow_up``: ``Limits.max_turns``
and ``Limits.max_conversation_tokens``); a refusal names its bound and leaves the session as
it was. A conversation read from a file (``app.state.trace_files.read_conversation``) is for
viewing: it has no image and no model to continue on. A conversation has one image, its first
turn's: ``check_new_image`` refuses another while one is going on.

``chat_image`` copies the first turn's thumbnail (private, outside Gradio's cache) into the
session's downloads, which Gradio serves, so the chat can show it inline.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

import recap
from recap.engine.conversation import DEFAULT_CARRY, carry_settings, conversation_scope
from recap.trace.format import DecodeTrace

from ..boundary.errors import UserError
from .files import SessionFiles
from .runs import Run
from .settings import Limits

#: What a follow-up without a conversation to continue reads.
NO_CONVERSATION = "there is no conversation to continue: Run a request first (its answer is turn 1)"
#: What an image attached to a follow-up reads.
ONE_IMAGE = ("a conversation has one image, its first turn's: press New conversation, then attach the image "
             "to your question (or Run it) to ask about another image")


@dataclass
class Conversation:
    """The turns so far; ``chosen`` is the index of the turn the views show."""

    model: str  # the model source its turns decode on ("" for one read from a file)
    image: Image.Image | None  # shown in the first turn (shrunk on receipt; None: text only or a file)
    thumb: str | None  # the first turn's thumbnail (the turns view shows it)
    scope: str  # the memory scope its follow-ups are filed under (``recap.engine.conversation``)
    runs: list[Run] = field(default_factory=list)
    chosen: int = 0
    shown_image: str | None = None  # the thumbnail's copy the chat shows (``chat_image``)

    @classmethod
    def start(cls, model: str, image: Image.Image | None, run: Run) -> Conversation:
        """The conversation a Run begins: its request is turn 1."""
        return cls(model, image, run.image_path, conversation_scope(None, f"app-run-{run.run_id}"), [run])

    @classmethod
    def from_file(cls, runs: list[Run]) -> Conversation:
        """A conversation read from a file: its turns to view, none to continue."""
        return cls("", None, None, "", runs, chosen=len(runs) - 1)

    @property
    def from_a_file(self) -> bool:
        return not self.model

    @property
    def traces(self) -> list[DecodeTrace]:
        return [run.trace for run in self.runs]

    @property
    def shown(self) -> Run:
        return self.runs[self.chosen]

    def add(self, run: Run) -> None:
        """A follow-up's decode is the next turn, and the one shown."""
        self.runs.append(run)
        self.chosen = len(self.runs) - 1

    def choose(self, turn: int) -> Run:
        """Show turn ``turn`` (1 = the first); a UserError naming the turns there are."""
        if not 1 <= turn <= len(self.runs):
            raise UserError(f"there is no turn {turn}: this conversation has turns 1 to {len(self.runs)}")
        self.chosen = turn - 1
        return self.runs[self.chosen]

    def messages(self, question: str) -> list[dict[str, Any]]:
        """The conversation so far, then ``question``, as chat messages (the image inline, in the first
        turn): what the next turn is decoded on."""
        messages: list[dict[str, Any]] = []
        for i, trace in enumerate(self.traces):
            image = [{"type": "image", "image": self.image}] if i == 0 and self.image is not None else []
            messages.append({"role": "user", "content": [*image, {"type": "text", "text": trace.prompt}]})
            messages.append({"role": "assistant", "content": [{"type": "text", "text": trace.text}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": question}]})
        return messages


def chat_image(conversation: Conversation, files: SessionFiles) -> str | None:
    """The conversation's image as a file Gradio serves (the session's downloads), copied once; None
    without one (text only, a file, or a thumbnail already pruned)."""
    if conversation.shown_image and Path(conversation.shown_image).is_file():
        return conversation.shown_image
    if not conversation.thumb or not Path(conversation.thumb).is_file() or files.closed:
        return None
    # one per conversation, named after its first run: a new conversation's image is a new URL
    path = files.download(f"chat_image_run{conversation.runs[0].run_id}.png", replaces="chat_image_*")
    shutil.copyfile(conversation.thumb, path)
    conversation.shown_image = str(path)
    return conversation.shown_image


def check_new_image(conversation: Conversation | None) -> None:
    """An image may start a conversation, never join one: a UserError while one is going on."""
    if conversation is not None:
        raise UserError(ONE_IMAGE)


def turn_config(
    conversation: Conversation, config: recap.RecapConfig
) -> tuple[recap.RecapConfig, str | None]:
    """The config and memory scope a follow-up decodes with: what the library's ``converse`` carries
    from turn to turn by default (``recap.engine.conversation.DEFAULT_CARRY``)."""
    return carry_settings(DEFAULT_CARRY, config, conversation.scope)


def check_follow_up(
    conversation: Conversation | None, model: str, limits: Limits, target: recap.Target, question: str
) -> list[dict[str, Any]]:
    """The messages of the follow-up ``question``, or a UserError naming the bound it breaks (nothing
    decoded, the session as it was)."""
    if conversation is None:
        raise UserError(NO_CONVERSATION)
    if conversation.from_a_file:
        raise UserError("a conversation read from a file is for viewing: Run a request to start one you can "
                        "continue")
    if conversation.model != model:
        raise UserError("the model changed since this conversation began: Run a request to start a new one")
    turns = len(conversation.runs)
    if turns >= limits.max_turns:
        raise UserError(
            f"the conversation has {turns} turns, the most this deployment allows (max turns per "
            f"conversation: {limits.max_turns}); press New conversation to start again"
        )
    messages = conversation.messages(question)
    try:
        tokens = int(recap.prepare_inputs(target, messages=messages)["input_ids"].shape[-1])
    except (recap.InputError, ValueError) as exc:
        raise UserError(str(exc)) from None
    if tokens > limits.max_conversation_tokens:
        raise UserError(
            f"with this question the conversation is {tokens} prompt tokens, over this deployment's bound "
            f"(max conversation tokens: {limits.max_conversation_tokens}); press New conversation to start "
            "again"
        )
    return messages
