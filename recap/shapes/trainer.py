"""The shapes VLM's training loop: one stage (``train(args)``) and the batches it draws.

``recap.shapes.train`` is the command and the staged recipe around it; its module docstring
describes the losses (the answers' tokens, and the throwaway auxiliary vision head).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from recap.shapes.curve import plot_curve
from recap.shapes.data import (
    BATCH_GROUPS,
    CONVERSATION,
    CONVERSATION_KINDS,
    sample_training_examples,
    training_batch,
)
from recap.shapes.model import build_model
from recap.shapes.scene import COLORS, SHAPES, SIZES, TRAIN_SEEDS
from recap.shapes.tokenizer import build_processor


def make_batch(
    processor, rng: random.Random, args: argparse.Namespace, groups
) -> tuple[dict, torch.Tensor, list[str]]:
    """(model inputs with labels, per-cell auxiliary targets (images * 9, 5), kinds in the batch)."""
    examples = sample_training_examples(
        rng, args.batch_size, TRAIN_SEEDS, args.turns, groups, args.count_present
    )
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


def save(model, processor, out: Path, curve: dict, args: argparse.Namespace) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / "training_curve.json").write_text(json.dumps(curve))
    (out / "training_args.json").write_text(json.dumps(vars(args), indent=1, default=str))
    plot_curve(curve, out / "training_curve.png")


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
    """The (name, weight, {kind: weight}) batch groups that ``--group-mix`` and ``--short-mix`` describe."""
    short = parse_mix(args.short_mix, "--short-mix")
    if not set(short) <= set(BATCH_GROUPS[-1][2]):
        raise ValueError(
            f"--short-mix kinds must be among {sorted(BATCH_GROUPS[-1][2])}, got {args.short_mix!r}"
        )
    shares = parse_mix(args.group_mix, "--group-mix")
    if not {"describe", "detail", "short"} <= set(shares) <= {"describe", "detail", "short", CONVERSATION}:
        raise ValueError(
            f"--group-mix needs describe=, detail= and short= weights (and optionally {CONVERSATION}=), "
            f"got {args.group_mix!r}"
        )
    groups = [(name, shares[name], kinds) for name, _, kinds in BATCH_GROUPS[:2]] + [
        ("short", shares["short"], short)
    ]
    if shares.get(CONVERSATION, 0) > 0:
        groups.append((CONVERSATION, shares[CONVERSATION], CONVERSATION_KINDS))
    return tuple(groups)


def train(args: argparse.Namespace) -> None:
    """One training run (one stage): fresh weights, or ``args.init``'s, for ``args.steps`` steps."""
    groups = batch_groups(args)
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    processor = build_processor(args.split_plurals)
    model = build_model(
        processor.tokenizer,
        seed=args.seed,
        layers=args.layers,
        rope_theta=args.rope_theta,
        mrope_section=args.mrope_section,
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
    model.model.visual.register_forward_hook(
        lambda mod, inp, out: captured.__setitem__("f", out.pooler_output)
    )
    params = list(model.named_parameters()) + [("aux." + n, p) for n, p in aux_head.named_parameters()]
    decay = [p for n, p in params if p.ndim >= 2]
    no_decay = [p for n, p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
    )
    stream = batch_stream(processor, args, groups)
    curve: dict = {
        "step": [],
        "loss": [],
        "loss_ema": [],
        "aux": [],
        "aux_acc": [],
        "lr": [],
        "kinds": [],
        "seconds": [],
    }
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
        aux_acc = (
            torch.stack([lg.argmax(-1) == cells[:, i] for i, lg in enumerate(logits)]).all(0).float().mean()
        )
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
        bar.set_postfix(
            loss=f"{v:.4f}", ema=f"{ema:.4f}", aux=f"{aux.item():.3f}", cell_acc=f"{aux_acc.item():.2f}"
        )
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            save(model, processor, args.out, curve, args)
    print(f"done: {args.steps} steps in {time.time() - t0:.0f} s, final loss EMA {ema:.4f}")
