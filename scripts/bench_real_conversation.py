"""What carrying a conversation's contextual rows costs at real sizes: one conversation, each carry mode.

    python scripts/bench_real_conversation.py [--real-size smolvlm-256m] [--turns 3] [--max-new-tokens 24]

Builds (once, in ``--dir``) the random-weight checkpoint at a real model's full sizes that the
real-size benchmark uses (``recap.bench.realsize``), then decodes one conversation (the
procedural photograph, ``--turns`` questions) with ``recap.converse`` under every carry mode
(``recap.engine.conversation.CARRY_MODES``) in this one process, side by side, ``--repeats``
rounds with the modes' order rotated each round, RECAP at the benchmark's 24 fixed nodes
(``recap.bench.suite.FIXED_CONFIG``; no timing enters a tree), a fresh memory per conversation.
Random weights answer noise, so the drafts are rarely accepted: this measures what a carry
costs the host (scope lookups and writes beside the target's passes), not what it gains (the
follow-up suite on the embedded model does: docs/benchmark.md "Conversations"). Prints per mode
the median seconds per turn and the passes, and checks that every mode's tokens are the same
(lossless among themselves; each equals ``generate()``, tests/test_conversation.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUESTIONS = ("Describe this picture.", "What is in the sky?", "What color is the water?",
             "Is it day or night?")


def main(argv: list[str] | None = None) -> int:
    import torch

    import recap
    from recap.bench.realsize import REAL_SIZES, build_checkpoint, photo_image
    from recap.bench.suite import FIXED_CONFIG
    from recap.engine.conversation import CARRY_MODES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-size", default="smolvlm-256m", choices=sorted(REAL_SIZES))
    ap.add_argument("--dir", type=Path, default=Path("bench-real"), help="where the checkpoint is built once")
    ap.add_argument("--turns", type=int, default=3, choices=range(1, len(QUESTIONS) + 1))
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = build_checkpoint(args.real_size, args.dir / args.real_size)
    target = recap.load_target(str(model_dir))
    image, turns = photo_image(), list(QUESTIONS[: args.turns])

    def converse(carry: str) -> tuple[float, recap.ConversationRun]:
        memory = recap.TokenMemory.for_target(target, FIXED_CONFIG.top_k)
        t0 = time.perf_counter()
        run = recap.converse(target, turns, image=image, memory=memory, config=FIXED_CONFIG, carry=carry,
                             max_new_tokens=args.max_new_tokens)
        return time.perf_counter() - t0, run

    t0 = time.perf_counter()
    converse("none")  # warm-up: lazy imports and kernel compiles, not timed
    print(f"warm-up conversation: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    seconds: dict[str, list[float]] = {mode: [] for mode in CARRY_MODES}
    runs: dict[str, recap.ConversationRun] = {}
    for r in range(args.repeats):
        for mode in CARRY_MODES[r % len(CARRY_MODES):] + CARRY_MODES[: r % len(CARRY_MODES)]:
            elapsed, runs[mode] = converse(mode)
            seconds[mode].append(elapsed / len(turns))
            print(f"round {r + 1}, carry={mode}: {elapsed:.1f} s", file=sys.stderr, flush=True)
    tokens = {mode: [g.token_ids for g in run.generations] for mode, run in runs.items()}
    same = all(t == tokens["none"] for t in tokens.values())
    print(f"{args.real_size}, {len(turns)} turns of {args.max_new_tokens} new tokens, {args.repeats} rounds, "
          f"{args.threads} thread(s), RECAP at 24 fixed nodes")
    print("| carry | s / turn (median) | against none | passes | MAT |")
    print("|---|---:|---:|---:|---:|")
    base = statistics.median(seconds["none"])
    for mode in CARRY_MODES:
        run = runs[mode]
        passes = sum(g.decode_steps for g in run.generations)
        made = sum(len(g.token_ids) for g in run.generations)
        med = statistics.median(seconds[mode])
        print(f"| {mode} | {med:.3f} | {med / base:.3f}x | {passes} | {made / passes:.2f} |")
    print("every mode's tokens identical:", same)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
