"""Train the shapes VLM from scratch: ``python -m recap.shapes.train --out DIR``.

With only ``--out`` (and the execution options ``--threads``, ``--device``, ``--workers``,
``--save-every``) this runs the whole recipe, ``RECIPE``: stage 1 from fresh weights with this
module's defaults (14,000 steps), then three short stages that continue it (``--init``) at
lower learning rates, with mixes weighted towards size, count and detail questions (stages 1-4,
about 1 h 50 min on the idle 2-core CPU), then the conversation stage (5), which adds
conversations of 2-4 questions of any kind: the five make the shipped assets/shapes-vlm (about
2 h 15 min in all). Earlier stages are saved beside DIR (``DIR-stage1`` ... ``DIR-stage4``) and a
stage that is already complete there is skipped, so an interrupted run restarts at the beginning
of the stage it was in; their curves and arguments are copied into ``DIR/stages/``.
``--from-stage N --init MODEL`` runs stages N on, the first continuing MODEL (``--from-stage 5
--init OUT-stage4``: the conversation stage on the stage-4 model, which is ``assets/shapes-vlm``
at commit aaf6c29). ``--single-stage`` trains one stage with the options given (any option that
changes the recipe needs it).

Fixed seeds, AdamW with linear warmup and cosine decay, loss on the answer tokens and each
answer's <|im_end|> only. Scenes come from the training seed range (see
scene.TRAIN_SEEDS); evaluation uses a disjoint range. A checkpoint (model, processor,
training curve) is saved every ``--save-every`` steps and at the end of each stage, so an
interrupted run leaves something usable.

Batches hold one group of kinds (describe, detail, or the short answers; data.BATCH_GROUPS,
``--short-mix``; and with ``conversation=`` in ``--group-mix``, conversations); a short-answer
example asks up to ``--turns`` questions about its image, a conversation 2 to ``--turns`` of
any kind, as a multi-turn chat rendered by the chat template whose first turn is exactly the
single-question format (the image in it), later turns text only.

Auxiliary vision loss (training only, not part of the shipped model): a throwaway linear
head reads each merged image token (one token = one grid cell at 84 px) and predicts that
cell's shape, colour and size (or empty), and its row and column. Without it the tiny model
learnt the templates first and turned the image tokens into one large constant vector that
the language model ignored (blind). The row and column make a token's position part of its
value, which an attention head can copy into "at the top left"; M-RoPE alone tells the
language model where a token sits only through query-key rotations. A small penalty on the
image features' mean vector keeps that constant from drowning the content after RMSNorm.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from recap.shapes.data import BATCH_GROUPS
from recap.shapes.model import MROPE_SECTION, ROPE_THETA
from recap.shapes.trainer import batch_groups, train

__all__ = ["RECIPE", "batch_groups", "is_complete", "main", "parser", "run_recipe", "stage_args", "train"]


# The shipped model's recipe. Stage 1 is the parser's defaults; each later stage continues the
# previous one (--init) with these options changed. Stage 1 learns the language, the image and
# where things are, but size stays near chance (56.5%) and colour and count at 88%; the short
# stages at lower learning rates fix them (docs/shapes-model.md, "What it took").
RECIPE: tuple[dict[str, object], ...] = (
    {},
    {
        "seed": 1, "steps": 2500, "warmup": 100, "lr": 5e-4, "count_present": 0.25,
        "group_mix": "describe=0.25,detail=0.05,short=0.7",
        "short_mix": "color=0.25,size=0.3,where=0.1,count=0.25,list=0.1",
    },
    {
        "seed": 2, "steps": 700, "warmup": 50, "lr": 3e-4, "count_present": 0.4,
        "group_mix": "describe=0.2,detail=0.1,short=0.7",
        "short_mix": "color=0.2,size=0.15,where=0.1,count=0.45,list=0.1",
    },
    {
        "seed": 3, "steps": 1000, "warmup": 50, "lr": 2e-4, "count_present": 0.5,
        "group_mix": "describe=0.15,detail=0.25,short=0.6",
        "short_mix": "color=0.15,size=0.1,where=0.1,count=0.55,list=0.1",
    },
    {
        "seed": 4, "steps": 1200, "warmup": 50, "lr": 2e-4, "count_present": 0.5,
        "group_mix": "describe=0.1,detail=0.3,short=0.25,conversation=0.35",
        "short_mix": "color=0.15,size=0.1,where=0.15,count=0.5,list=0.1",
    },
)  # fmt: skip
# Stage 5 (the conversation stage, docs/shapes-model.md "Conversations") continues the model of
# stage 4 at stage 4's learning rate with 35% of its batches conversations of 2-4 questions of
# any kind (the earlier turns answered right, the loss on every answer), the rest single
# questions (30% detail: a 300-step stage with 15% lost detail, 90% -> 79%) and short-kind
# chats, so that single-question accuracy holds.
# Options that change how a run executes, not what it learns; allowed with the recipe.
EXECUTION_OPTIONS = frozenset(
    {"out", "threads", "device", "workers", "save_every", "single_stage", "from_stage"}
)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--single-stage",
        action="store_true",
        help="train one stage with the options given, instead of the shipped recipe (RECIPE)",
    )
    ap.add_argument(
        "--from-stage",
        type=int,
        default=1,
        help="run the recipe from this stage on, the first of them continuing --init (e.g. --from-stage 5 "
        "--init OUT-stage4: the conversation stage on the stage-4 model)",
    )
    ap.add_argument("--steps", type=int, default=14000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", type=Path, help="continue from a saved model instead of a fresh one")
    ap.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads (default 2, this machine's cores); use 1 when other work shares a 2-core CPU",
    )
    ap.add_argument("--device", default="cpu", help="torch device (the shipped model was trained on cpu)")
    ap.add_argument(
        "--workers", type=int, default=0, help="background data processes (changes the example stream)"
    )
    ap.add_argument("--save-every", type=int, default=250)
    ap.add_argument("--aux-weight", type=float, default=1.0, help="auxiliary per-cell vision loss")
    ap.add_argument("--position-weight", type=float, default=1.0, help="auxiliary per-cell row/column loss")
    ap.add_argument(
        "--short-mix",
        default=",".join(f"{k}={v}" for k, v in BATCH_GROUPS[-1][2].items()),
        help="weights of the short-answer kinds within their batches (default %(default)s)",
    )
    ap.add_argument(
        "--group-mix",
        default=",".join(f"{name}={w}" for name, w, _ in BATCH_GROUPS),
        help="shares of batches that are describe, detail or short-answer, and optionally (conversation=) "
        "conversations of 2 to --turns questions of any kind (default %(default)s)",
    )
    ap.add_argument(
        "--count-present",
        type=float,
        default=0.0,
        help="share of count questions about present colours/shapes",
    )
    ap.add_argument(
        "--turns", type=int, default=4, help="up to this many questions per image in short-answer batches"
    )
    ap.add_argument("--layers", type=int, default=4, help="language-model layers")
    ap.add_argument("--rope-theta", type=float, default=ROPE_THETA)
    ap.add_argument(
        "--mrope-section", type=int, nargs=3, default=MROPE_SECTION, help="temporal, height, width"
    )
    ap.add_argument(
        "--split-plurals",
        action=argparse.BooleanOptionalAction,
        default=True,
        help='tokenize "circles" as circle + ##s (default; --no-split-plurals: whole-word plurals)',
    )
    ap.add_argument("--mean-penalty", type=float, default=0.05, help="penalty on the image features' mean")
    return ap


def stage_args(base: argparse.Namespace, recipe=RECIPE) -> list[argparse.Namespace]:
    """One namespace per stage of ``recipe``: the base options, the stage's changes, its
    output folder (``OUT-stageN``, the last one ``base.out`` itself) and ``init`` = the
    previous stage."""
    out, stages = base.out, []
    for i, changes in enumerate(recipe, start=1):
        folder = out if i == len(recipe) else out.with_name(f"{out.name}-stage{i}")
        init = stages[-1].out if stages else None
        stages.append(
            argparse.Namespace(**{**vars(base), **changes, "out": folder, "init": init, "single_stage": True})
        )
    return stages


def is_complete(args: argparse.Namespace) -> bool:
    """Whether ``args.out`` already holds the finished run of exactly these arguments."""
    try:
        saved = json.loads((args.out / "training_args.json").read_text())
        steps = len(json.loads((args.out / "training_curve.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return False
    mine = json.loads(json.dumps(vars(args), default=str))
    same = {k: v for k, v in saved.items() if k not in EXECUTION_OPTIONS} == {
        k: v for k, v in mine.items() if k not in EXECUTION_OPTIONS
    }
    return same and steps == args.steps and (args.out / "model.safetensors").exists()


def run_recipe(base: argparse.Namespace, recipe=RECIPE, first: int = 1) -> None:
    """Train every stage of ``recipe`` from stage ``first`` on in turn (skipping finished ones;
    stage ``first`` > 1 continues ``base.init``), then copy the earlier stages' curves and
    arguments into ``base.out/stages/stageN/`` (those before ``first`` from ``base.init``'s
    own ``stages/`` folder and curve, where it has them)."""
    stages = stage_args(base, recipe)
    if first > 1:
        stages[first - 1].init = base.init
    for i, args in enumerate(stages, start=1):
        if i < first:
            continue
        if is_complete(args):
            print(f"stage {i}/{len(stages)}: already trained in {args.out}, skipping")
            continue
        print(f"stage {i}/{len(stages)}: {args.steps} steps -> {args.out}")
        train(args)
    names = ("training_curve.json", "training_curve.png", "training_args.json")
    for i, args in enumerate(stages[:-1], start=1):
        # a stage before `first` was trained elsewhere: base.init is stage first-1 itself
        # and keeps the ones before it in its own stages/ folder
        src = args.out if i >= first else base.init if i == first - 1 else base.init / "stages" / f"stage{i}"
        if i < first and not all((src / name).exists() for name in names):
            continue
        dest = base.out / "stages" / f"stage{i}"
        dest.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(src / name, dest / name)


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        batch_groups(args)
    except ValueError as e:
        ap.error(str(e))
    if args.single_stage:
        train(args)
        return
    if not 1 <= args.from_stage <= len(RECIPE):
        ap.error(f"--from-stage takes a stage of the recipe, 1 to {len(RECIPE)}; got {args.from_stage}")
    if (args.from_stage > 1) != (args.init is not None):
        ap.error(
            "--from-stage N > 1 continues a trained model: give it with --init DIR (and --init only with it)"
        )
    defaults = vars(ap.parse_args(["--out", str(args.out)]))
    allowed = EXECUTION_OPTIONS | ({"init"} if args.from_stage > 1 else set())
    changed = sorted(k for k, v in vars(args).items() if k not in allowed and v != defaults[k])
    if changed:
        ap.error(
            "the shipped recipe fixes "
            + ", ".join("--" + k.replace("_", "-") for k in changed)
            + "; add --single-stage to train one stage with your own settings"
        )
    run_recipe(args, first=args.from_stage)


if __name__ == "__main__":
    main()
