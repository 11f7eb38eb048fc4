"""cProfile of RECAP decoding over the quick bench suite (where does the time go?).

    python scripts/profile_recap.py [--model DIR] [--method recap] [--suite quick] [--top 30] [--cost-aware]

Runs the suite once to warm the persistent memory (not profiled), then once more, timing the
target's forward itself, and prints per decode pass the host work (everything but the forward:
draft, verify less the forward, update, and the rest of the loop); then profiles a third pass
under cProfile and prints the engine's phase split (prefill / draft / verify / update), the
drafted nodes per pass, and the top functions by own time and by cumulative time.
``--cost-aware`` grows cost-aware trees (``RecapConfig.cost_aware``; the budget a cap). The
kernels are compiled before anything is timed (``recap.drafting.warm``); run with
``NUMBA_DISABLE_JIT=1`` to profile them as plain Python. cProfile inflates Python calls: the host
split is the uninstrumented measure.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import recap  # noqa: E402
from recap.bench import build_suite  # noqa: E402
from recap.drafting import warm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--method", default="recap", choices=recap.METHODS)
    ap.add_argument(
        "--cost-aware", action="store_true", help="cost-aware trees (RecapConfig.cost_aware=True)"
    )
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--budget", default=None)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", default=None, help="also write the raw profile here (.prof)")
    args = ap.parse_args()
    profile(args)


def profile(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    budget = (
        recap.RecapConfig().budget
        if not args.budget
        else args.budget
        if args.budget == "auto"
        else int(args.budget)
    )
    cfg = recap.RecapConfig(budget=budget, cost_aware=args.cost_aware, scoped_memory=True)  # as the bench
    target = recap.load_target(args.model)
    warm.start().join()
    reqs = build_suite(args.suite)
    images = {r.seed: r.image() for r in reqs}
    memory = recap.TokenMemory.for_target(target, cfg.top_k)

    def run_all() -> dict[str, float]:
        tot = {
            "prefill": 0.0,
            "draft": 0.0,
            "verify": 0.0,
            "update": 0.0,
            "total": 0.0,
            "tokens": 0,
            "steps": 0,
            "nodes": 0,
        }
        for r in reqs:
            for rec in recap.iter_steps(
                target,
                images[r.seed],
                r.prompt,
                method=args.method,
                memory=memory,
                config=cfg,
                max_new_tokens=args.max_new_tokens,
            ):
                tot["nodes"] += rec.tree_size
            for k in ("prefill", "draft", "verify", "update", "total"):
                tot[k] += rec.timings[k]
            tot["tokens"] += len(rec.token_ids)
            tot["steps"] += rec.step
        return tot

    run_all()  # warm the memory and the kernels
    host_split(target, reqs, images, args.method, memory, cfg, args.max_new_tokens)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    tot = run_all()
    prof.disable()
    wall = time.perf_counter() - t0
    decode = tot["draft"] + tot["verify"] + tot["update"]
    other = tot["total"] - tot["prefill"] - decode
    print(
        f"{args.method}: {tot['tokens']} tokens in {tot['steps']} passes "
        f"(MAT {tot['tokens'] / tot['steps']:.2f}), "
        f"wall {wall:.2f}s under cProfile"
    )
    for k in ("prefill", "draft", "verify", "update"):
        print(f"  {k:8s} {tot[k]:7.3f}s  {tot[k] / tot['total']:6.1%} of total")
    print(f"  {'inputs':8s} {other:7.3f}s  {other / tot['total']:6.1%} of total (image + processor + loop)")
    print(
        f"  draft+update share of decode: {(tot['draft'] + tot['update']) / decode:.1%}; "
        f"{tot['nodes'] / tot['steps']:.1f} drafted nodes per pass"
    )
    for k in ("draft", "verify", "update"):
        print(f"  {k:8s} {tot[k] / tot['steps'] * 1e3:6.3f} ms per pass")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(args.top)
        print(f"\n--- top {args.top} by {key} ---")
        print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:12000])
    if args.out:
        prof.dump_stats(args.out)


def host_split(
    target: recap.Target,
    reqs: list,
    images: dict,
    method: str,
    memory: recap.TokenMemory,
    cfg: recap.RecapConfig,
    max_new: int,
) -> None:
    """One uninstrumented pass (the forward timed): per decode pass, where the host time goes."""
    inner = target.model.forward
    fwd = [0.0]

    def forward(*a: object, **k: object) -> object:
        t0 = time.perf_counter()
        out = inner(*a, **k)
        fwd[0] += time.perf_counter() - t0
        return out

    tot = {"draft": 0.0, "verify": 0.0, "update": 0.0, "gap": 0.0, "forward": 0.0}
    passes = 0
    target.model.forward = forward  # type: ignore[method-assign]
    try:
        for r in reqs:
            last = None
            for rec in recap.iter_steps(
                target,
                images[r.seed],
                r.prompt,
                method=method,
                memory=memory,
                config=cfg,
                max_new_tokens=max_new,
            ):
                now = time.perf_counter()
                if last is not None:  # the first pass's gap holds the prefill
                    passes += 1
                    for k in ("draft", "verify", "update"):
                        tot[k] += rec.step_timings[k]
                    tot["gap"] += now - last
                    tot["forward"] += fwd[0]
                fwd[0] = 0.0
                last = time.perf_counter()
    finally:
        target.model.forward = inner  # type: ignore[method-assign]
    how = "plain Python" if os.environ.get("NUMBA_DISABLE_JIT") == "1" else "kernels"
    per = {k: v / max(passes, 1) * 1e6 for k, v in tot.items()}
    rest = per["gap"] - per["draft"] - per["verify"] - per["update"]
    print(
        f"host work per decode pass ({passes} passes, {how}): "
        f"{per['gap'] - per['forward']:.0f} us = draft {per['draft']:.0f} + verify less the forward "
        f"{per['verify'] - per['forward']:.0f} + update {per['update']:.0f} + rest {rest:.0f}; "
        f"the forward {per['forward']:.0f} us"
    )


if __name__ == "__main__":
    main()
