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
    (same trees, same MAT), and the memory advances exactly once per request.

Warm-up
    Before the suite, every method decodes a few requests on scenes outside the suite
    with throw-away memories (not counted): kernel warm-up, lazy imports, and the
    ``budget="auto"`` measurement happen there.

Outputs (in ``--out``): ``results.json`` (everything, per request), ``results.md`` (the
tables) and ``results.html`` (interactive Plotly figures); ``--ablation`` writes
``ablation.*`` instead.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from recap.drafters import METHODS, RecapConfig
from recap.memory import TokenMemory

SCHEMA = "recap-bench"
SCHEMA_VERSION = 1

HF_METHODS = ("hf", "hf-pld")
ALL_METHODS = (*HF_METHODS, *METHODS)
#: Draft length of transformers' built-in prompt lookup (its documented typical value is 10).
HF_PLD_TOKENS = 10


# --------------------------------------------------------------------------- suite


@dataclass(frozen=True)
class Request:
    index: int
    seed: int
    kind: str
    prompt: str
    answer: str  # the scene's true answer (for information: the bench checks losslessness, not accuracy)

    def image(self) -> Any:
        from recap.shapes.scene import render_scene

        return render_scene(self.seed)[0]


#: name -> (first seed, number of scenes). Seeds come from the held-out EVAL_SEEDS range.
SUITES = {"default": (1_000_000, 24), "quick": (1_000_000, 3)}
WARMUP_SEED = 1_999_999  # outside every suite


def build_suite(name: str = "default", limit: int | None = None) -> list[Request]:
    """The suite's requests in their fixed interleaved order.

    Round r, slot j asks kind ``KINDS[j]`` about scene ``seeds[(r + j) % n]``: a Latin
    square, so consecutive requests differ in image and kind and each (scene, kind)
    pair is asked once (the scene's fixed evaluation question of that kind).
    """
    from recap.shapes.data import eval_example
    from recap.shapes.scene import KINDS

    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    start, n = SUITES[name]
    seeds = list(range(start, start + n))
    out: list[Request] = []
    for r in range(n):
        for j, kind in enumerate(KINDS):
            ex = eval_example(seeds[(r + j) % n], kind)
            if ex is None:
                continue
            out.append(Request(len(out), ex.seed, kind, ex.prompt, ex.answer))
    if limit is not None:
        out = out[:limit]
    return out


def warmup_requests() -> list[Request]:
    from recap.shapes.data import eval_example

    out = []
    for kind in ("describe", "color"):
        ex = eval_example(WARMUP_SEED, kind)
        if ex is not None:
            out.append(Request(-1 - len(out), ex.seed, kind, ex.prompt, ex.answer))
    return out


# --------------------------------------------------------------------------- arms


@dataclass
class Arm:
    """One row of the table: a method with its settings and memory policy."""

    name: str
    method: str  # "hf", "hf-pld" or an engine method
    config: RecapConfig | None = None
    memory: str = "warm"  # "warm": one TokenMemory over the suite; "cold": a fresh one per request
    label: str = ""
    skipped: str = ""  # why it could not run (e.g. hf-pld unsupported); empty when it ran
    live: TokenMemory | None = field(default=None, repr=False)

    @property
    def uses_memory(self) -> bool:
        return self.method in ("tr", "recap")


def method_arms(methods: Sequence[str], config: RecapConfig) -> list[Arm]:
    arms = []
    for m in methods:
        if m not in ALL_METHODS:
            raise ValueError(f"unknown method {m!r}; choose from {', '.join(ALL_METHODS)}")
        arms.append(Arm(m, m, None if m in HF_METHODS else config))
    if not any(a.method == "hf" for a in arms):
        arms.insert(0, Arm("hf", "hf"))  # the reference is always measured
    elif arms[0].method != "hf":
        arms.sort(key=lambda a: a.method != "hf")
    return arms


def ablation_arms(config: RecapConfig) -> list[Arm]:
    """The ablation rows (all RECAP variants but the hf reference and the TR baseline)."""
    c = config
    rows = [
        Arm("hf", "hf", label="reference"),
        Arm("tr", "tr", c, label="Token Recycling baseline"),
        Arm("m1", "recap", replace(c, use_m2=False, use_m3=False, suffix=False), label="1-token memory, best-first"),
        Arm("m1+m2", "recap", replace(c, use_m3=False, suffix=False), label="+ 2-token memory"),
        Arm("m1+m2+m3", "recap", replace(c, suffix=False), label="+ 3-token memory (= suffix off)"),
        Arm("recap", "recap", c, label="+ suffix matches (full RECAP, entropy fusion, warm)"),
        Arm("fusion=backoff", "recap", replace(c, fusion="backoff"), label="longest key only"),
        Arm("fusion=fixed", "recap", replace(c, fusion="fixed"), label="0.7/0.2/0.1 by rank"),
        Arm("cold", "recap", c, memory="cold", label="persistent memory reset every request"),
    ]
    for b in (4, 8, 16, 32, 64, 128):
        rows.append(Arm(f"budget={b}", "recap", replace(c, budget=b), label=f"{b} nodes"))
    rows.append(Arm("budget=auto", "recap", replace(c, budget="auto"), label="recap.autobudget"))
    return rows


def clone_memory(mem: TokenMemory) -> TokenMemory:
    """An independent copy of a persistent memory (rows and request provenance)."""
    out = TokenMemory(mem.vocab_size, mem.k)
    for name in ("ids", "probs", "entropy", "concentration", "request", "step", "depth"):
        getattr(out, name).copy_(getattr(mem, name))
    out.requests = list(mem.requests)
    return out


# --------------------------------------------------------------------------- one run


@dataclass
class Run:
    tokens: list[int]
    seconds: float  # wall time of the whole request (inputs, prefill, decode)
    steps: int  # target decode passes (hf: forward calls, the first being the prefill)
    timings: dict[str, float] = field(default_factory=dict)
    accepted_lengths: list[int] = field(default_factory=list)


class ForwardCounter:
    """Counts forward calls of a module (the number of target passes HF's generate makes)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        self._handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.calls += 1

    def close(self) -> None:
        self._handle.remove()


def _sync(target: Any) -> None:
    if target.device.type == "cuda":
        torch.cuda.synchronize(target.device)


def run_hf(target: Any, req: Request, image: Any, max_new_tokens: int, counter: ForwardCounter, pld: bool) -> Run:
    from recap.models import prepare_inputs

    extra = {"prompt_lookup_num_tokens": HF_PLD_TOKENS} if pld else {}
    _sync(target)
    counter.calls = 0
    t0 = time.perf_counter()
    inputs = prepare_inputs(target, image, req.prompt)
    with torch.inference_mode():
        out = target.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens, **extra)
    tokens = out[0, inputs["input_ids"].shape[-1] :].tolist()
    seconds = time.perf_counter() - t0
    return Run(tokens, seconds, max(counter.calls, 1))


def run_engine(
    target: Any, arm: Arm, req: Request, image: Any, max_new_tokens: int, memory: TokenMemory | None
) -> Run:
    from recap.engine import generate

    _sync(target)
    t0 = time.perf_counter()
    g = generate(
        target, image, req.prompt, method=arm.method, max_new_tokens=max_new_tokens, memory=memory, config=arm.config
    )
    seconds = time.perf_counter() - t0
    return Run(list(g.token_ids), seconds, g.decode_steps, dict(g.timings), list(g.accepted_lengths))


# --------------------------------------------------------------------------- the loop


def run_suite(
    target: Any,
    requests: Sequence[Request],
    arms: list[Arm],
    *,
    repeats: int = 3,
    max_new_tokens: int = 160,
    warmup: bool = True,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run every arm on every request (interleaved); returns one record per (request, arm)."""
    from tqdm.auto import tqdm

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    counter = ForwardCounter(target.model)
    try:
        if warmup:
            _warmup(target, arms, max_new_tokens, counter)
        for arm in arms:
            if arm.uses_memory and not arm.skipped:
                arm.live = TokenMemory(target.vocab_size, (arm.config or RecapConfig()).top_k)
        active = [a for a in arms if not a.skipped]
        records: list[dict[str, Any]] = []
        bar = tqdm(total=len(requests) * len(active) * repeats, desc="bench", unit="run", disable=not progress)
        for req in requests:
            image = req.image()
            runs: dict[str, list[Run]] = {a.name: [] for a in active}
            errors: dict[str, str] = {}
            # Every repeat of this request starts from the same memory state (see module doc).
            before = {a.name: a.live for a in active if a.live is not None}
            gc.collect()
            for rep in range(repeats):
                last = rep == repeats - 1
                for arm in active:
                    bar.update(1)
                    if arm.name in errors:
                        continue
                    try:
                        if arm.method in HF_METHODS:
                            run = run_hf(target, req, image, max_new_tokens, counter, arm.method == "hf-pld")
                        else:
                            if arm.memory == "cold" and arm.uses_memory:
                                mem = TokenMemory(target.vocab_size, arm.config.top_k)  # type: ignore[union-attr]
                            elif arm.name in before:
                                mem = before[arm.name] if last else clone_memory(before[arm.name])
                            else:
                                mem = None
                            run = run_engine(target, arm, req, image, max_new_tokens, mem)
                    except Exception as exc:  # noqa: BLE001 - recorded per request, reported loudly
                        if arm.method in HF_METHODS and arm.method != "hf":
                            errors[arm.name] = f"{type(exc).__name__}: {exc}"
                            continue
                        raise
                    runs[arm.name].append(run)
            bar.set_postfix_str(f"request {req.index + 1}/{len(requests)}")
            ref = runs["hf"][0].tokens
            for arm in active:
                records.append(_record(target, req, arm, runs[arm.name], ref, errors.get(arm.name, "")))
        bar.close()
    finally:
        counter.close()
        for arm in arms:
            arm.live = None
    return records


def _warmup(target: Any, arms: list[Arm], max_new_tokens: int, counter: ForwardCounter) -> None:
    """Decode a few out-of-suite requests with every arm (throw-away memories); find arms that cannot run."""
    for req in warmup_requests():
        image = req.image()
        for arm in arms:
            if arm.skipped:
                continue
            try:
                if arm.method in HF_METHODS:
                    run_hf(target, req, image, min(max_new_tokens, 32), counter, arm.method == "hf-pld")
                else:
                    mem = TokenMemory(target.vocab_size, arm.config.top_k) if arm.uses_memory else None  # type: ignore[union-attr]
                    run_engine(target, arm, req, image, min(max_new_tokens, 32), mem)
            except Exception as exc:  # noqa: BLE001
                if arm.method == "hf-pld":
                    arm.skipped = f"transformers' prompt lookup failed on this model: {type(exc).__name__}: {exc}"
                    continue
                raise


def _record(target: Any, req: Request, arm: Arm, runs: list[Run], ref: list[int], error: str) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "request": req.index,
        "seed": req.seed,
        "kind": req.kind,
        "arm": arm.name,
        "method": arm.method,
        "error": error,
    }
    if not runs:
        rec.update(tokens=0, steps=0, times=[], median_s=None, match=None)
        return rec
    live = runs[-1]
    same = all(r.tokens == runs[0].tokens for r in runs)
    match = same and runs[0].tokens == ref
    rec.update(
        tokens=len(live.tokens),
        steps=live.steps,
        mat=len(live.tokens) / live.steps if live.steps else 0.0,
        times=[r.seconds for r in runs],
        median_s=statistics.median(r.seconds for r in runs),
        timings=live.timings,
        accepted_lengths=live.accepted_lengths,
        match=match,
        repeats_identical=same,
    )
    if not match:
        got = live.tokens if same else next(r.tokens for r in runs if r.tokens != ref)
        first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
        tok = target.tokenizer
        rec["mismatch"] = {
            "first_diff": first,
            "expected": tok.decode(ref, skip_special_tokens=False),
            "got": tok.decode(got, skip_special_tokens=False),
        }
    return rec


# --------------------------------------------------------------------------- summary


def _stats(recs: list[dict[str, Any]], hf: dict[int, dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in recs if r.get("median_s") is not None]
    if not done:
        return {"requests": 0}
    tokens = sum(r["tokens"] for r in done)
    steps = sum(r["steps"] for r in done)
    time_s = sum(r["median_s"] for r in done)
    hf_time = sum(hf[r["request"]]["median_s"] for r in done if r["request"] in hf)
    out: dict[str, Any] = {
        "requests": len(done),
        "tokens": tokens,
        "steps": steps,
        "mat": tokens / steps if steps else 0.0,
        "time_s": time_s,
        "tokens_per_s": tokens / time_s if time_s > 0 else 0.0,
        "speedup": hf_time / time_s if time_s > 0 else 0.0,
        "lossless": sum(bool(r["match"]) for r in done),
    }
    t = [r.get("timings") or {} for r in done]
    decode = sum(x.get("draft", 0) + x.get("verify", 0) + x.get("update", 0) for x in t)
    if decode > 0:
        out["draft_s"] = sum(x.get("draft", 0) for x in t)
        out["verify_s"] = sum(x.get("verify", 0) for x in t)
        out["update_s"] = sum(x.get("update", 0) for x in t)
        out["prefill_s"] = sum(x.get("prefill", 0) for x in t)
        out["total_s"] = sum(x.get("total", 0) for x in t)
        out["draft_update_share"] = (out["draft_s"] + out["update_s"]) / decode
    lengths = [n for r in done for n in r.get("accepted_lengths", [])]
    if lengths:
        hist: dict[str, int] = {}
        for n in sorted(lengths):
            hist[str(n)] = hist.get(str(n), 0) + 1
        out["accepted_hist"] = hist
    return out


def oracle_stats(hf_recs: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    """MAT of proposing the true greedy continuation as one chain of ``depth`` nodes.

    Each pass then accepts ``depth`` drafted tokens plus the bonus one, so a request of
    L tokens takes ceil(L / (depth + 1)) passes.
    """
    tokens = sum(r["tokens"] for r in hf_recs)
    steps = sum(math.ceil(r["tokens"] / (depth + 1)) for r in hf_recs if r["tokens"])
    return {"requests": len(hf_recs), "tokens": tokens, "steps": steps, "mat": tokens / steps if steps else 0.0}


def summarize(records: list[dict[str, Any]], arms: list[Arm], depth: int) -> dict[str, Any]:
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    hf = {r["request"]: r for r in records if r["arm"] == "hf"}
    out: dict[str, Any] = {}
    for arm in arms:
        if arm.skipped:
            continue
        mine = [r for r in records if r["arm"] == arm.name]
        out[arm.name] = {
            "overall": _stats(mine, hf),
            "by_kind": {k: _stats([r for r in mine if r["kind"] == k], hf) for k in kinds},
        }
    hf_recs = list(hf.values())
    out["oracle"] = {
        "overall": oracle_stats(hf_recs, depth),
        "by_kind": {k: oracle_stats([r for r in hf_recs if r["kind"] == k], depth) for k in kinds},
    }
    return out


def mismatches(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["arm"] != "hf" and r.get("median_s") is not None and not r["match"]]


# --------------------------------------------------------------------------- rendering


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def render_markdown(results: dict[str, Any]) -> str:
    """The tables of results.json as markdown (overall, then MAT and speedup per kind)."""
    meta, summary = results["meta"], results["summary"]
    arms = [a for a in results["arms"] if a["name"] in summary]
    kinds = meta["kinds"]
    lines = [f"# {meta['title']}", ""]
    lines.append(
        f"Model `{meta['model']}` (weights {meta.get('model_sha256') or '?'}) on {meta['device']} ({meta['dtype']}), suite `{meta['suite']}` "
        f"({meta['requests']} requests), {meta['repeats']} timed repeat(s) per request (median), "
        f"max_new_tokens {meta['max_new_tokens']}, RecapConfig budget {meta['budget']} "
        f"(resolved {meta['resolved_budget']}), depth {meta['max_depth']}; torch {meta['torch']}, "
        f"transformers {meta['transformers']}, {meta['threads']} thread(s)."
    )
    lines.append("")
    lines.append(
        "| method | setting | MAT | tokens/s | speedup vs hf | draft+update share | lossless | tokens | passes |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for a in arms:
        s = summary[a["name"]]["overall"]
        if not s.get("requests"):
            continue
        share = s.get("draft_update_share")
        label = a["label"]
        if a.get("config") and a["config"].get("budget") == "auto":
            label += f" (chose {a.get('budget')})"
        lines.append(
            f"| {a['name']} | {label} | {_f(s['mat'])} | {_f(s['tokens_per_s'], '{:.1f}')} | "
            f"{_f(s['speedup'])}x | {_f(share, '{:.0%}') if share is not None else '–'} | "
            f"{s['lossless']}/{s['requests']} | {s['tokens']} | {s['steps']} |"
        )
    o = summary["oracle"]["overall"]
    lines.append(f"| oracle | greedy continuation as one chain of depth {meta['max_depth']} | {_f(o['mat'])} "
                 f"| – | – | – | – | {o['tokens']} | {o['steps']} |")
    for title, key, fmt in (("MAT per question kind", "mat", "{:.2f}"), ("Speedup over hf per question kind", "speedup", "{:.2f}x")):
        lines += ["", f"## {title}", "", "| method | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
        names = [a["name"] for a in arms] + (["oracle"] if key == "mat" else [])
        for name in names:
            by = summary[name]["by_kind"]
            cells = [_f(by[k].get(key), fmt) if by.get(k, {}).get("requests") else "–" for k in kinds]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Where the time goes", ""]
    lines.append(
        "| method | ms/request | prefill ms/request | other ms/request | draft ms/pass | verify ms/pass "
        "| update ms/pass |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for a in arms:
        s = summary[a["name"]]["overall"]
        if not s.get("requests"):
            continue
        n, st = s["requests"], max(s["steps"], 1)
        row = f"| {a['name']} | {s['time_s'] / n * 1e3:.1f} |"
        if "draft_s" in s:
            other = s.get("total_s", 0.0) - s["prefill_s"] - s["draft_s"] - s["verify_s"] - s["update_s"]
            row += (
                f" {s['prefill_s'] / n * 1e3:.1f} | {max(other, 0.0) / n * 1e3:.1f} | {s['draft_s'] / st * 1e3:.2f} |"
                f" {s['verify_s'] / st * 1e3:.2f} | {s['update_s'] / st * 1e3:.2f} |"
            )
        else:
            row += " – | – | – | – | – |"
        lines.append(row)
    lines.append("")
    lines.append(
        "ms/request: median wall time per request. The engine rows split their live run: prefill (with the "
        "prompt's memory writes), other (image preprocessing, prompt building, loop overhead), and per "
        "target pass the draft, verify (tree forward) and update (KV compaction, memory writes) times."
    )
    notes = [a for a in results["arms"] if a.get("skipped")]
    errors = results.get("errors") or []
    if notes or errors:
        lines += ["", "## Notes", ""]
        for a in notes:
            lines.append(f"- `{a['name']}` did not run: {a['skipped']}")
        for e in errors:
            lines.append(f"- `{e['arm']}` failed on request {e['request']}: {e['error']}")
    bad = results["lossless"]["mismatches"]
    lines += ["", "## Lossless check", ""]
    if not bad:
        lines.append(f"All outputs identical to hf's ({results['lossless']['checked']} checked).")
    else:
        lines.append(f"**{len(bad)} output(s) differ from hf's greedy output:**")
        for m in bad[:20]:
            lines.append(f"- `{m['arm']}` request {m['request']} (seed {m['seed']}, {m['kind']}): first difference "
                         f"at token {m['mismatch']['first_diff']}")
    lines.append("")
    return "\n".join(lines)


def render_html(results: dict[str, Any], path: Path) -> None:
    """Interactive Plotly figures: speedup and MAT per method and kind; accepted-length histograms."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    summary, kinds = results["summary"], results["meta"]["kinds"]
    names = [a["name"] for a in results["arms"] if a["name"] in summary]
    cols = ["overall", *kinds]

    def values(name: str, key: str) -> list[float | None]:
        s = summary[name]
        return [s["overall"].get(key)] + [s["by_kind"].get(k, {}).get(key) for k in kinds]

    fig = make_subplots(
        rows=3,
        cols=1,
        subplot_titles=("Speedup over HF greedy generate()", "MAT (tokens per target decode pass)",
                        "Accepted tokens per pass (share of passes)"),
        vertical_spacing=0.09,
    )
    for name in names:
        if name != "hf":
            fig.add_trace(go.Bar(name=name, x=cols, y=values(name, "speedup"), legendgroup=name), row=1, col=1)
    for name in [*names, "oracle"]:
        fig.add_trace(go.Bar(name=name, x=cols, y=values(name, "mat"), legendgroup=name, showlegend=False), row=2, col=1)
    for name in names:
        hist = summary[name]["overall"].get("accepted_hist")
        if not hist:
            continue
        total = sum(hist.values())
        xs = [int(k) for k in hist]
        fig.add_trace(
            go.Bar(name=name, x=xs, y=[hist[str(x)] / total for x in xs], legendgroup=name, showlegend=False),
            row=3, col=1,
        )
    fig.update_layout(
        barmode="group",
        height=1100,
        title=results["meta"]["title"] + f" — {results['meta']['model']} on {results['meta']['device']}",
        template="plotly_white",
    )
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=1)
    fig.update_xaxes(title_text="tokens emitted in one pass", row=3, col=1, dtick=1)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)


# --------------------------------------------------------------------------- entry points


def bench(
    target: Any,
    *,
    suite: str = "default",
    methods: Sequence[str] = ALL_METHODS,
    config: RecapConfig | None = None,
    ablation: bool = False,
    repeats: int = 3,
    max_new_tokens: int = 160,
    limit: int | None = None,
    warmup: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the benchmark on a loaded target; returns the results dict (results.json)."""
    from recap.engine import resolve_budget

    config = config or RecapConfig()
    requests = build_suite(suite, limit)
    if not requests:
        raise ValueError("the suite is empty")
    arms = ablation_arms(config) if ablation else method_arms(methods, config)
    t0 = time.perf_counter()
    records = run_suite(
        target, requests, arms, repeats=repeats, max_new_tokens=max_new_tokens, warmup=warmup, progress=progress
    )
    elapsed = time.perf_counter() - t0
    summary = summarize(records, arms, config.max_depth)
    bad = mismatches(records)
    import transformers

    meta = {
        "title": "RECAP ablation" if ablation else "RECAP benchmark",
        "model": target.name,
        "model_sha256": weights_fingerprint(target.name),
        "family": target.family,
        "device": str(target.device),
        "dtype": str(target.dtype).replace("torch.", ""),
        "suite": suite,
        "requests": len(requests),
        "kinds": list(dict.fromkeys(r.kind for r in requests)),
        "repeats": repeats,
        "max_new_tokens": max_new_tokens,
        "budget": config.budget,
        "resolved_budget": resolve_budget(target, config),
        "max_depth": config.max_depth,
        "config": config.to_dict(),
        "hf_pld_tokens": HF_PLD_TOKENS,
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
                "label": a.label or _default_label(a),
                "memory": a.memory if a.uses_memory else None,
                "config": a.config.to_dict() if a.config is not None else None,
                "budget": resolve_budget(target, a.config) if a.uses_memory and a.config is not None else None,
                "skipped": a.skipped,
            }
            for a in arms
        ],
        "requests": [
            {"index": r.index, "seed": r.seed, "kind": r.kind, "prompt": r.prompt, "answer": r.answer}
            for r in requests
        ],
        "records": records,
        "summary": summary,
        "errors": [{"arm": r["arm"], "request": r["request"], "error": r["error"]} for r in records if r["error"]],
        "lossless": {
            "ok": not bad,
            "checked": sum(1 for r in records if r["arm"] != "hf" and r.get("median_s") is not None),
            "mismatches": [{k: r[k] for k in ("arm", "request", "seed", "kind", "mismatch")} for r in bad],
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


def _default_label(arm: Arm) -> str:
    return {
        "hf": "transformers generate(), greedy (reference)",
        "hf-pld": f"transformers prompt lookup ({HF_PLD_TOKENS} tokens)",
        "ar": "engine, one token per pass",
        "pld": "engine, prompt lookup chain",
        "tr": "Token Recycling (M1, static tree)",
        "recap": "RECAP (M1+M2+M3, fusion, best-first, suffix)",
    }.get(arm.method, arm.method)


def write_results(results: dict[str, Any], out: str | Path, stem: str = "results") -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md", "html": out / f"{stem}.html"}
    paths["json"].write_text(json.dumps(results, indent=1))
    paths["md"].write_text(render_markdown(results))
    render_html(results, paths["html"])
    return paths


def _methods_arg(text: str) -> list[str]:
    items = [m for part in text.split(",") for m in [part.strip()] if m]
    for m in items:
        if m not in ALL_METHODS:
            raise argparse.ArgumentTypeError(f"unknown method {m!r}; choose from {', '.join(ALL_METHODS)}")
    return items


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark every method side by side against HF generate() (speed, MAT, lossless check)",
        description=(
            "Run held-out shape scenes x every question kind with hf, hf-pld, ar, pld, tr and recap "
            "interleaved per request; write results.json, results.md and results.html. Exits non-zero "
            "when any output differs from HF's greedy output."
        ),
    )
    p.add_argument("--model", default=None, help="model directory (default: the embedded shapes model)")
    p.add_argument("--suite", default="default", choices=tuple(SUITES), help="request set (default: default)")
    p.add_argument(
        "--methods",
        nargs="+",
        type=_methods_arg,
        default=None,
        metavar="METHOD",
        help=f"methods to run, space or comma separated (default: all of {', '.join(ALL_METHODS)}; hf is always run)",
    )
    p.add_argument("--out", default="bench-results", help="output folder (default: bench-results)")
    p.add_argument("--ablation", action="store_true", help="run the RECAP ablation rows instead (writes ablation.*)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per request and method (default: 3; quick: 1)")
    p.add_argument("--max-new-tokens", type=int, default=160, help="generation limit per request (default: 160)")
    p.add_argument("--budget", default=None, help="tree node budget for tr / recap: an integer or 'auto'")
    p.add_argument("--limit", type=int, default=None, help="run only the first N requests of the suite")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default: fp32 on CPU, bf16 on CUDA)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: small models gain nothing from more, and on a shared machine "
        "oversubscribed threads slow every method by 5-10x; 0 keeps torch's default)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args: argparse.Namespace, load: Callable[..., Any] | None = None) -> int:
    from recap.models import load_target

    if args.threads < 0:
        raise ValueError(f"--threads must be 0 (torch's default) or positive, got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats if args.repeats is not None else (1 if args.suite == "quick" else 3)
    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {repeats}")
    config = RecapConfig()
    if args.budget is not None:
        config = RecapConfig(budget=args.budget if args.budget == "auto" else int(args.budget))
    methods = [m for group in args.methods for m in group] if args.methods else list(ALL_METHODS)
    target = (load or load_target)(args.model, device=args.device, dtype=args.dtype)
    results = bench(
        target,
        suite=args.suite,
        methods=methods,
        config=config,
        ablation=args.ablation,
        repeats=repeats,
        max_new_tokens=args.max_new_tokens,
        limit=args.limit,
        progress=not args.no_progress,
    )
    paths = write_results(results, args.out, "ablation" if args.ablation else "results")
    print(render_markdown(results))
    print(f"written: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    if not results["lossless"]["ok"]:
        bad = results["lossless"]["mismatches"]
        print("\n" + "!" * 78, file=sys.stderr)
        print(f"LOSSLESS CHECK FAILED: {len(bad)} output(s) differ from HF greedy generate():", file=sys.stderr)
        for m in bad[:10]:
            mm = m["mismatch"]
            print(
                f"  {m['arm']} request {m['request']} (seed {m['seed']}, {m['kind']}) first diff at token "
                f"{mm['first_diff']}\n    expected: {mm['expected']!r}\n    got:      {mm['got']!r}",
                file=sys.stderr,
            )
        print("!" * 78, file=sys.stderr)
        return 1
    return 0
