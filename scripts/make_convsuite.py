"""Write the small conversation suite of the tests: ``tests/fixtures/convsuite`` (MMSpec's layout).

``python scripts/make_convsuite.py [--out tests/fixtures/convsuite]``

A few held-out shapes scenes rendered by ``recap.shapes`` (no third-party image), each a
conversation of a few of its evaluation questions in a row (``recap.shapes.data.eval_example``),
one JSON object a line: ``id``, ``image`` (beside the file), ``turns``, ``category``, and the
ground truth as ``answers``. Deterministic: rerunning writes the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
#: (scene seed, category, question kinds in order)
SAMPLES = (
    (1_000_100, "multi-turn", ("describe", "color", "where")),
    (1_000_101, "multi-turn", ("count", "detail", "size")),
    (1_000_102, "single", ("list",)),
)


def main(argv: list[str] | None = None) -> int:
    from recap.shapes.data import eval_example
    from recap.shapes.scene import render_scene

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "convsuite"))
    out = Path(ap.parse_args(argv).out)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for seed, category, kinds in SAMPLES:
        examples = [e for e in (eval_example(seed, k) for k in kinds) if e is not None]
        name = f"scene-{seed}.png"
        render_scene(seed)[0].save(out / name, optimize=True)
        lines.append(
            json.dumps(
                {
                    "id": f"scene-{seed}",
                    "image": name,
                    "turns": [e.prompt for e in examples],
                    "category": category,
                    "answers": [e.answer for e in examples],
                }
            )
        )
    (out / "suite.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out / 'suite.jsonl'} and {len(SAMPLES)} images")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
