"""Side-by-side benchmark: ``python -m recap bench`` (DESIGN.md section 7, docs/benchmark.md).

Every method answers the same requests in one process, interleaved request by request
(hf, hf-pld, ar, pld, tr, recap for request 1, then request 2, ...), so machine drift
hits all of them alike. HF's own greedy ``generate()`` is the reference for time and
for output: every other method's tokens must equal its tokens exactly (the lossless
check; any mismatch makes the command exit non-zero).

Suite
    Held-out shape scenes (``recap.shapes``, seeds from ``EVAL_SEEDS``) x every question
    kind, in a fixed interleaved order: consecutive requests differ in image and kind,
    and each (scene, kind) pair occurs once. One persistent ``TokenMemory`` per method
    is carried over the whole suite, as in a deployed server, so TR and RECAP warm up
    as the suite goes.

Repeats and memory
    Each request is timed ``repeats`` times per method (median reported). Every repeat
    of a request starts from the *same* memory state: the first ``repeats - 1`` runs
    decode on a copy of the memory as it was before the request, and the last run
    decodes on the live memory, which then carries over to the next request. So
    repeats never warm the memory further, all repeats of a request do identical work
    (same trees, same MAT), and the memory advances exactly once per request. The copy
    is ``TokenMemory.clone()`` (rows, provenance, calibration); the runner checks that
    the repeats agree in steps, accepted lengths, tree sizes and trees, and raises
    ``RepeatMismatchError`` when they do not.

Warm-up
    Before the suite, every method decodes a few requests on scenes outside the suite
    with throw-away memories (not counted): kernel warm-up, lazy imports, and the
    ``budget="auto"`` measurement happen there.

Modules: ``suite`` (requests and rows), ``runner`` (the interleaved loop and the repeat
check), ``statistics`` (totals, speedups, oracle), ``reports`` (markdown, HTML, JSON),
``results`` (``bench()``: results.json), ``cli`` (``python -m recap bench``).

Outputs (in ``--out``): ``results.json`` (everything, per request), ``results.md`` (the
tables) and ``results.html`` (interactive Plotly figures); ``--ablation`` writes
``ablation.*`` instead.
"""

from __future__ import annotations

from recap.bench.cli import add_parser, main
from recap.bench.reports import render_html, render_markdown, write_results
from recap.bench.results import SCHEMA, SCHEMA_VERSION, bench, weights_fingerprint
from recap.bench.runner import (
    ForwardCounter,
    RepeatMismatchError,
    Run,
    check_repeats,
    run_engine,
    run_hf,
    run_suite,
)
from recap.bench.statistics import mismatches, oracle_stats, summarize
from recap.bench.suite import (
    COST_CAPS,
    FIXED_BUDGETS,
    HF_METHODS,
    HF_PLD_TOKENS,
    SUITES,
    WARMUP_SEED,
    Arm,
    Request,
    ablation_arms,
    all_methods,
    build_suite,
    default_label,
    method_arms,
    warmup_requests,
)

__all__ = [
    "COST_CAPS",
    "FIXED_BUDGETS",
    "HF_METHODS",
    "HF_PLD_TOKENS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SUITES",
    "WARMUP_SEED",
    "Arm",
    "ForwardCounter",
    "RepeatMismatchError",
    "Request",
    "Run",
    "ablation_arms",
    "add_parser",
    "all_methods",
    "bench",
    "build_suite",
    "check_repeats",
    "default_label",
    "main",
    "method_arms",
    "mismatches",
    "oracle_stats",
    "render_html",
    "render_markdown",
    "run_engine",
    "run_hf",
    "run_suite",
    "summarize",
    "warmup_requests",
    "weights_fingerprint",
    "write_results",
]
