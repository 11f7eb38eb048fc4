"""``bench()``: run the suite's rows on a loaded target and assemble results.json."""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from recap.bench.runner import run_suite
from recap.bench.statistics import checked, mismatches, summarize, ties
from recap.bench.suite import (
    FIXED_CONFIG,
    FOLLOWUP_QUESTIONS,
    HF_PLD_TOKENS,
    ablation_arms,
    all_methods,
    build_suite,
    default_label,
    followup_arms,
    method_arms,
)
from recap.bench.suitefile import is_suite_file, read_suite
from recap.core.config import RecapConfig
from recap.engine.autobudget import resolve_budget

SCHEMA = "recap-bench"
#: The reference row's label under sampling.
SAMPLING_HF_LABEL = "transformers generate(do_sample=True), same seed (reference)"
SCHEMA_VERSION = 1


def bench(
    target: Any,
    *,
    suite: str = "default",
    methods: Sequence[str] | None = None,
    config: RecapConfig | None = None,
    ablation: bool = False,
    repeats: int = 3,
    max_new_tokens: int = 160,
    limit: int | None = None,
    warmup: bool = True,
    progress: bool = True,
    sampling: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the benchmark on a loaded target; returns the results dict (results.json).

    methods: the rows to run (default: ``all_methods()``, every registered method as of this call;
    on a conversation suite ``FOLLOWUP_METHODS``, each ``recap`` row beside its twins under the other
    carry modes). suite: a name of ``SUITES`` or a suite file (``recap.bench.suitefile``).
    sampling: generation-config fields every row decodes with (``do_sample`` and its warpers; None:
    greedy); each request's runs share the seed ``seed + request index`` (``recap.bench.runner``),
    and ``lossless`` counts the engine rows' outputs identical to hf's under it.
    """
    config = config or FIXED_CONFIG  # tr and recap at 24 fixed nodes, one owner per memory
    if is_suite_file(suite):
        requests = read_suite(suite)[:limit] if limit is not None else read_suite(suite)
    else:
        requests = build_suite(suite, limit)
    if not requests:
        raise ValueError("the suite is empty")
    if ablation:
        arms = ablation_arms(config)
    elif suite in FOLLOWUP_QUESTIONS:
        arms = followup_arms(methods, config)
    else:
        arms = method_arms(all_methods() if methods is None else methods, config)
    t0 = time.perf_counter()
    records = run_suite(
        target, requests, arms, repeats=repeats, max_new_tokens=max_new_tokens, warmup=warmup,
        progress=progress, sampling=sampling, seed=seed,
    )
    elapsed = time.perf_counter() - t0
    summary = summarize(records, arms, config.max_depth)
    bad = mismatches(records, sampling=sampling is not None)
    import transformers

    meta = {
        "title": "RECAP ablation" if ablation else "RECAP benchmark",
        "model": target.short_name,  # never a server path: the run is shown on a public Space
        "model_sha256": weights_fingerprint(target.name),
        "family": target.family,
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "suite": Path(suite).name if is_suite_file(suite) else suite,  # a file's name, never its server path
        "requests": len(requests),
        "kinds": list(dict.fromkeys(r.kind for r in requests)),
        "conversations": len({r.conversation for r in requests if r.conversation}),
        "repeats": repeats,
        "max_new_tokens": max_new_tokens,
        "budget": config.budget,
        "resolved_budget": resolve_budget(target, config),
        "max_depth": config.max_depth,
        "config": config.to_dict(),
        "hf_pld_tokens": HF_PLD_TOKENS,
        "sampling": None if sampling is None else {**sampling, "seed": seed},
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "elapsed_s": elapsed,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "meta": meta,
        "arms": [
            {
                "name": a.name,
                "method": a.method,
                "label": a.label
                or (SAMPLING_HF_LABEL
                    if sampling is not None and a.method == "hf"
                    else default_label(a.method)),
                "memory": a.memory if a.uses_memory else None,
                "config": a.config.to_dict() if a.config is not None else None,
                "budget": _arm_budget(target, a),
                "skipped": a.skipped,
            }
            for a in arms
        ],
        "requests": [
            {
                "index": r.index, "seed": r.seed, "kind": r.kind, "prompt": r.prompt, "answer": r.answer,
                "position": r.position, "conversation": r.conversation, "category": r.category,
            }
            for r in requests
        ],
        "records": records,
        "summary": summary,
        "errors": [
            {"arm": r["arm"], "request": r["request"], "error": r["error"]} for r in records if r["error"]
        ],
        "lossless": {
            "ok": not bad,
            "checked": len(checked(records, sampling=sampling is not None)),
            "mismatches": [{k: r[k] for k in ("arm", "request", "seed", "kind", "mismatch")} for r in bad],
            "ties": [{"arm": r["arm"], "request": r["request"], "precision": r["mismatch"]["precision"]}
                     for r in ties(records)],
        },
    }


def weights_fingerprint(path: str, limit_bytes: int = 512 * 2**20) -> str | None:
    """First 16 hex digits of the sha256 over a local model's weight files (None when remote or large)."""
    import hashlib

    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files or sum(f.stat().st_size for f in files) > limit_bytes:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _arm_budget(target: Any, arm: Any) -> int | None:
    """A row's node budget: RECAP's cost-aware trees under "auto" have the cap (the measured cost
    sizes each, nodes/pass shows it); fixed trees under "auto" the budget measured for them."""
    if not arm.uses_memory or arm.config is None:
        return None
    if arm.method == "recap" and arm.config.budget == "auto" and arm.config.cost_aware:
        return arm.config.auto_cap
    return resolve_budget(target, arm.config)
