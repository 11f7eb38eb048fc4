"""Synthetic shape scenes and their templated questions.

A scene is 1-5 objects on a 3x3 grid, each with a shape, a colour and a size, drawn on a
plain white square of ``IMAGE_SIZE`` pixels. With Qwen2.5-VL's 14-pixel patches merged 2x2,
an 84-pixel image is 3x3 image tokens: exactly one image token per grid cell.

Everything here is a deterministic function of the seed (``render_scene``) or of the
``Scene`` (``render_scene_from``, ``Scene.questions``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from PIL import Image, ImageDraw

IMAGE_SIZE = 84  # 6x6 patches of 14 px -> 3x3 merged image tokens, one per grid cell
GRID = 3
CELL = IMAGE_SIZE // GRID
SUPERSAMPLE = 4  # drawn at 4x, then downsampled: smooth edges
BACKGROUND = (255, 255, 255)

SHAPES = ("circle", "square", "triangle", "star", "diamond")
PLURALS = {s: s + "s" for s in SHAPES}
COLORS = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 70, 230),
    "yellow": (235, 200, 0),
    "purple": (140, 40, 180),
    "orange": (255, 130, 0),
}
SIZES = ("small", "large")
SIZE_FRACTION = {"small": 0.5, "large": 0.9}  # of the cell side
# Cell index = 3 * row + col, reading order.
POSITIONS = (
    "top left", "top", "top right",
    "left", "center", "right",
    "bottom left", "bottom", "bottom right",
)  # fmt: skip
NUMBERS = ("no", "one", "two", "three", "four", "five")
KINDS = ("describe", "detail", "color", "size", "count", "where", "list")

# Seed ranges: training draws from TRAIN_SEEDS, evaluation and shipped examples from EVAL_SEEDS.
TRAIN_SEEDS = range(0, 1_000_000)
EVAL_SEEDS = range(1_000_000, 2_000_000)


def position_phrase(cell: int) -> str:
    """'at the top left', 'in the center', 'on the left', ..."""
    name = POSITIONS[cell]
    if name == "center":
        return "in the center"
    if name in ("left", "right"):
        return f"on the {name}"
    return f"at the {name}"


@dataclass(frozen=True)
class Obj:
    shape: str
    color: str
    size: str
    cell: int  # 0..8, 3 * row + col

    @property
    def row(self) -> int:
        return self.cell // GRID

    @property
    def col(self) -> int:
        return self.cell % GRID

    @property
    def position(self) -> str:
        return POSITIONS[self.cell]

    def phrase(self) -> str:
        """'large red circle'."""
        return f"{self.size} {self.color} {self.shape}"


@dataclass(frozen=True)
class Question:
    kind: str
    prompt: str
    answer: str


def _count_sentence(n: int, noun: str, plural: str) -> str:
    if n == 0:
        return f"There are no {plural}."
    if n == 1:
        return f"There is one {noun}."
    return f"There are {NUMBERS[n]} {plural}."


def _relation(a: Obj, b: Obj) -> str:
    """Where ``a`` is relative to ``b`` (``a`` comes first in reading order)."""
    vert = "above" if a.row < b.row else ("below" if a.row > b.row else "")
    horiz = "to the left of" if a.col < b.col else ("to the right of" if a.col > b.col else "")
    if vert and horiz:
        return f"{vert} and {horiz}"
    return vert or horiz


@dataclass(frozen=True)
class Scene:
    objects: tuple[Obj, ...]
    seed: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        cells = [o.cell for o in self.objects]
        if not 1 <= len(cells) <= 5 or len(set(cells)) != len(cells):
            raise ValueError("a scene has 1-5 objects in distinct cells")
        for o in self.objects:
            if o.shape not in SHAPES or o.color not in COLORS or o.size not in SIZES or not 0 <= o.cell < 9:
                raise ValueError(f"bad object {o}")
        # Keep objects in reading order (top to bottom, left to right).
        object.__setattr__(self, "objects", tuple(sorted(self.objects, key=lambda o: o.cell)))

    # ---- answers -------------------------------------------------------------------------
    def describe(self) -> str:
        parts = [_count_sentence(len(self.objects), "object", "objects")]
        for o in self.objects:
            parts.append(f"A {o.phrase()} is {position_phrase(o.cell)}.")
        return " ".join(parts)

    def detail(self) -> str:
        parts = [self.describe()]
        objs = self.objects
        for a, b in zip(objs, objs[1:]):
            parts.append(f"The {a.phrase()} is {_relation(a, b)} the {b.phrase()}.")
        return " ".join(parts)

    def left_to_right(self) -> list[Obj]:
        return sorted(self.objects, key=lambda o: (o.col, o.row))

    def questions(self) -> list[Question]:
        """Every question this scene can answer unambiguously, in a fixed order."""
        objs = self.objects
        qs = [
            Question("describe", "Describe the image.", self.describe()),
            Question("detail", "Describe the image in detail.", self.detail()),
        ]
        shape_counts = {s: sum(o.shape == s for o in objs) for s in SHAPES}
        for attr in ("color", "size"):  # one object's attribute, named by its shape (+ position)
            refs = [o.shape for o in objs if shape_counts[o.shape] == 1]
            refs += [f"{o.shape} {position_phrase(o.cell)}" for o in objs]
            values = [getattr(o, attr) for o in objs if shape_counts[o.shape] == 1]
            values += [getattr(o, attr) for o in objs]
            qs += [
                Question(attr, f"What {attr} is the {r}?", f"The {r} is {v}.") for r, v in zip(refs, values)
            ]
        qs.append(
            Question("count", "How many objects are there?", _count_sentence(len(objs), "object", "objects"))
        )
        for c in COLORS:
            n = sum(o.color == c for o in objs)
            qs.append(
                Question("count", f"How many {c} objects are there?",
                         _count_sentence(n, f"{c} object", f"{c} objects"))
            )
        for s in SHAPES:
            qs.append(
                Question("count", f"How many {PLURALS[s]} are there?",
                         _count_sentence(shape_counts[s], s, PLURALS[s]))
            )
        pair_counts: dict[tuple[str, str], int] = {}
        for o in objs:
            pair_counts[(o.color, o.shape)] = pair_counts.get((o.color, o.shape), 0) + 1
        for o in objs:
            if pair_counts[(o.color, o.shape)] == 1:
                ref = f"{o.color} {o.shape}"
                answer = f"The {ref} is {position_phrase(o.cell)}."
                qs.append(Question("where", f"Where is the {ref}?", answer))
        shapes = [f"a {o.shape}" for o in self.left_to_right()]
        listed = shapes[0] if len(shapes) == 1 else ", ".join(shapes[:-1]) + " and " + shapes[-1]
        answer = f"From left to right, there is {listed}."
        qs.append(Question("list", "List the shapes from left to right.", answer))
        return qs

    def question(self, kind: str, rng: random.Random | None = None) -> Question | None:
        """One question of ``kind`` (random with ``rng``, else the first); None if there is none."""
        qs = [q for q in self.questions() if q.kind == kind]
        if not qs:
            return None
        return rng.choice(qs) if rng is not None else qs[0]


def random_scene(seed: int) -> Scene:
    rng = random.Random(seed)
    n = rng.randint(1, 5)
    cells = rng.sample(range(GRID * GRID), n)
    objs = tuple(
        Obj(shape=rng.choice(SHAPES), color=rng.choice(list(COLORS)), size=rng.choice(SIZES), cell=c)
        for c in cells
    )
    return Scene(objs, seed=seed)


def _shape_points(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if shape == "square":
        s = r * 0.85
        return [(cx - s, cy - s), (cx + s, cy - s), (cx + s, cy + s), (cx - s, cy + s)]
    if shape == "diamond":
        return [(cx, cy - r), (cx + r * 0.8, cy), (cx, cy + r), (cx - r * 0.8, cy)]
    if shape == "triangle":
        return [(cx, cy - r), (cx + r * 0.95, cy + r * 0.8), (cx - r * 0.95, cy + r * 0.8)]
    if shape == "star":
        pts = []
        for i in range(10):
            rad = r if i % 2 == 0 else r * 0.45
            ang = -math.pi / 2 + i * math.pi / 5
            pts.append((cx + rad * math.cos(ang), cy + rad * math.sin(ang) + r * 0.08))
        return pts
    raise ValueError(shape)


def render_scene_from(scene: Scene, size: int = IMAGE_SIZE) -> Image.Image:
    """Draw ``scene`` as an RGB image of ``size`` x ``size`` pixels (deterministic)."""
    big = size * SUPERSAMPLE
    img = Image.new("RGB", (big, big), BACKGROUND)
    draw = ImageDraw.Draw(img)
    cell = big / GRID
    for o in scene.objects:
        cx, cy = (o.col + 0.5) * cell, (o.row + 0.5) * cell
        r = cell * SIZE_FRACTION[o.size] / 2
        fill = COLORS[o.color]
        if o.shape == "circle":
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
        else:
            draw.polygon(_shape_points(o.shape, cx, cy, r), fill=fill)
    return img.resize((size, size), Image.Resampling.LANCZOS)


def render_scene(seed: int) -> tuple[Image.Image, Scene]:
    """The scene for ``seed`` and its image (deterministic)."""
    scene = random_scene(seed)
    return render_scene_from(scene), scene


def blank_image(size: int = IMAGE_SIZE) -> Image.Image:
    """The plain background with no objects (the blind baseline's input)."""
    return Image.new("RGB", (size, size), BACKGROUND)
