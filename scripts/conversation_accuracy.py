"""Exact-match accuracy of the embedded shapes model on conversation turns, first against later.

``python scripts/conversation_accuracy.py [--scenes 12] [--turns 5] [--out FILE.json]``

The follow-up suite's conversations (``recap.bench.suite.build_suite("followup")``: one scene,
several questions in a row): each turn is answered greedily (``recap.converse`` with the plain
``ar`` method, which is ``generate()``'s output) with the earlier questions and the model's own
answers in its context, and compared with the scene's ground truth (``recap.shapes.data``). The
same questions asked alone, each as a first turn, are the baseline. The model was trained on
single questions only: this measures what a conversation costs it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import torch

    import recap
    from recap.bench.suite import build_suite
    from recap.shapes.evaluate import MAX_NEW_TOKENS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="write the per-turn tallies and every answer as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target = recap.load_target()
    requests = [r for r in build_suite("followup") if r.category == "conversation"]
    conversations: dict[str, list] = {}
    for r in requests:
        conversations.setdefault(r.conversation, []).append(r)
    tally: dict[str, dict[int, list[int]]] = {"conversation": {}, "alone": {}}
    answers = []
    for turns in conversations.values():
        n = max(MAX_NEW_TOKENS.get(r.kind, 32) for r in turns)
        image = turns[0].image()
        run = recap.converse(
            target,
            [r.prompt for r in turns],
            image=image,
            method="ar",
            max_new_tokens=n,
            generation_config={"do_sample": False},
        )
        for t, (r, g) in enumerate(zip(turns, run.generations)):
            alone = recap.generate(
                target, image, r.prompt, method="ar", max_new_tokens=n, generation_config={"do_sample": False}
            ).text.strip()
            for mode, got in (("conversation", g.text.strip()), ("alone", alone)):
                cell = tally[mode].setdefault(t + 1, [0, 0])
                cell[0] += got == r.answer
                cell[1] += 1
            answers.append(
                {
                    "conversation": r.conversation,
                    "turn": t + 1,
                    "kind": r.kind,
                    "prompt": r.prompt,
                    "expected": r.answer,
                    "in_conversation": g.text.strip(),
                    "alone": alone,
                }
            )
    print("| turn | asked in the conversation | asked alone (a first turn) |")
    print("|---:|---:|---:|")
    for t in sorted(tally["conversation"]):
        c, a = tally["conversation"][t], tally["alone"][t]
        print(f"| {t} | {c[0]}/{c[1]} ({c[0] / c[1]:.0%}) | {a[0]}/{a[1]} ({a[0] / a[1]:.0%}) |")
    later = [sum(tally["conversation"][t][i] for t in tally["conversation"] if t > 1) for i in (0, 1)]
    first = tally["conversation"][1]
    print(
        f"\nfirst turns {first[0]}/{first[1]}, later turns {later[0]}/{later[1]} ({later[0] / later[1]:.0%})"
    )
    if args.out:
        Path(args.out).write_text(json.dumps({"tally": tally, "answers": answers}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
