"""``python -m recap bench``: the command line of the benchmark."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from recap.core.errors import PluginError
from recap.engine.sampling_args import add_sampling_arguments, sampling_fields
from recap.models.load_args import add_load_arguments, load_kwargs

# The parser needs argparse only: the suites and the registry (torch, transformers) are imported
# when an argument is checked or the command runs, so `python -m recap --help` stays instant.


def _suite_arg(name: str) -> str:
    from pathlib import Path

    from recap.bench.suite import SUITES

    if name in SUITES:
        return name
    if name.endswith(".jsonl"):
        if not Path(name).is_file():
            raise argparse.ArgumentTypeError(f"suite file not found: {name}")
        return name
    raise argparse.ArgumentTypeError(f"unknown suite {name!r}; choose one of "
                                     f"{', '.join(SUITES)} or a .jsonl file")


def _real_size_arg(name: str) -> str:
    from recap.bench.realsize import REAL_SIZES

    if name not in REAL_SIZES:
        raise argparse.ArgumentTypeError(f"unknown real size {name!r}; choose one of {', '.join(REAL_SIZES)}")
    return name


def _methods_arg(text: str) -> list[str]:
    from recap.bench.suite import all_methods

    items = [m for part in text.split(",") for m in [part.strip()] if m]
    try:
        known = all_methods()  # the first registry read loads the installed plugins
    except PluginError as exc:  # argparse prints only an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(exc)) from None
    for m in items:
        if m not in known:
            raise argparse.ArgumentTypeError(f"unknown method {m!r}; choose from {', '.join(known)}")
    return items


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark every method side by side against HF generate() (speed, MAT, lossless check)",
        description=(
            "Run held-out shape scenes x every question kind with hf, hf-pld, ar, pld, tr and recap "
            "interleaved per request; write results.json, results.md and results.html. Exits non-zero "
            "when any output differs from HF's greedy output (with --temperature / --top-p / --top-k: from "
            "HF's generate(do_sample=True) output under the same seed)."
        ),
    )
    p.add_argument("--model", default=None,
                   help="model directory or hub id (default: the embedded shapes model)")
    p.add_argument("--suite", default="default", type=_suite_arg, metavar="SUITE",
                   help="request set: default (24 scenes x every question kind), quick (3 scenes), "
                   "followup (12 conversations of 5 turns, 4 scenes revisited; hf, tr and recap beside "
                   "recap under its other carry modes unless --methods says otherwise), or a suite file "
                   "FILE.jsonl in MMSpec's layout (id, image, turns, category per line, the images beside "
                   "it; every method); default: default")
    p.add_argument(
        "--methods",
        nargs="+",
        type=_methods_arg,
        default=None,
        metavar="METHOD",
        help="methods to run, space or comma separated (default: hf, hf-pld and every registered method; "
        "hf is always run)",
    )
    p.add_argument("--out", default="bench-results", help="output folder (default: bench-results)")
    p.add_argument("--ablation", action="store_true",
                   help="run the RECAP ablation rows instead (writes ablation.*)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed runs per request and method (default: 3; quick: 1)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="generation limit per request (default: 160; with --real-size: 24)")
    p.add_argument("--budget", default=None,
                   help="fixed tree node budget for tr / recap (default 24): an integer or 'auto' "
                   "(one budget from the measured cost); the recap-auto row sizes each tree by cost")
    p.add_argument("--limit", type=int, default=None, help="run only the first N requests of the suite")
    add_load_arguments(p)  # --device, --dtype, --device-map, --revision, --token
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: small models gain nothing from more, and on a shared machine "
        "oversubscribed threads slow every method by 5-10x; 0 keeps torch's default)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--real-size", default=None, type=_real_size_arg, metavar="MODEL",
                   help="instead of the suite: build a random-weight checkpoint at a real model's full sizes "
                   "(qwen2-vl-2b or smolvlm-256m; written under OUT/checkpoints once) and measure hf, recap "
                   "(24 nodes) and recap-auto (or --methods: hf recap recap-auto tr) each in a process "
                   "of its own on a photograph-like image (recap.bench.realrun; needs a checkout: "
                   "tests/fixtures/realfiles)")
    add_sampling_arguments(p,
                           "with sampling: request i's runs (every row, every repeat) start from "
                           "torch.manual_seed(SEED + i) (default 0)")
    p.set_defaults(func=main)


def _real_size(args: argparse.Namespace) -> int:
    from pathlib import Path

    from recap.bench.realrun import DEFAULT_METHODS, render, run

    methods = tuple(m for group in args.methods for m in group) if args.methods else DEFAULT_METHODS
    max_new = 24 if args.max_new_tokens is None else args.max_new_tokens
    result = run(args.real_size, methods=methods, out=Path(args.out), work=Path(args.out) / "checkpoints",
                 max_new_tokens=max_new, threads=args.threads)
    print(render(result))
    return 0 if all(r["same_as_hf"] is not False for r in result["rows"]) else 1


def main(args: argparse.Namespace, load: Callable[..., Any] | None = None) -> int:
    import torch

    from recap.bench.reports import acceptance_lines, render_markdown, write_results
    from recap.bench.results import bench
    from recap.models.target import load_target

    if args.threads < 0:
        raise ValueError(f"--threads must be 0 (torch's default) or positive, got {args.threads}")
    if args.real_size is not None:
        return _real_size(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats if args.repeats is not None else (1 if args.suite == "quick" else 3)
    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {repeats}")
    from recap.bench.suite import FIXED_CONFIG

    # tr and recap: 24 fixed nodes, each row's memory one owner (the recap-auto row sizes its trees by cost)
    config = FIXED_CONFIG
    if args.budget is not None:
        config = replace(config, budget=args.budget if args.budget == "auto" else int(args.budget))
    methods = [m for group in args.methods for m in group] if args.methods else None  # None: the suite's rows
    target = (load or load_target)(args.model, **load_kwargs(args))
    results = bench(
        target,
        suite=args.suite,
        methods=methods,
        config=config,
        ablation=args.ablation,
        repeats=repeats,
        max_new_tokens=160 if args.max_new_tokens is None else args.max_new_tokens,
        limit=args.limit,
        progress=not args.no_progress,
        sampling=sampling_fields(args),
        seed=args.seed or 0,
    )
    paths = write_results(results, args.out, "ablation" if args.ablation else "results")
    print(render_markdown(results))
    print(f"written: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    for line in acceptance_lines(results):  # the same figures as the report's Acceptance section
        print(f"acceptance {line}", file=sys.stderr)
    for tie in results["lossless"].get("ties") or []:  # reduced precision: reported, not a failure
        print(f"{tie['arm']} request {tie['request']}: {tie['precision']}", file=sys.stderr)
    if not results["lossless"]["ok"]:
        bad = results["lossless"]["mismatches"]
        print("\n" + "!" * 78, file=sys.stderr)
        reference = ("generate(do_sample=True) under the same seed"
                     if results["meta"]["sampling"]
                     else "greedy generate()")
        print(f"LOSSLESS CHECK FAILED: {len(bad)} output(s) differ from HF {reference}:", file=sys.stderr)
        for m in bad[:10]:
            mm = m["mismatch"]
            print(
                f"  {m['arm']} request {m['request']} (seed {m['seed']}, {m['kind']}) first diff at token "
                f"{mm['first_diff']}{' (' + mm['precision'] + ')' if mm.get('precision') else ''}"
                f"\n    expected: {mm['expected']!r}\n    got:      {mm['got']!r}",
                file=sys.stderr,
            )
        print("!" * 78, file=sys.stderr)
        return 1
    return 0
