"""Training and evaluation batches: (image, prompt, answer) examples -> model inputs."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import torch
from PIL import Image

from recap.shapes.scene import (
    COLORS,
    SHAPES,
    SIZES,
    Scene,
    blank_image,
    random_scene,
    render_scene,
    render_scene_from,
)
from recap.shapes.tokenizer import IM_END, IM_START, chat_messages

# Training batches are drawn from one group at a time (similar lengths pad less):
# (share of batches, {kind: weight within the group}).
BATCH_GROUPS = (
    (0.15, {"describe": 1.0}),
    (0.05, {"detail": 1.0}),
    (0.80, {"color": 0.2, "size": 0.2, "where": 0.3, "count": 0.2, "list": 0.1}),
)


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


@lru_cache(maxsize=4096)
def prompt_text(processor, prompt: str, with_image: bool = True) -> str:
    return processor.apply_chat_template(chat_messages(prompt, with_image), add_generation_prompt=True, tokenize=False)


def training_batch(processor, examples: list[Example]) -> dict[str, torch.Tensor]:
    """Right-padded inputs with ``labels`` masked to the answer tokens and the final <|im_end|>."""
    texts = [
        prompt_text(processor, e.prompt)
        + e.answer
        + IM_END
        + "".join(f"\n{IM_START}user\n{q}{IM_END}\n{IM_START}assistant\n{a}{IM_END}" for q, a in e.more)
        for e in examples
    ]
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


def generation_batch(processor, examples: list[Example]) -> dict[str, torch.Tensor]:
    """Left-padded prompts for batched ``generate``."""
    processor.tokenizer.padding_side = "left"
    texts = [prompt_text(processor, e.prompt) for e in examples]
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
    """One batch from one kind group; short-kind examples get up to ``turns`` questions per image.

    ``count_present``: the share of count questions drawn from those with a non-zero answer
    (0: uniform over all count questions, most of which ask about absent colours / shapes).
    """
    kinds = rng.choices([g for _, g in groups], weights=[w for w, _ in groups])[0]
    turns = turns if len(kinds) > 1 else 1

    def ask(scene: Scene, kind: str):
        q = scene.question(kind, rng)
        if kind == "count" and count_present > 0 and rng.random() < count_present:
            q = present_count(scene, rng)
        return q

    out: list[Example] = []
    while len(out) < batch_size:
        kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        seed = rng.randrange(seeds.start, seeds.stop)
        scene = random_scene(seed)
        q = ask(scene, kind)
        if q is None:
            continue
        more = []
        for _ in range(rng.randrange(turns) if turns > 1 else 0):
            extra = ask(scene, rng.choices(list(kinds), weights=list(kinds.values()))[0])
            if extra is not None:
                more.append((extra.prompt, extra.answer))
        out.append(Example(seed, kind, q.prompt, q.answer, render_scene_from(scene), cell_labels(scene), tuple(more)))
    return out
