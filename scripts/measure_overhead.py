"""Per-pass host work (everything but the target's forward) of every engine method, by tree size.

    python scripts/measure_overhead.py [--model DIR] [--budgets 24] [--requests 6] [--methods ar pld tr recap]
                                      [--repeats 3] [--cost-aware]

Runs each method on held-out shape scenes with a node budget (fixed-size trees unless
--cost-aware), one persistent memory per method and run, warmed over the requests, alternating
methods ``--repeats`` times (the kernels compiled first: ``recap.drafting.warm``). It times the
target's forward itself (``model.forward``) inside each verify and prints per decode pass the
median of:

* draft: the drafter's ``draft`` (and the tree check);
* verify host: the verify step less the forward (tree mask, ids, positions, the rule's picks);
* update: acceptance, KV compaction, top-k, the memory writes;
* rest: the loop between steps (the step record, the generator);
* host: all of it, i.e. the pass's wall time less the forward; then the forward and MAT.

Without --model it uses the embedded shapes model when present, else a tiny random Qwen2.5-VL.
Medians over thousands of passes are much less sensitive to a shared machine than wall times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import recap  # noqa: E402
from recap.drafting import warm  # noqa: E402
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


class ForwardClock:
    """Times the target's own forward (``model.forward``), per call, while ``on``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seconds = 0.0
        self.on = False
        inner = model.forward

        def forward(*args: object, **kwargs: object) -> object:
            if not self.on:
                return inner(*args, **kwargs)
            t0 = time.perf_counter()
            out = inner(*args, **kwargs)
            self.seconds += time.perf_counter() - t0
            return out

        model.forward = forward  # type: ignore[method-assign]


def run(
    target: recap.Target, clock: ForwardClock, reqs: list, method: str, cfg: recap.RecapConfig, max_new: int
) -> dict[str, list[float]]:
    """One pass over the requests; per decode pass (the first of each request excluded: its gap
    holds the prefill) the seconds of each part."""
    memory = recap.TokenMemory.for_target(target, cfg.top_k) if method in recap.MEMORY_METHODS else None
    parts: dict[str, list[float]] = {
        k: [] for k in ("draft", "verify host", "update", "rest", "host", "forward")
    }
    nodes: list[int] = []
    tokens = steps = 0
    for img, prompt in reqs:
        it = recap.iter_steps(
            target, img, prompt, method=method, max_new_tokens=max_new, memory=memory, config=cfg
        )
        last = None
        while True:
            clock.seconds, clock.on = 0.0, last is not None
            try:
                rec = next(it)
            except StopIteration:
                break
            now = time.perf_counter()
            clock.on = False
            steps += 1
            tokens += len(rec.emitted)
            if last is not None:
                st = rec.step_timings
                fwd = clock.seconds
                gap = now - last
                parts["draft"].append(st["draft"])
                parts["verify host"].append(st["verify"] - fwd)
                parts["update"].append(st["update"])
                parts["rest"].append(gap - st["draft"] - st["verify"] - st["update"])
                parts["host"].append(gap - fwd)
                parts["forward"].append(fwd)
                nodes.append(rec.tree_size)
            last = time.perf_counter()
    parts["nodes"] = [float(statistics.median(nodes))] if nodes else [0.0]
    parts["mat"] = [tokens / steps]
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None)
    parser.add_argument("--budgets", type=int, nargs="+", default=[24])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--methods", nargs="+", default=["ar", "pld", "tr", "recap"], choices=recap.METHODS)
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternating runs per method: medians over all"
    )
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--cost-aware", action="store_true", help="RECAP grows cost-aware trees (budget = cap)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = args.model
    if model is None and not (DEFAULT_MODEL_DIR / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        import tiny_models

        model = str(tiny_models.build("qwen2_5_vl", Path(tempfile.mkdtemp()) / "tiny"))
        print("(embedded model absent: using a tiny random Qwen2.5-VL)")
    target = recap.load_target(model)
    warm.start().join()  # no compilation inside a timed pass
    clock = ForwardClock(target.model)
    reqs = requests(args.requests)
    print(f"model: {target.name}  threads: {args.threads}  requests: {len(reqs)}  repeats: {args.repeats}")
    print("per decode pass, median microseconds; host = everything but the target's forward")
    cols = ("draft", "verify host", "update", "rest", "host", "forward")
    print(f"{'method':7} {'budget':>6} {'nodes':>5} " + " ".join(f"{c:>11}" for c in cols) + f" {'MAT':>5}")
    for budget in args.budgets:
        cfg = recap.RecapConfig(budget=budget, cost_aware=args.cost_aware, scoped_memory=True)  # as the bench
        runs: dict[str, dict[str, list[float]]] = {}
        for _ in range(args.repeats):
            for method in args.methods:
                part = run(target, clock, reqs, method, cfg, args.max_new_tokens)
                into = runs.setdefault(method, {k: [] for k in part})
                for k, v in part.items():
                    into[k].extend(v)
        for method in args.methods:
            r = runs[method]
            us = " ".join(f"{statistics.median(r[c]) * 1e6:11.1f}" for c in cols)
            print(
                f"{method:7} {budget:6d} {statistics.median(r['nodes']):5.0f} {us} "
                f"{statistics.median(r['mat']):5.2f}"
            )


if __name__ == "__main__":
    main()
