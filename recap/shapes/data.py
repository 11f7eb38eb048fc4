"""Training and evaluation batches: (image, prompt, answer) examples -> model inputs."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import torch
from PIL import Image

from recap.shapes.scene import (
    COLORS,
    KINDS,
    SHAPES,
    SIZES,
    Scene,
    blank_image,
    random_scene,
    render_scene,
    render_scene_from,
)
from recap.shapes.tokenizer import IM_END, IM_START, chat_messages, conversation_messages

# Training batches are drawn from one group at a time (similar lengths pad less):
# (name, share of batches, {kind: weight within the group}). The short kinds' examples ask up
# to ``turns`` questions of those kinds; a "conversation" group (off in BATCH_GROUPS, used by
# the conversation stage of train.RECIPE) asks 2 to ``turns`` questions of any kind.
BATCH_GROUPS = (
    ("describe", 0.15, {"describe": 1.0}),
    ("detail", 0.05, {"detail": 1.0}),
    ("short", 0.80, {"color": 0.2, "size": 0.2, "where": 0.3, "count": 0.2, "list": 0.1}),
)
CONVERSATION = "conversation"
# Kinds of a conversation's turns: every kind, the short ones (a follow-up is mostly a short
# question) twice as often as a description.
CONVERSATION_KINDS = {"describe": 0.5, "detail": 0.5, "color": 1.0, "size": 1.0, "count": 1.0, "where": 1.0,
                      "list": 1.0}  # fmt: skip


@dataclass(frozen=True)
class Example:
    seed: int
    kind: str
    prompt: str
    answer: str
    image: Image.Image
    cells: tuple[tuple[int, int, int], ...] = ()  # per grid cell: (shape, colour, size) class, 0 = empty
    more: tuple[tuple[str, str], ...] = ()  # further (prompt, answer) turns about the same image (training)


def cell_labels(scene: Scene | None) -> tuple[tuple[int, int, int], ...]:
    """Per grid cell (reading order) the class of its shape, colour and size; 0 means empty.

    With 84-px images each merged image token is one cell, so these label the image tokens
    (used by the auxiliary loss in train.py).
    """
    labels = [(0, 0, 0)] * 9
    for o in scene.objects if scene is not None else ():
        labels[o.cell] = (SHAPES.index(o.shape) + 1, list(COLORS).index(o.color) + 1, SIZES.index(o.size) + 1)
    return tuple(labels)


def example(seed: int, kind: str, rng: random.Random | None = None, blind: bool = False) -> Example | None:
    """A question of ``kind`` about scene ``seed`` (random choice with ``rng``, else the first)."""
    img, scene = render_scene(seed)
    q = scene.question(kind, rng)
    if q is None:
        return None
    if blind:
        return Example(seed, kind, q.prompt, q.answer, blank_image(), cell_labels(None))
    return Example(seed, kind, q.prompt, q.answer, img, cell_labels(scene))


def eval_example(seed: int, kind: str, blind: bool = False) -> Example | None:
    """The fixed evaluation question of ``kind`` for ``seed``."""
    return example(seed, kind, random.Random(seed * 7 + len(kind)), blind=blind)


def eval_conversation(seed: int, max_turns: int = 4) -> list[Example]:
    """A fixed conversation about scene ``seed``: 2 to ``max_turns`` questions of different kinds
    in a random order, each the scene's evaluation question of its kind (``eval_example``), so
    a conversation's first turn is a question of the single-question evaluation."""
    rng = random.Random(seed * 13 + max_turns)
    asked = [e for e in (eval_example(seed, k) for k in KINDS) if e is not None]
    return rng.sample(asked, min(len(asked), rng.randint(2, max(2, max_turns))))


@lru_cache(maxsize=4096)
def prompt_text(
    processor, prompt: str, with_image: bool = True, history: tuple[tuple[str, str], ...] = ()
) -> str:
    """The rendered prompt of a question (after ``history``'s turns), ready for the answer."""
    messages = chat_messages(prompt, with_image, history)
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def conversation_text(processor, e: Example) -> str:
    """An example's whole chat, every turn answered, rendered by the processor's chat template
    (multi-turn), so training sees exactly what the library renders at decode time."""
    messages = conversation_messages(((e.prompt, e.answer), *e.more))
    return processor.apply_chat_template(messages, tokenize=False)


def training_batch(processor, examples: list[Example]) -> dict[str, torch.Tensor]:
    """Right-padded inputs with ``labels`` masked to every assistant answer and its <|im_end|>."""
    texts = [conversation_text(processor, e) for e in examples]
    processor.tokenizer.padding_side = "right"
    batch = processor(text=texts, images=[e.image for e in examples], padding=True, return_tensors="pt")
    ids = batch["input_ids"]
    tok = processor.tokenizer.convert_tokens_to_ids
    im_start, im_end, assistant = tok(IM_START), tok(IM_END), tok("assistant")
    labels = torch.full_like(ids, -100)
    for i in range(ids.shape[0]):
        # Every assistant answer, from after "<|im_start|> assistant" through its <|im_end|>.
        row = ids[i].tolist()
        for j in range(len(row) - 1):
            if row[j] == im_start and row[j + 1] == assistant:
                end = row.index(im_end, j + 2)
                labels[i, j + 2 : end + 1] = ids[i, j + 2 : end + 1]
    labels[batch["attention_mask"] == 0] = -100
    batch["labels"] = labels
    return dict(batch)


def generation_batch(processor, examples: list[Example], histories=None) -> dict[str, torch.Tensor]:
    """Left-padded prompts for batched ``generate``; ``histories[i]``: the (question, answer)
    turns before example i's question (a conversation), none by default."""
    processor.tokenizer.padding_side = "left"
    histories = histories or [()] * len(examples)
    texts = [prompt_text(processor, e.prompt, True, tuple(h)) for e, h in zip(examples, histories)]
    batch = processor(text=texts, images=[e.image for e in examples], padding=True, return_tensors="pt")
    processor.tokenizer.padding_side = "right"
    return dict(batch)


def present_count(scene: Scene, rng: random.Random):
    """A count question whose answer is not "no" (there is always one: the total)."""
    return rng.choice([q for q in scene.questions() if q.kind == "count" and " no " not in q.answer])


def sample_training_examples(
    rng: random.Random,
    batch_size: int,
    seeds: range,
    turns: int = 1,
    groups=BATCH_GROUPS,
    count_present: float = 0.0,
) -> list[Example]:
    """One batch from one group (``groups``: (name, share, {kind: weight})).

    A short-kind example asks 1 to ``turns`` questions of the short kinds about its image, a
    ``CONVERSATION`` example 2 to ``turns`` questions of any kind (a prompt is not repeated);
    describe and detail examples ask one. ``count_present``: the share of count questions drawn
    from those with a non-zero answer (0: uniform over all count questions, most of which ask
    about absent colours / shapes).
    """
    name, _, kinds = rng.choices(groups, weights=[w for _, w, _ in groups])[0]
    least, most = (2, max(2, turns)) if name == CONVERSATION else (1, turns if len(kinds) > 1 else 1)

    def ask(scene: Scene, kind: str):
        q = scene.question(kind, rng)
        if kind == "count" and count_present > 0 and rng.random() < count_present:
            q = present_count(scene, rng)
        return q

    def pick() -> str:
        return rng.choices(list(kinds), weights=list(kinds.values()))[0]

    out: list[Example] = []
    while len(out) < batch_size:
        kind = pick()
        seed = rng.randrange(seeds.start, seeds.stop)
        scene = random_scene(seed)
        q = ask(scene, kind)
        if q is None:
            continue
        more: list[tuple[str, str]] = []
        if name == CONVERSATION:
            n = rng.randint(least, most) - 1
            for _ in range(4 * n):  # a few tries: some kinds have no question, prompts must differ
                extra = ask(scene, pick()) if len(more) < n else None
                if extra is not None and extra.prompt not in {q.prompt, *(p for p, _ in more)}:
                    more.append((extra.prompt, extra.answer))
        else:
            for _ in range(rng.randrange(most) if most > 1 else 0):
                extra = ask(scene, pick())
                if extra is not None:
                    more.append((extra.prompt, extra.answer))
        image = render_scene_from(scene)
        out.append(Example(seed, kind, q.prompt, q.answer, image, cell_labels(scene), tuple(more)))
    return out
