"""Write the example gallery: ``python -m recap.shapes.examples [--out assets/examples]``.

Scenes come from held-out seeds (scene.EVAL_SEEDS), plus one constructed pair (A/B) with
the same shapes, sizes and positions but different colours: the answers share their wording
except for the colour words, so a 1-token memory warmed on A aliases on B.
Images are saved at the model's native size (84x84), so the processor uses them unchanged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from recap.shapes.scene import EVAL_SEEDS, Obj, Scene, render_scene, render_scene_from

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "assets" / "examples"

DESCRIBE = "Describe the image."
DETAIL = "Describe the image in detail."

PAIR_A = Scene(
    (
        Obj("circle", "red", "large", 0),
        Obj("star", "blue", "small", 2),
        Obj("square", "green", "large", 4),
        Obj("triangle", "yellow", "small", 6),
        Obj("diamond", "purple", "large", 8),
    )
)
PAIR_B = Scene(
    (
        Obj("circle", "orange", "large", 0),
        Obj("star", "green", "small", 2),
        Obj("square", "purple", "large", 4),
        Obj("triangle", "red", "small", 6),
        Obj("diamond", "blue", "large", 8),
    )
)


def gallery() -> list[tuple[str, object, dict]]:
    """(file name, PIL image, entry) for every example."""
    items: list[tuple[str, object, dict]] = []
    by_n: dict[int, list[int]] = {}
    for seed in range(EVAL_SEEDS.start + 500, EVAL_SEEDS.start + 700):
        by_n.setdefault(len(render_scene(seed)[1].objects), []).append(seed)
    plan = [
        (by_n[5][0], DETAIL, "five objects, long answer with relations: many recycled phrases"),
        (by_n[4][0], DETAIL, "four objects, long answer"),
        (by_n[5][1], DESCRIBE, "five objects"),
        (by_n[4][1], DESCRIBE, "four objects"),
        (by_n[3][0], DESCRIBE, "three objects"),
        (by_n[3][1], DETAIL, "three objects, long answer"),
        (by_n[2][0], DESCRIBE, "two objects"),
        (by_n[5][2], "color", "short answer: colour of one shape"),
        (by_n[3][3], "size", "short answer: size of one shape"),
        (by_n[4][2], "where", "short answer: position of one object"),
        (by_n[3][2], "list", "short answer: shapes from left to right"),
        (by_n[4][3], "count", "short answer: a count"),
    ]
    for seed, prompt, note in plan:
        img, scene = render_scene(seed)
        if prompt in (DESCRIBE, DETAIL):
            q = next(q for q in scene.questions() if q.prompt == prompt)
        else:
            q = [q for q in scene.questions() if q.kind == prompt][-1]
        name = f"scene_{seed}.png"
        items.append((name, img, {"file": name, "prompt": q.prompt, "expected": q.answer, "kind": q.kind,
                                  "seed": seed, "note": note}))  # fmt: skip
    for tag, scene in (("A", PAIR_A), ("B", PAIR_B)):
        name = f"pair_{tag}.png"
        note = (
            "colour pair: same shapes, sizes and positions as pair_B, other colours. Run A then B: "
            "a 1-token memory filled on A predicts A's colours on B (aliasing)."
            if tag == "A"
            else "colour pair: run after pair_A. Same wording as A except the colour words, so token-keyed "
            "predictions recycled from A are wrong exactly at the colour slots."
        )
        q = next(q for q in scene.questions() if q.prompt == DETAIL)
        meta = {"file": name, "prompt": q.prompt, "expected": q.answer, "kind": q.kind, "pair": tag,
                "note": note}
        items.append((name, render_scene_from(scene), meta))
    return items


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, img, entry in gallery():
        img.save(args.out / name)
        entries.append(entry)
    (args.out / "examples.json").write_text(json.dumps(entries, indent=1) + "\n")
    print(f"wrote {len(entries)} examples to {args.out}")


if __name__ == "__main__":
    main()
