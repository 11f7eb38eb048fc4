"""Train the shapes VLM from scratch: ``python -m recap.shapes.train --out DIR``.

With only ``--out`` (and the execution options ``--threads``, ``--device``, ``--workers``,
``--save-every``) this runs the shipped model's whole recipe, ``RECIPE``: stage 1 from fresh
weights with this module's defaults (14,000 steps), then three short stages that continue it
(``--init``) at lower learning rates, with mixes weighted towards size, count and detail
questions. About 1 h 50 min on the idle 2-core CPU. Earlier stages are saved beside DIR
(``DIR-stage1`` ... ``DIR-stage3``) and a stage that is already complete there is skipped, so an
interrupted run restarts at the beginning of the stage it was in; their curves and arguments
are copied into ``DIR/stages/``. ``--single-stage`` trains one stage with the options given
(any option that changes the recipe needs it).

Fixed seeds, AdamW with linear warmup and cosine decay, loss on the answer tokens and each
answer's <|im_end|> only. Scenes come from the training seed range (see
scene.TRAIN_SEEDS); evaluation uses a disjoint range. A checkpoint (model, processor,
training curve) is saved every ``--save-every`` steps and at the end of each stage, so an
interrupted run leaves something usable.

Batches hold one group of kinds (describe, detail, or the short answers; data.BATCH_GROUPS,
``--short-mix``); a short-answer example asks up to ``--turns`` questions about its image,
as a multi-turn chat whose first turn is exactly the single-question format.

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
import math
import random
import shutil
import time
from pathlib import Path

import torch
from tqdm import tqdm

from recap.shapes.data import BATCH_GROUPS, sample_training_examples, training_batch
from recap.shapes.model import MROPE_SECTION, ROPE_THETA, build_model
from recap.shapes.scene import COLORS, SHAPES, SIZES, TRAIN_SEEDS
from recap.shapes.tokenizer import build_processor


def make_batch(processor, rng: random.Random, args: argparse.Namespace, groups) -> tuple[dict, torch.Tensor, list[str]]:
    """(model inputs with labels, per-cell auxiliary targets (images * 9, 5), kinds in the batch)."""
    examples = sample_training_examples(rng, args.batch_size, TRAIN_SEEDS, args.turns, groups, args.count_present)
    cells = torch.tensor([(*c, i // 3, i % 3) for e in examples for i, c in enumerate(e.cells)])
    return training_batch(processor, examples), cells, sorted({e.kind for e in examples})


class _WorkerBatches(torch.utils.data.IterableDataset):
    """Endless batches drawn in a DataLoader worker, each worker with its own seeded stream."""

    def __init__(self, processor, args: argparse.Namespace, groups) -> None:
        self.processor, self.args, self.groups = processor, args, groups

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rng = random.Random(f"{self.args.seed}/{info.id if info else 0}")
        while True:
            yield make_batch(self.processor, rng, self.args, self.groups)


def batch_stream(processor, args: argparse.Namespace, groups):
    """Training batches: drawn inline from one seeded stream (``--workers 0``, the reproducible
    recipe), or by ``--workers`` background processes (faster on a GPU; a different stream)."""
    if args.workers == 0:
        rng = random.Random(args.seed)
        while True:
            yield make_batch(processor, rng, args, groups)
    loader = torch.utils.data.DataLoader(
        _WorkerBatches(processor, args, groups), batch_size=None, num_workers=args.workers, prefetch_factor=4
    )
    yield from loader


def lr_at(step: int, steps: int, peak: float, warmup: int, floor: float = 0.05) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def plot_curve(curve: dict, path: Path, width: int = 720, height: int = 400) -> None:
    """A PNG of the training loss (log scale) drawn with PIL."""
    from PIL import Image, ImageDraw

    steps, losses = curve["step"], curve["loss_ema"]
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    left, right, top, bottom = 60, width - 20, 30, height - 40
    d.rectangle([left, top, right, bottom], outline="black")
    d.text((left, 8), "training loss (EMA, log scale) vs step", fill="black")
    if len(steps) >= 2:
        lo = math.log10(max(1e-4, min(losses)))
        hi = math.log10(max(losses))
        hi = hi if hi > lo else lo + 1
        x = lambda s: left + (right - left) * s / max(steps[-1], 1)  # noqa: E731
        y = lambda v: bottom - (bottom - top) * (math.log10(max(v, 1e-4)) - lo) / (hi - lo)  # noqa: E731
        for e in range(math.floor(lo), math.ceil(hi) + 1):
            for m in (1, 2, 5):
                v = m * 10**e
                if lo <= math.log10(v) <= hi:
                    d.line([left, y(v), right, y(v)], fill=(225, 225, 225))
                    d.text((5, y(v) - 6), f"{v:g}", fill="black")
        d.line([(x(s), y(v)) for s, v in zip(steps, losses)], fill=(30, 70, 230), width=2)
        d.text((right - 60, bottom + 8), f"{steps[-1]}", fill="black")
    d.text((left, bottom + 8), "0", fill="black")
    img.save(path)


def save(model, processor, out: Path, curve: dict, args: argparse.Namespace) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / "training_curve.json").write_text(json.dumps(curve))
    (out / "training_args.json").write_text(json.dumps(vars(args), indent=1, default=str))
    plot_curve(curve, out / "training_curve.png")


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
)  # fmt: skip
# Options that change how a run executes, not what it learns; allowed with the recipe.
EXECUTION_OPTIONS = frozenset({"out", "threads", "device", "workers", "save_every", "single_stage"})


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--single-stage",
        action="store_true",
        help="train one stage with the options given, instead of the shipped recipe (RECIPE)",
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
    ap.add_argument("--workers", type=int, default=0, help="background data processes (changes the example stream)")
    ap.add_argument("--save-every", type=int, default=250)
    ap.add_argument("--aux-weight", type=float, default=1.0, help="auxiliary per-cell vision loss")
    ap.add_argument("--position-weight", type=float, default=1.0, help="auxiliary per-cell row/column loss")
    ap.add_argument(
        "--short-mix",
        default=",".join(f"{k}={v}" for k, v in BATCH_GROUPS[-1][1].items()),
        help="weights of the short-answer kinds within their batches (default %(default)s)",
    )
    ap.add_argument(
        "--group-mix",
        default="describe={},detail={},short={}".format(*(w for w, _ in BATCH_GROUPS)),
        help="shares of batches that are describe, detail or short-answer (default %(default)s)",
    )
    ap.add_argument("--count-present", type=float, default=0.0, help="share of count questions about present colours/shapes")
    ap.add_argument("--turns", type=int, default=4, help="up to this many questions per image in short-answer batches")
    ap.add_argument("--layers", type=int, default=4, help="language-model layers")
    ap.add_argument("--rope-theta", type=float, default=ROPE_THETA)
    ap.add_argument("--mrope-section", type=int, nargs=3, default=MROPE_SECTION, help="temporal, height, width")
    ap.add_argument(
        "--split-plurals",
        action=argparse.BooleanOptionalAction,
        default=True,
        help='tokenize "circles" as circle + ##s (default; --no-split-plurals: whole-word plurals)',
    )
    ap.add_argument("--mean-penalty", type=float, default=0.05, help="penalty on the image features' mean")
    return ap


def parse_mix(text: str, option: str) -> dict[str, float]:
    """``"a=0.2,b=0.8"`` -> ``{"a": 0.2, "b": 0.8}``; a clear ValueError otherwise."""
    try:
        mix = {k.strip(): float(v) for k, v in (item.split("=") for item in text.split(","))}
    except ValueError:
        raise ValueError(f"{option} takes name=weight pairs separated by commas, got {text!r}") from None
    if min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"{option} weights must be >= 0 with a positive sum, got {text!r}")
    return mix


def batch_groups(args: argparse.Namespace):
    """The (weight, {kind: weight}) batch groups that ``--group-mix`` and ``--short-mix`` describe."""
    short = parse_mix(args.short_mix, "--short-mix")
    if not set(short) <= set(BATCH_GROUPS[-1][1]):
        raise ValueError(f"--short-mix kinds must be among {sorted(BATCH_GROUPS[-1][1])}, got {args.short_mix!r}")
    shares = parse_mix(args.group_mix, "--group-mix")
    if set(shares) != {"describe", "detail", "short"}:
        raise ValueError(f"--group-mix needs describe=, detail= and short= weights, got {args.group_mix!r}")
    return ((shares["describe"], BATCH_GROUPS[0][1]), (shares["detail"], BATCH_GROUPS[1][1]), (shares["short"], short))


def stage_args(base: argparse.Namespace, recipe=RECIPE) -> list[argparse.Namespace]:
    """One namespace per stage of ``recipe``: the base options, the stage's changes, its
    output folder (``OUT-stageN``, the last one ``base.out`` itself) and ``init`` = the
    previous stage."""
    out, stages = base.out, []
    for i, changes in enumerate(recipe, start=1):
        folder = out if i == len(recipe) else out.with_name(f"{out.name}-stage{i}")
        init = stages[-1].out if stages else None
        stages.append(argparse.Namespace(**{**vars(base), **changes, "out": folder, "init": init, "single_stage": True}))
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


def run_recipe(base: argparse.Namespace, recipe=RECIPE) -> None:
    """Train every stage of ``recipe`` in turn (skipping finished ones), then copy the earlier
    stages' curves and arguments into ``base.out/stages/stageN/``."""
    stages = stage_args(base, recipe)
    for i, args in enumerate(stages, start=1):
        if is_complete(args):
            print(f"stage {i}/{len(stages)}: already trained in {args.out}, skipping")
            continue
        print(f"stage {i}/{len(stages)}: {args.steps} steps -> {args.out}")
        train(args)
    for i, args in enumerate(stages[:-1], start=1):
        dest = base.out / "stages" / f"stage{i}"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("training_curve.json", "training_curve.png", "training_args.json"):
            shutil.copyfile(args.out / name, dest / name)


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
    defaults = vars(ap.parse_args(["--out", str(args.out)]))
    changed = sorted(k for k, v in vars(args).items() if k not in EXECUTION_OPTIONS and v != defaults[k])
    if changed:
        ap.error(
            "the shipped recipe fixes " + ", ".join("--" + k.replace("_", "-") for k in changed)
            + "; add --single-stage to train one stage with your own settings"
        )
    run_recipe(args)


def train(args: argparse.Namespace) -> None:
    """One training run (one stage): fresh weights, or ``args.init``'s, for ``args.steps`` steps."""
    groups = batch_groups(args)
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    processor = build_processor(args.split_plurals)
    model = build_model(
        processor.tokenizer, seed=args.seed, layers=args.layers, rope_theta=args.rope_theta, mrope_section=args.mrope_section
    )
    if args.init is not None:
        from transformers import Qwen2_5_VLForConditionalGeneration

        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(args.init))
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params:,}")
    dim = model.config.vision_config.out_hidden_size
    splits = [len(SHAPES) + 1, len(COLORS) + 1, len(SIZES) + 1, 3, 3]  # shape, colour, size, row, column
    aux_head = torch.nn.Linear(dim, sum(splits))
    model.to(args.device)
    aux_head.to(args.device)
    captured: dict = {}
    model.model.visual.register_forward_hook(lambda mod, inp, out: captured.__setitem__("f", out.pooler_output))
    params = list(model.named_parameters()) + [("aux." + n, p) for n, p in aux_head.named_parameters()]
    decay = [p for n, p in params if p.ndim >= 2]
    no_decay = [p for n, p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
    )
    stream = batch_stream(processor, args, groups)
    curve: dict = {"step": [], "loss": [], "loss_ema": [], "aux": [], "aux_acc": [], "lr": [], "kinds": [], "seconds": []}
    ema = None
    t0 = time.time()
    bar = tqdm(range(args.steps), desc="train", dynamic_ncols=True)
    for step in bar:
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        batch, cells, kinds = next(stream)
        batch = {k: v.to(args.device) for k, v in batch.items()}
        cells = cells.to(args.device)  # (images * 9, 5): shape, colour, size, row, column
        loss = model(**batch).loss
        feats = captured.pop("f")  # (images * 9, dim), cells in reading order
        assert feats.shape[0] == cells.shape[0], "auxiliary loss expects 84-px images (9 tokens each)"
        logits = aux_head(feats).split(splits, dim=-1)
        ce = [torch.nn.functional.cross_entropy(lg, cells[:, i]) for i, lg in enumerate(logits)]
        aux = (sum(ce[:3]) + args.position_weight * sum(ce[3:])) / 3
        aux_acc = torch.stack([lg.argmax(-1) == cells[:, i] for i, lg in enumerate(logits)]).all(0).float().mean()
        total = loss + args.aux_weight * aux + args.mean_penalty * feats.mean(0).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        v = loss.item()
        ema = v if ema is None else 0.98 * ema + 0.02 * v
        curve["step"].append(step + 1)
        curve["loss"].append(round(v, 5))
        curve["loss_ema"].append(round(ema, 5))
        curve["aux"].append(round(aux.item(), 4))
        curve["aux_acc"].append(round(aux_acc.item(), 4))
        curve["lr"].append(lr)
        curve["kinds"].append(kinds)
        curve["seconds"].append(round(time.time() - t0, 1))
        bar.set_postfix(loss=f"{v:.4f}", ema=f"{ema:.4f}", aux=f"{aux.item():.3f}", cell_acc=f"{aux_acc.item():.2f}")
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            save(model, processor, args.out, curve, args)
    print(f"done: {args.steps} steps in {time.time() - t0:.0f} s, final loss EMA {ema:.4f}")


if __name__ == "__main__":
    main()
