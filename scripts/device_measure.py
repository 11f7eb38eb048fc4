"""The device check's measurements (``scripts/device_check.sh``), each runnable on a CPU with tiny sizes
(``--dry-run``) so that they are tested before a GPU ever runs them:

* ``precision``: the reduced-precision guarantee on the device: every tiny family of
  ``tests/tiny_models.py`` x every method, loaded in bf16, each output checked token by token with
  ``recap.verification.ties.check_greedy`` (every token the model's greedy choice for its own prefix
  within the tie tolerance). Writes ``precision-<dtype>.json``; exits 1 on any error (a tie is not one).
* ``speed``: the default's speed against ``generate()`` at Qwen2.5-VL-7B's text sizes (random weights
  built on the device, ``scripts/verify_curve_7b.py``'s builder): greedy ``model.generate()``, ``ar``
  and ``recap`` under the default ``RecapConfig`` on one prompt of random token ids, interleaved,
  timed with the device synchronised; recap's output against generate()'s (identical, or each
  difference a tie). Writes ``speed-7b.json``; exits 1 when an output is not lossless.

    python scripts/device_measure.py precision --out OUT            # CUDA, bf16
    python scripts/device_measure.py speed --out OUT                # CUDA, bf16, real sizes
    python scripts/device_measure.py speed --dry-run --out /tmp/x   # CPU, tiny sizes (the smoke test)

Random weights say nothing about a real checkpoint's acceptance: ``speed`` measures the engine's cost
at real sizes (its MAT is what these weights give), not the speedup on real weights.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

import recap  # noqa: E402
from recap.verification.ties import check_greedy, compare_with_reference, dtype_name  # noqa: E402

#: Qwen2.5-VL-7B-Instruct's text sizes (scripts/verify_curve_7b.py) and the dry run's.
REAL_DIMS = {"layers": 28, "hidden": 3584, "heads": 28, "kv_heads": 4, "intermediate": 18944, "vocab": 152064}
TINY_DIMS = {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 128, "vocab": 2000}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _image(seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (70, 90, 3), dtype=np.uint8)  # 90 x 70
    return Image.fromarray(pixels)


def _greedy(target: recap.Target, inputs: dict[str, Any], n: int) -> list[int]:
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=n)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


# --------------------------------------------------------------------------- precision


def precision(args: argparse.Namespace) -> dict[str, Any]:
    """Every family x method x request in ``args.dtype`` on ``args.device``: check_greedy's verdicts."""
    import tiny_models

    families = ("qwen2_vl", "llava") if args.dry_run else tiny_models.FAMILIES
    requests = 1 if args.dry_run else 2
    n = 8 if args.dry_run else 24
    dtype = getattr(torch, args.dtype)
    words = list(tiny_models.WORDS)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            directory = tiny_models.build(family, Path(tmp) / family)
            target = recap.load_target(directory, device=args.device, dtype=dtype, attn_implementation="sdpa")
            for r in range(requests):
                image, prompt = _image(r), " ".join(words[3 * r: 3 * r + 6])
                inputs = recap.prepare_inputs(target, image, prompt)
                reference = _greedy(target, inputs, n)
                for method in recap.METHODS:
                    tokens = recap.generate(target, image, prompt, method=method, max_new_tokens=n).token_ids
                    check = check_greedy(target, inputs, tokens)
                    rows.append({"family": family, "method": method, "request": r, "tokens": len(tokens),
                                 "identical": tokens == reference, "ties": len(check.ties),
                                 "errors": len(check.errors), "sentence": check.sentence()})
    return {
        "what": "every emitted token the model's greedy choice within the tie tolerance (check_greedy)",
        "device": _device_name(args.device), "dtype": dtype_name(dtype), "outputs": len(rows),
        "identical": sum(r["identical"] for r in rows), "with_ties": sum(r["ties"] > 0 for r in rows),
        "errors": sum(r["errors"] for r in rows), "rows": rows,
    }


# --------------------------------------------------------------------------- speed at 7B sizes


def _build_7b(args: argparse.Namespace) -> recap.Target:
    from verify_curve_7b import build

    dims = TINY_DIMS if args.dry_run else REAL_DIMS
    return build(argparse.Namespace(device=args.device, dtype=args.dtype, **dims))


def _timed(device: torch.device, fn: Any) -> tuple[float, Any]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def _recap_run(target: recap.Target, inputs: dict[str, Any], method: str, n: int) -> tuple[list[int], int]:
    """One decode through ``iter_steps`` (no trace: these weights come with no tokenizer): tokens, passes."""
    steps = tokens = None
    for rec in recap.iter_steps(target, inputs=inputs, method=method, max_new_tokens=n):
        steps, tokens = rec.step, rec.token_ids
    return list(tokens or []), int(steps or 0)


def speed(args: argparse.Namespace) -> dict[str, Any]:
    """generate(), ar and recap (the default RecapConfig) on one random prompt at 7B sizes, interleaved."""
    t0 = time.perf_counter()
    target = _build_7b(args)
    build_s = time.perf_counter() - t0
    device = target.device
    prompt_len, n, repeats = (32, 16, 1) if args.dry_run else (args.prompt_tokens, args.max_new_tokens, 3)
    vocab = TINY_DIMS["vocab"] - 8 if args.dry_run else 151643  # below the special ids
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, prompt_len), generator=generator).to(device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    runs: dict[str, Any] = {
        "hf": lambda: (_greedy(target, inputs, n), None),
        "ar": lambda: _recap_run(target, inputs, "ar", n),
        "recap": lambda: _recap_run(target, inputs, "recap", n),
    }
    warm = {name: round(_timed(device, fn)[0], 3) for name, fn in runs.items()}  # first call: cost curve too
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, tuple[list[int], Any]] = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            s, outputs[name] = _timed(device, fn)
            seconds[name].append(s)
    reference = outputs["hf"][0]
    rows = {}
    for name, times in seconds.items():
        tokens, passes = outputs[name]
        median = statistics.median(times)
        row = {"median_s": round(median, 4), "tokens": len(tokens),
               "tokens_per_s": round(len(tokens) / median, 1),
               "speedup_vs_hf": round(statistics.median(seconds["hf"]) / median, 3),
               "first_call_s": warm[name]}
        if passes is not None:
            row["passes"] = passes
            row["mat"] = round(len(tokens) / max(passes, 1), 3)
            row["lossless"], row["precision"] = compare_with_reference(target, inputs, tokens, reference)
        rows[name] = row
    return {
        "what": "greedy generate() vs the engine (ar) and the default RecapConfig (recap), random weights",
        "model": target.name, "device": _device_name(args.device), "dtype": dtype_name(target.dtype),
        "parameters": sum(p.numel() for p in target.model.parameters()), "build_s": round(build_s, 2),
        "prompt_tokens": prompt_len, "max_new_tokens": n, "repeats": repeats, "rows": rows,
    }


# --------------------------------------------------------------------------- command line


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else device


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("precision", "speed"))
    p.add_argument("--out", default="device-check", help="output folder")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--dry-run", action="store_true", help="on the CPU with tiny sizes: the smoke test")
    p.add_argument("--prompt-tokens", type=int, default=512, help="speed: the prompt's length (an image's)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="speed: tokens per decode")
    args = p.parse_args(argv)
    if args.dry_run:
        args.device = "cpu"
    result = precision(args) if args.what == "precision" else speed(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"precision-{result['dtype']}.json" if args.what == "precision" else "speed-7b.json"
    (out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"} | (
        {"rows": result["rows"]} if args.what == "speed" else {}), indent=2))
    if args.what == "precision":
        return 1 if result["errors"] else 0
    return 0 if all(r.get("lossless", True) for r in result["rows"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
