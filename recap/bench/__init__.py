"""Side-by-side benchmark: ``python -m recap bench`` (docs/design.md section 7, docs/benchmark.md).

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
    as the suite goes. The follow-up suite (``--suite followup``) asks each scene 5 questions in
    a row instead, and runs RECAP beside itself without its image-scoped memories
    (``RecapConfig.scoped_memory``): the table then splits every row into a scene's first
    question and the later ones.

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

Sampling
    With ``sampling`` (``--temperature`` / ``--top-p`` / ``--top-k``) every row decodes under
    those generation-config fields and request i's runs all start from
    ``torch.manual_seed(seed + i)``: the reference is HF ``generate(do_sample=True)`` and the
    check counts the engine rows' outputs identical to it under that shared seed.

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

from recap.core.lazy import lazy_exports

#: name -> its module, imported at first use (``python -m recap --help`` builds the bench
#: parser from ``recap.bench.cli`` without importing the runner, torch or transformers).
_EXPORTS = {
    "annotations": "__future__",
    "add_parser": "recap.bench.cli",
    "main": "recap.bench.cli",
    "render_html": "recap.bench.reports",
    "followup_markdown": "recap.bench.reports",
    "render_markdown": "recap.bench.reports",
    "write_results": "recap.bench.reports",
    "SCHEMA": "recap.bench.results",
    "SCHEMA_VERSION": "recap.bench.results",
    "bench": "recap.bench.results",
    "weights_fingerprint": "recap.bench.results",
    "ForwardCounter": "recap.bench.runner",
    "RepeatMismatchError": "recap.bench.runner",
    "Run": "recap.bench.runner",
    "check_repeats": "recap.bench.runner",
    "run_engine": "recap.bench.runner",
    "run_hf": "recap.bench.runner",
    "run_suite": "recap.bench.runner",
    "mismatches": "recap.bench.statistics",
    "oracle_stats": "recap.bench.statistics",
    "summarize": "recap.bench.statistics",
    "AUTO_ROW": "recap.bench.suite",
    "Arm": "recap.bench.suite",
    "COST_CAPS": "recap.bench.suite",
    "FIXED_BUDGETS": "recap.bench.suite",
    "FIXED_CONFIG": "recap.bench.suite",
    "FOLLOWUP_METHODS": "recap.bench.suite",
    "FOLLOWUP_QUESTIONS": "recap.bench.suite",
    "HF_METHODS": "recap.bench.suite",
    "HF_PLD_TOKENS": "recap.bench.suite",
    "Request": "recap.bench.suite",
    "SUITES": "recap.bench.suite",
    "UNSCOPED": "recap.bench.suite",
    "WARMUP_SEED": "recap.bench.suite",
    "ablation_arms": "recap.bench.suite",
    "all_methods": "recap.bench.suite",
    "build_suite": "recap.bench.suite",
    "default_label": "recap.bench.suite",
    "followup_arms": "recap.bench.suite",
    "method_arms": "recap.bench.suite",
    "warmup_requests": "recap.bench.suite",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
