"""Per-step cost of drafting + memory update next to verification, by tree size.

    python scripts/measure_overhead.py [--model DIR] [--budgets 32 64] [--requests 6] [--cost-aware]

Runs every memory method of the registry (TR, RECAP) on held-out shape scenes with a
node budget (fixed-size trees unless --cost-aware), one persistent memory per method
warmed over the requests, and prints per decode step the median draft, update and
verify times, (draft + update) / verify and the drafted nodes. Without --model it uses
the embedded shapes model when present, else a tiny random Qwen2.5-VL built on the fly.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import recap  # noqa: E402
from recap.models.target import DEFAULT_MODEL_DIR  # noqa: E402


def requests(n: int) -> list[tuple[object, str]]:
    try:
        from recap.shapes import render_scene

        out = []
        for i in range(n):
            img, scene = render_scene(2_000_000 + i)
            qs = scene.questions()
            q = [q for q in qs if q.kind in ("describe", "detail")][i % 2 if len(qs) > 1 else 0]
            out.append((img, q.prompt))
        return out
    except Exception:  # noqa: BLE001 - the shapes package is optional here
        from PIL import Image

        return [(Image.new("RGB", (112, 112), (40 * i, 100, 200)), "describe the image .") for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--budgets", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cost-aware", action="store_true", help="RECAP grows cost-aware trees (budget = cap)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = args.model
    if model is None and not (DEFAULT_MODEL_DIR / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        import tiny_models

        model = str(tiny_models.build("qwen2_5_vl", Path(tempfile.mkdtemp()) / "tiny"))
        print("(embedded model absent: using a tiny random Qwen2.5-VL)")
    target = recap.load_target(model)
    reqs = requests(args.requests)
    print(f"model: {target.name}  threads: {args.threads}")
    print(f"{'method':7} {'budget':>6} {'nodes':>6} {'draft ms':>9} {'update ms':>10} {'verify ms':>10} {'(d+u)/v':>8} {'MAT':>5}")
    for budget in args.budgets:
        for method in recap.MEMORY_METHODS:
            cfg = recap.RecapConfig(budget=budget, cost_aware=args.cost_aware)
            memory = recap.TokenMemory.for_target(target, cfg.top_k)
            draft, update, verify, nodes = [], [], [], []
            tokens = steps = 0
            for img, prompt in reqs:
                for rec in recap.iter_steps(
                    target, img, prompt, method=method, max_new_tokens=args.max_new_tokens, memory=memory, config=cfg
                ):
                    draft.append(rec.step_timings["draft"])
                    update.append(rec.step_timings["update"])
                    verify.append(rec.step_timings["verify"])
                    nodes.append(rec.tree_size)
                    steps += 1
                    tokens += len(rec.emitted)
            d, u, v = (statistics.median(x) * 1e3 for x in (draft, update, verify))
            print(
                f"{method:7} {budget:6d} {statistics.median(nodes):6.0f} {d:9.3f} {u:10.3f} {v:10.3f} "
                f"{(d + u) / v:8.2f} {tokens / steps:5.2f}"
            )


if __name__ == "__main__":
    main()
