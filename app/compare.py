"""Compare tab: the same request with every method, side by side.

Each method drafts from its own session memory (RECAP's and Token Recycling's persistent
memories are separate), and every method's output must be token-identical (the engine
is lossless): a badge says so, loudly when not. Timing is the engine's compute time
(prefill + draft + verify + update), measured one method after the other on this machine.
"""

from __future__ import annotations

import json
from typing import Any

import gradio as gr

import recap
from app.callbacks import (
    UserError,
    check_request,
    decode_run,
    error_markdown,
    get_model,
    model_name,
    on_gpu,
    open_image,
    parse_config,
    warn,
)
from app.figures import compare_lengths_figure, empty_figure, tree_figure
from app.session import Run, Session
from app.settings import METHOD_NAMES, Settings
from app.views import compute_seconds, find_step

ORDER = ("recap", "tr", "pld", "ar")
TABLE_HEADERS = ["method", "tokens", "steps", "tokens / step", "time (s)", "tokens / s", "speedup over ar"]


def run_all(session: Session, settings: Settings, image: Any, prompt: Any, max_new_tokens: Any,
            config: recap.RecapConfig, progress: Any = None) -> dict[str, Run]:
    """Decode the request with every method (ar first: it is the reference)."""
    prompt, _, n = check_request(settings, prompt, "ar", max_new_tokens)
    img = open_image(image)
    model = get_model(model_name(session, settings))
    runs: dict[str, Run] = {}
    for i, method in enumerate(("ar", "pld", "tr", "recap")):
        if progress is not None:
            progress(i / 4, desc=f"decoding with {METHOD_NAMES[method]}")
        run = None
        for run in decode_run(session, settings, img, prompt, method, n, config, model=model, source="compare",  # noqa: B007
                              label=f"compare · {METHOD_NAMES[method]}"):
            pass
        assert run is not None
        runs[method] = run
    session.compare = {"runs": runs, "summary": summarize(runs)}
    session.current = runs["recap"]
    session.view_step = None
    return runs


def summarize(runs: dict[str, Run]) -> dict[str, Any]:
    """Numbers of a comparison (what the table, the badge and the API show)."""
    ref = runs["ar"].trace
    ref_time = compute_seconds(ref)
    out: dict[str, Any] = {"identical": True, "reference": "ar", "methods": {}}
    for method in ORDER:
        if method not in runs:
            continue
        t = runs[method].trace
        secs = compute_seconds(t)
        same = t.token_ids == ref.token_ids
        out["identical"] &= same
        out["methods"][method] = {
            "tokens": len(t.token_ids),
            "steps": t.decode_steps,
            "tokens_per_step": round(t.mat, 4),
            "seconds": round(secs, 6),
            "tokens_per_second": round(len(t.token_ids) / secs, 3) if secs > 0 else 0.0,
            "speedup": round(ref_time / secs, 4) if secs > 0 else 0.0,
            "identical_to_ar": same,
            "accepted_lengths": [s.accepted_length for s in t.steps],
            "token_ids": list(t.token_ids),
            "run_id": runs[method].run_id,
        }
    return out


def badge(summary: dict[str, Any]) -> str:
    if summary["identical"]:
        return "### ✅ All four outputs are token-identical (lossless)"
    bad = [METHOD_NAMES[m] for m, v in summary["methods"].items() if not v["identical_to_ar"]]
    return (
        "### ❌ WARNING: outputs differ from autoregressive decoding for "
        + ", ".join(bad)
        + ". Speculative decoding must be lossless: this is a bug, please report it."
    )


def table(summary: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for method, v in summary["methods"].items():
        rows.append([METHOD_NAMES[method], v["tokens"], v["steps"], round(v["tokens_per_step"], 2),
                     round(v["seconds"], 3), round(v["tokens_per_second"], 1), f"{v['speedup']:.2f}x"])
    return rows


def trees(session: Session, method_a: str, method_b: str, step: Any) -> tuple[Any, Any]:
    comp = session.compare
    if not comp:
        return empty_figure("Run a comparison first."), empty_figure("Run a comparison first.")
    try:
        k = int(step)
    except (TypeError, ValueError):
        k = 1
    figs = []
    for method in (method_a, method_b):
        run = comp["runs"].get(method)
        if run is None or not run.trace.steps:
            figs.append(empty_figure(f"no run for {method!r}"))
            continue
        st = find_step(run.trace, k)
        note = "" if st.step == k else f" (it finished at step {st.step})"
        title = f"{METHOD_NAMES[method]} · step {st.step}{note}: {len(st.nodes) - 1} drafted, {len(st.emitted)} tokens"
        figs.append(tree_figure(st, title=title, uirevision=f"compare-{method}", max_height=700))
    return figs[0], figs[1]


def make_handlers(settings: Settings) -> dict[str, Any]:
    @on_gpu
    def compare_ui(session: Session, image: Any, prompt: Any, max_new: Any, method_a: Any, method_b: Any, *advanced: Any,
                   progress=gr.Progress()):  # noqa: B008
        """Run all four methods; fill the badge, table, chart and the two trees."""
        if not session.busy.acquire(blocking=False):
            warn("A run is already in progress in this session.")
            return (gr.skip(),) * 7
        try:
            config = parse_config(advanced)
            run_all(session, settings, image, prompt, max_new, config, progress)
        except UserError as exc:
            warn(str(exc))
            return (error_markdown(str(exc)), *(gr.skip(),) * 6)
        finally:
            session.busy.release()
        summary = session.compare["summary"]
        n = max(v["steps"] for v in summary["methods"].values())
        fig_a, fig_b = trees(session, method_a, method_b, 1)
        return (
            badge(summary),
            gr.Dataframe(value=table(summary), headers=TABLE_HEADERS),
            compare_lengths_figure({m: r.trace for m, r in session.compare["runs"].items()}),
            gr.Slider(minimum=1, maximum=max(n, 2), value=1, step=1, interactive=n > 1),
            fig_a,
            fig_b,
            {k: v for k, v in summary.items()},
        )

    @on_gpu
    def compare_api(session: Session, image: Any, prompt: Any, max_new: Any) -> str:
        """API: run recap, tr, pld and ar with default settings; returns the comparison as JSON."""
        if not session.busy.acquire(blocking=False):
            raise gr.Error("a request is already running in this session", print_exception=False)
        try:
            run_all(session, settings, image, prompt, max_new, recap.RecapConfig())
        except UserError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        finally:
            session.busy.release()
        return json.dumps(session.compare["summary"])

    def compare_trees(session: Session, method_a: Any, method_b: Any, step: Any):
        return trees(session, str(method_a), str(method_b), step)

    return {"compare_ui": compare_ui, "compare_api": compare_api, "compare_trees": compare_trees}
