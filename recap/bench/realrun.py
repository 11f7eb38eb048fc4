"""The real-size benchmark: each method in a process of its own, on a random-weight checkpoint at
a real model's full sizes (``recap.bench.realsize``), one photograph-like image, one prompt.

    python -m recap bench --real-size qwen2-vl-2b --out bench-real      # or smolvlm-256m
    python scripts/bench_real_sizes.py --real-size smolvlm-256m --methods hf recap recap-auto

Per method (a fresh ``python -m recap.bench.realrun --child`` process each, one at a time, so
that no method inherits another's caches, warm allocator or page cache of the weights beyond
the checkpoint file itself): load the checkpoint (fp32 on CPU), one untimed warm-up call of
the same method on a short text-only prompt (lazy imports, kernels; a fresh memory, so that
RECAP learns nothing about the timed request), then one timed call of ``max_new_tokens``
greedy tokens on the image and prompt, with a fresh memory. With ``--cold`` there is no
warm-up: the timed call is the process's first request, lazy imports and all. Measured:

* ``first_token_s``: from the call to its first emitted token (prefill + first token; for the
  engine the first verify pass, which may emit several tokens);
* ``total_s``: the whole call; ``decode_tok_s``: tokens after the first step per second after it;
* ``added_mb``: the process's peak resident memory during the call minus its resident memory
  before it (``/proc/self/clear_refs`` resets the peak);
* ``nodes``: drafted nodes per pass (mean) and ``verify_s``: target seconds per pass (mean), for
  ``hf`` its one-token decode passes;

Rows: ``hf`` (``model.generate()``), ``recap`` and ``tr`` (24 fixed nodes, the paper's
comparison), ``recap-auto`` (``RecapConfig()``, the library's default: trees sized by the closed
size loop, ``recap.engine.controller``; nothing is measured at load or on the request's clock, so
the timed call is what a fresh process's first request of that length pays). The token ids of
every row are compared with ``hf``'s (lossless). ``recap-curve`` (``RecapConfig(size_loop=False)``,
the default before the size loop) measures its verify curve inside the timed request, as that
default did for a cold process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from recap.bench.realsize import PROMPT, REAL_SIZES, build_checkpoint, photo_image

METHODS = ("hf", "recap", "recap-auto", "recap-curve", "tr")
DEFAULT_METHODS = ("hf", "recap", "recap-auto")
FIXED_NODES = 24
#: Memory the child of each size needs, GiB (fp32 weights, activations, headroom): checked before it starts.
NEEDS_GB = {"qwen2-vl-2b": 12.0, "smolvlm-256m": 3.0}
GREEDY = {"do_sample": False}


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size


def _config(method: str) -> Any:
    from recap.core.config import RecapConfig

    if method == "recap-auto":  # the default: the closed size loop, from a cold cost model
        return RecapConfig()
    if method == "recap-curve":  # the default before issue 35: one verify curve, measured in the request
        return RecapConfig(size_loop=False)
    return RecapConfig(budget=FIXED_NODES, cost_aware=False)


def _hf_call(target: Any, image: Any, prompt: str, max_new_tokens: int) -> dict[str, Any]:
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    from recap.models.inputs import load_image, prepare_inputs

    stamps: list[float] = []

    class Stamp(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    t0 = time.perf_counter()
    inputs = prepare_inputs(target, load_image(image), prompt)
    with torch.inference_mode():
        out = target.model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            stopping_criteria=StoppingCriteriaList([Stamp()]),
            **GREEDY,
        )
    end = time.perf_counter()
    ids = out[0, inputs["input_ids"].shape[-1] :].tolist()
    n = len(ids)
    decode = end - stamps[0]
    return {
        "token_ids": ids,
        "first_token_s": stamps[0] - t0,
        "total_s": end - t0,
        "decode_tok_s": (n - 1) / decode if n > 1 and decode > 0 else None,
        "nodes": 0.0,
        "verify_s": decode / (n - 1) if n > 1 else None,
        "passes": n,
        "prompt_tokens": int(inputs["input_ids"].shape[-1]),
    }


def _engine_call(target: Any, image: Any, prompt: str, max_new_tokens: int, method: str) -> dict[str, Any]:
    from recap.engine.loop import iter_steps

    engine = "tr" if method == "tr" else "recap"
    t0 = time.perf_counter()
    first = None
    first_tokens = 0
    sizes, verify, stops = [], [], []
    rec = None
    for rec in iter_steps(
        target,
        image,
        prompt,
        method=engine,
        max_new_tokens=max_new_tokens,
        config=_config(method),
        generation_config=GREEDY,
    ):
        if first is None:
            first, first_tokens = time.perf_counter(), len(rec.emitted)
        sizes.append(rec.tree_size)
        verify.append(rec.step_timings["verify"])
        stops.append(rec.sizing.stop if rec.sizing is not None else "")
    end = time.perf_counter()
    assert rec is not None and first is not None
    n = len(rec.token_ids)
    return {
        "token_ids": list(rec.token_ids),
        "first_token_s": first - t0,
        "total_s": end - t0,
        "decode_tok_s": (n - first_tokens) / (end - first) if end > first else None,
        "nodes": sum(sizes) / len(sizes),
        "verify_s": sum(verify) / len(verify),
        "passes": len(sizes),
        "tree_sizes": sizes,
        "verify_by_pass": verify,
        "stops": stops,
        "budget": rec.budget,
    }


def child(
    model_dir: str, method: str, max_new_tokens: int, threads: int, *, cold: bool = False
) -> dict[str, Any]:
    """One method, measured in this process (see the module docstring)."""
    import torch

    from recap.models.target import load_target

    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    target = load_target(model_dir, device="cpu", dtype="float32")
    image = photo_image()
    result: dict[str, Any] = {
        "method": method,
        "load_s": time.perf_counter() - t0,
        "threads": torch.get_num_threads(),
    }
    call = _hf_call if method == "hf" else lambda *a: _engine_call(*a, method)  # noqa: E731
    if not cold:  # warm-up: lazy imports and kernels, nothing about the timed request
        call(target, None, "Hello.", 2)
    result["cold"] = cold
    base = _rss_kb("VmRSS")
    _reset_peak()
    result.update(call(target, image, PROMPT, max_new_tokens))
    result["added_mb"] = (_rss_kb("VmHWM") - base) / 1024
    return result


def _available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def run(
    name: str, *, methods: tuple[str, ...], out: Path, work: Path, max_new_tokens: int = 24, threads: int = 0,
    cold: bool = False,
) -> dict[str, Any]:
    """Build (once) and benchmark the real size ``name``, one child process per method, one at a time."""
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"unknown real-size method(s) {', '.join(bad)}; choose from {', '.join(METHODS)}")
    out.mkdir(parents=True, exist_ok=True)
    model_dir = build_checkpoint(name, work / name)
    rows = []
    for method in methods:
        free = _available_gb()
        if free < NEEDS_GB[name]:
            raise RuntimeError(
                f"{name} needs {NEEDS_GB[name]:.0f} GiB available for {method}, {free:.1f} here"
            )
        path = out / f"{name}-{method}.json"
        cmd = [
            sys.executable,
            "-m",
            "recap.bench.realrun",
            "--child",
            "--model",
            str(model_dir),
            "--method",
            method,
            "--max-new-tokens",
            str(max_new_tokens),
            "--threads",
            str(threads),
            "--json",
            str(path),
            *(["--cold"] if cold else []),
        ]
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        rows.append(json.loads(path.read_text()))
    ref = next((r for r in rows if r["method"] == "hf"), None)
    for r in rows:
        r["same_as_hf"] = None if ref is None else r["token_ids"] == ref["token_ids"]
    result = {
        "size": name,
        "max_new_tokens": max_new_tokens,
        "cold": cold,
        "prompt": PROMPT,
        "rows": rows,
        "commit": _commit(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{name}.md").write_text(render(result) + "\n")
    return result


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _ratio(value: float | None, ref: float | None) -> str:
    return f" ({value / ref:.2f}x)" if value is not None and ref else ""


def render(result: dict[str, Any]) -> str:
    """The table: one column per method, ratios against ``hf``."""
    rows = result["rows"]
    ref = next((r for r in rows if r["method"] == "hf"), {})
    cold = ", cold: each process's first request" if result.get("cold") else ""
    lines = [
        f"{result['size']}, CPU fp32, {result['max_new_tokens']} tokens{cold}, commit {result['commit']}, "
        f"{result['when']}",
        "",
        "| | " + " | ".join(r["method"] for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]

    def line(label: str, key: str, fmt: str, ratio: bool = True) -> None:
        cells = []
        for r in rows:
            v = r.get(key)
            cells.append(
                "–"
                if v is None
                else fmt.format(v) + (_ratio(v, ref.get(key)) if ratio and r is not ref else "")
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    line("prefill + first token (s)", "first_token_s", "{:.2f}")
    line("memory added by the call (MB)", "added_mb", "{:.0f}")
    line("whole call (s)", "total_s", "{:.2f}")
    line("decode tokens/s", "decode_tok_s", "{:.2f}")
    line("drafted nodes per pass", "nodes", "{:.1f}", ratio=False)
    line("target seconds per pass", "verify_s", "{:.3f}", ratio=False)
    line("passes", "passes", "{:d}", ratio=False)
    lines.append(
        "| same tokens as hf | "
        + " | ".join(
            "–" if r["same_as_hf"] is None else ("yes" if r["same_as_hf"] else "**no**") for r in rows
        )
        + " |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="real-size benchmark (see recap.bench.realrun)")
    p.add_argument("--real-size", choices=REAL_SIZES, help="which checkpoint to build and measure")
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=METHODS)
    p.add_argument("--out", default="bench-real", help="output folder (default: bench-real)")
    p.add_argument("--work", default=None, help="where checkpoints are built (default: OUT/checkpoints)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default 0: torch's default)")
    p.add_argument("--cold", action="store_true",
                   help="no warm-up call: the timed request is each process's first (lazy imports and all)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        Path(args.json).write_text(
            json.dumps(child(args.model, args.method, args.max_new_tokens, args.threads, cold=args.cold))
        )
        return 0
    if args.real_size is None:
        p.error("--real-size is required")
    out = Path(args.out)
    result = run(
        args.real_size,
        methods=tuple(args.methods),
        out=out,
        work=Path(args.work) if args.work else out / "checkpoints",
        max_new_tokens=args.max_new_tokens,
        threads=args.threads,
        cold=args.cold,
    )
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
