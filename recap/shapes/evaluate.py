"""Exact-match accuracy of the shapes VLM on held-out scenes, with the image and blind.

``python -m recap.shapes.evaluate [--model assets/shapes-vlm] [--seeds 1000000:1000200]``

For every seed and every question kind, one fixed question (``data.eval_example``) is asked
and the greedy answer compared with the expected text. The blind baseline asks the same
questions with the image replaced by the blank background.

``--turns N`` evaluates conversations instead: per seed, 2 to N questions of different kinds
about the scene (``data.eval_conversation``), each decoded greedily with the earlier questions
and the model's own earlier answers in its context (the image in the first user turn), and
reports exact-match accuracy per kind on first turns against second and later turns.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from recap.core.assets import SHAPES_VLM
from recap.shapes.data import eval_conversation, eval_example, generation_batch
from recap.shapes.scene import EVAL_SEEDS, KINDS, random_scene

DEFAULT_MODEL = SHAPES_VLM
DEFAULT_SEEDS = f"{EVAL_SEEDS.start}:{EVAL_SEEDS.start + 200}"
MAX_NEW_TOKENS = {"describe": 72, "detail": 136}


def load(model_dir: str | Path, device: str = "cpu"):
    from transformers import Qwen2_5_VLForConditionalGeneration

    from recap.models.processors import Qwen2_5_VLImageProcessor

    processor = Qwen2_5_VLImageProcessor.from_pretrained(str(model_dir))
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(model_dir)).to(device).eval()
    return model, processor


@torch.no_grad()
def answer(model, processor, examples, max_new_tokens: int = 32, histories=None) -> list[str]:
    """Greedy answers for a batch of examples (left-padded batched ``generate``), each after its
    ``histories`` entry's (question, answer) turns when given."""
    batch = {k: v.to(model.device) for k, v in generation_batch(processor, examples, histories).items()}
    out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens)
    new = out[:, batch["input_ids"].shape[1] :]
    return [processor.tokenizer.decode(row, skip_special_tokens=True).strip() for row in new]


def parse_seeds(text: str) -> range:
    a, b = text.split(":")
    return range(int(a), int(b))


def evaluate(model, processor, seeds: range, blind: bool = False, batch_size: int = 50, kinds=KINDS) -> dict:
    """{kind: {"correct": c, "total": n, "accuracy": c / n, "failures": [...]}}."""
    results = {}
    for kind in kinds:
        exs = [e for e in (eval_example(s, kind, blind=blind) for s in seeds) if e is not None]
        correct, failures = 0, []
        by_objects: dict[int, list[int]] = {}  # objects in the scene -> [correct, total]
        for i in range(0, len(exs), batch_size):
            chunk = exs[i : i + batch_size]
            for e, got in zip(chunk, answer(model, processor, chunk, MAX_NEW_TOKENS.get(kind, 32))):
                tally = by_objects.setdefault(len(random_scene(e.seed).objects), [0, 0])
                tally[1] += 1
                if got == e.answer:
                    correct += 1
                    tally[0] += 1
                elif len(failures) < 5:
                    failures.append({"seed": e.seed, "prompt": e.prompt, "expected": e.answer, "got": got})
        results[kind] = {
            "correct": correct,
            "total": len(exs),
            "accuracy": correct / max(1, len(exs)),
            "by_objects": {n: by_objects[n] for n in sorted(by_objects)},
            "failures": failures,
        }
    return results


def evaluate_conversations(model, processor, seeds: range, max_turns: int = 4, batch_size: int = 50) -> dict:
    """{"first" | "later": {kind: {"correct", "total", "accuracy", "failures"}}, "by_turn": {t: [c, n]}}.

    Turn t of every conversation is decoded after its turns 1..t-1 with the model's own answers
    (not the expected ones), as a conversation with the model goes; batched per (turn, kind).
    """
    talks = [eval_conversation(s, max_turns) for s in seeds]
    said: list[list[tuple[str, str]]] = [[] for _ in talks]  # (question, the model's answer) so far
    out: dict = {"first": {}, "later": {}, "by_turn": {}}
    for t in range(max(len(c) for c in talks)):
        for kind in KINDS:
            todo = [i for i, c in enumerate(talks) if len(c) > t and c[t].kind == kind]
            for j in range(0, len(todo), batch_size):
                chunk = todo[j : j + batch_size]
                exs = [talks[i][t] for i in chunk]
                got = answer(model, processor, exs, MAX_NEW_TOKENS.get(kind, 32), [said[i] for i in chunk])
                for i, e, g in zip(chunk, exs, got):
                    said[i].append((e.prompt, g))
                    cell = out["first" if t == 0 else "later"].setdefault(
                        kind, {"correct": 0, "total": 0, "failures": []}
                    )
                    turn = out["by_turn"].setdefault(t + 1, [0, 0])
                    cell["total"] += 1
                    turn[1] += 1
                    if g == e.answer:
                        cell["correct"] += 1
                        turn[0] += 1
                    elif len(cell["failures"]) < 5:
                        history = said[i][:-1]
                        cell["failures"].append(
                            {
                                "seed": e.seed,
                                "turn": t + 1,
                                "history": history,
                                "prompt": e.prompt,
                                "expected": e.answer,
                                "got": g,
                            }
                        )
    for part in ("first", "later"):
        for cell in out[part].values():
            cell["accuracy"] = cell["correct"] / max(1, cell["total"])
    return out


def print_conversations(results: dict) -> None:
    print("| kind | first turns | second and later turns |\n|---|---:|---:|")
    rows = [k for k in KINDS if k in results["first"] or k in results["later"]]
    for k in rows + ["all"]:
        cells = []
        for part in ("first", "later"):
            got = results[part].values() if k == "all" else [results[part].get(k, {"correct": 0, "total": 0})]
            c, n = sum(x["correct"] for x in got), sum(x["total"] for x in got)
            cells.append(f"{c}/{n} ({c / n:.1%})" if n else "-")
        print(f"| {k} | {cells[0]} | {cells[1]} |")
    print("\nby turn: " + ", ".join(f"turn {t} {c}/{n}" for t, (c, n) in sorted(results["by_turn"].items())))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--seeds", default=DEFAULT_SEEDS, help="held-out seed range A:B (default %(default)s)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--no-blind", action="store_true", help="skip the blind baseline")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads; 1 is much faster on a shared 2-core CPU"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--show-failures", action="store_true")
    ap.add_argument(
        "--by-objects", action="store_true", help="also break accuracy down by the number of objects"
    )
    ap.add_argument(
        "--turns",
        type=int,
        help="evaluate conversations of 2 to TURNS questions per scene instead (first vs later turns)",
    )
    args = ap.parse_args(argv)
    if args.turns is not None and args.turns < 2:
        ap.error(f"--turns takes the most questions per conversation, at least 2; got {args.turns}")

    torch.set_num_threads(args.threads)
    seeds = parse_seeds(args.seeds)
    kinds = tuple(args.kinds.split(","))
    model, processor = load(args.model, args.device)
    t0 = time.time()
    if args.turns is not None:
        talk = evaluate_conversations(model, processor, seeds, args.turns)
        print(
            f"model {args.model}, seeds {seeds.start}:{seeds.stop}, "
            f"conversations of 2-{args.turns} questions, {time.time() - t0:.0f} s"
        )
        print_conversations(talk)
        if args.show_failures:
            for part in ("first", "later"):
                for k, cell in talk[part].items():
                    for f in cell["failures"]:
                        print(part, k, json.dumps(f))
        if args.json:
            args.json.write_text(
                json.dumps(
                    {"model": args.model, "seeds": args.seeds, "turns": args.turns, "conversations": talk},
                    indent=1,
                )
            )
        return
    with_image = evaluate(model, processor, seeds, kinds=kinds)
    blind = None if args.no_blind else evaluate(model, processor, seeds, blind=True, kinds=kinds)
    print(f"model {args.model}, seeds {seeds.start}:{seeds.stop}, {time.time() - t0:.0f} s")
    print("| kind | n | with image | blind |\n|---|---|---|---|")
    for k in kinds:
        b = f"{blind[k]['accuracy']:.1%}" if blind else "-"
        print(f"| {k} | {with_image[k]['total']} | {with_image[k]['accuracy']:.1%} | {b} |")
    if args.by_objects:
        counts = sorted({n for k in kinds for n in with_image[k]["by_objects"]})
        print("\nwith image, by objects in the scene (correct / asked)")
        print("| kind | " + " | ".join(f"{n} objects" for n in counts) + " |\n|---|" + "---|" * len(counts))
        for k in kinds:
            cells = [with_image[k]["by_objects"].get(n) for n in counts]
            print(
                f"| {k} | "
                + " | ".join(f"{c}/{t} ({c / t:.0%})" if t else "-" for c, t in (x or (0, 0) for x in cells))
                + " |"
            )
    if args.show_failures:
        for k in kinds:
            for f in with_image[k]["failures"]:
                print(k, json.dumps(f))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"model": args.model, "seeds": args.seeds, "image": with_image, "blind": blind}, indent=1
            )
        )


if __name__ == "__main__":
    main()
