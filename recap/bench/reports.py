"""The benchmark's reports: results.md (tables), results.html (Plotly figures), results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recap.methods import registered
from recap.trace.stats import AcceptanceStats


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def render_markdown(results: dict[str, Any]) -> str:
    """The tables of results.json as markdown (overall, then MAT and speedup per kind)."""
    meta, summary = results["meta"], results["summary"]
    arms = [a for a in results["arms"] if a["name"] in summary]
    kinds = meta["kinds"]
    lines = [f"# {meta['title']}", ""]
    lines.append(
        f"Model `{meta['model']}` (weights {meta.get('model_sha256') or '?'}) on {meta['device']} "
        f"({meta['dtype']}), suite `{meta['suite']}` "
        f"({meta['requests']} requests), {meta['repeats']} timed repeat(s) per request (median), "
        f"max_new_tokens {meta['max_new_tokens']}, RecapConfig budget {meta['budget']} "
        f"(resolved {meta['resolved_budget']}), depth {meta['max_depth']}; torch {meta['torch']}, "
        f"transformers {meta['transformers']}, {meta['threads']} thread(s)."
    )
    sampling = meta.get("sampling")
    if sampling:
        lines += ["",
                  f"Sampling: {sampling_text(sampling)}. Every row of request i starts from "
                  f'`torch.manual_seed({sampling["seed"]} + i)`; "lossless" counts the outputs identical to '
                  "hf's `generate(do_sample=True)` under that seed."]
    lines.append("")
    lines.append(
        "| method | setting | MAT | tokens/s | speedup vs hf | draft+update share | lossless | tokens | "
        "passes |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for a in arms:
        s = summary[a["name"]]["overall"]
        if not s.get("requests"):
            continue
        share = s.get("draft_update_share")
        label = a["label"]
        if a.get("config") and a["config"].get("budget") == "auto" and not a["config"].get("cost_aware"):
            label += f" (chose {a.get('budget')})"
        lines.append(
            f"| {a['name']} | {label} | {_f(s['mat'])} | {_f(s['tokens_per_s'], '{:.1f}')} | "
            f"{_f(s['speedup'])}x | {_f(share, '{:.0%}') if share is not None else '–'} | "
            f"{s['lossless']}/{s['requests']}{_ties(s)} | {s['tokens']} | {s['steps']} |"
        )
    o = summary["oracle"]["overall"]
    lines.append(f"| oracle | {'the sampled' if sampling else 'greedy'} continuation as one chain of depth "
                 f"{meta['max_depth']} | {_f(o['mat'])} "
                 f"| – | – | – | – | {o['tokens']} | {o['steps']} |")
    for title, key, fmt in (("MAT per question kind", "mat", "{:.2f}"),
                            ("Speedup over hf per question kind", "speedup", "{:.2f}x"),):
        lines += ["",
                  f"## {title}",
                  "", "| method | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
        names = [a["name"] for a in arms] + (["oracle"] if key == "mat" else [])
        for name in names:
            by = summary[name]["by_kind"]
            cells = [_f(by[k].get(key), fmt) if by.get(k, {}).get("requests") else "–" for k in kinds]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += followup_markdown(results)  # conversations only
    lines += acceptance_markdown(results)  # results written before the figures: nothing
    lines += ["", "## Where the time goes", ""]
    lines.append(
        "| method | ms/request | prefill ms/request | other ms/request | draft ms/pass | verify ms/pass "
        "| update ms/pass | nodes/pass | decode tokens/s | one-token tokens/s |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for a in arms:
        s = summary[a["name"]]["overall"]
        if not s.get("requests"):
            continue
        n, st = s["requests"], max(s["steps"], 1)
        row = f"| {a['name']} | {s['time_s'] / n * 1e3:.1f} |"
        if "draft_s" in s:
            other = s.get("total_s", 0.0) - s["prefill_s"] - s["draft_s"] - s["verify_s"] - s["update_s"]
            row += (
                f" {s['prefill_s'] / n * 1e3:.1f} | {max(other, 0.0) / n * 1e3:.1f} | "
                f"{s['draft_s'] / st * 1e3:.2f} |"
                f" {s['verify_s'] / st * 1e3:.2f} | {s['update_s'] / st * 1e3:.2f} |"
                f" {_f(s.get('nodes_per_pass'), '{:.1f}')} | {_f(s.get('decode_tokens_per_s'), '{:.0f}')} |"
                f" {_f(s.get('one_token_tokens_per_s'), '{:.0f}')} |"
            )
        else:
            row += " – | – | – | – | – | – | – | – |"
        lines.append(row)
    lines.append("")
    lines.append(
        "ms/request: median wall time per request. The engine rows split their live run: prefill (with the "
        "prompt's memory writes), other (image preprocessing, prompt building, loop overhead), and per "
        "target pass the draft, verify (tree forward) and update (KV compaction, memory writes) times; "
        "nodes/pass: drafted nodes per pass (the tree size each step chose, root excluded); decode "
        "tokens/s: the row's tokens over its passes' draft + verify + update seconds (realised); one-token "
        "tokens/s: what plain one-token passes earn as the size loop measured them, the lower quartile of "
        "its plain passes (loop-sized rows: the speed their trees were held to; – elsewhere)."
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
        lines.append(f"All outputs identical to hf's ({results['lossless']['checked']} checked"
                     + (
                         "; under sampling the engine rows: transformers' prompt lookup draws its candidates "
                         "differently, so its row's count is shown, not checked)."
                         if sampling
                         else ")."
                     ))
    else:
        lines.append(f"**{len(bad)} output(s) differ from hf's "
                     f"{'output under the same seed' if sampling else 'greedy output'}:**")
        for m in bad[:20]:
            lines.append(
                f"- `{m['arm']}` request {m['request']} (seed {m['seed']}, {m['kind']}): first difference "
                f"at token {m['mismatch']['first_diff']}"
                + (f" ({m['mismatch']['precision']})" if m["mismatch"].get("precision") else "")
            )
    tied = results["lossless"].get("ties") or []
    if tied:
        lines += ["", f"{len(tied)} output(s) differ from hf's by a reduced-precision tie (the model rates "
                  "both tokens equal within the dtype's rounding; docs/design.md, Precision):"]
        lines += [f"- `{t['arm']}` request {t['request']}: {t['precision']}" for t in tied[:20]]
    lines.append("")
    return "\n".join(lines)


def _ties(summary: dict[str, Any]) -> str:
    """The lossless column's note of bf16 / fp16 ties: " (+2 ties)" ("" when none)."""
    n = summary.get("ties") or 0
    return f" (+{n} tie{'s' if n > 1 else ''})" if n else ""


def sampling_text(sampling: dict[str, Any]) -> str:
    """The sampling fields of a run in words: "temperature 0.7, top_p 0.9".

    do_sample and the seed are left out."""
    return (", ".join(f"{k} {v}" for k, v in sampling.items() if k not in ("do_sample", "seed"))
            or "the model's own")


def followup_markdown(results: dict[str, Any]) -> list[str]:
    """A conversation suite's section: each row per turn (MAT, speedup), first turns against later
    ones, per category, and what carrying the contextual rows gives RECAP (its rows side by side)."""
    summary = results["summary"]
    arms = [a for a in results["arms"] if "by_turn" in summary.get(a["name"], {})]
    if not arms:
        return []
    turns = sorted({t for a in arms for t in summary[a["name"]]["by_turn"]}, key=int)
    lines = ["",
             "## Conversations",
             "",
             f"{results['meta'].get('conversations', 0)} conversations; each turn is decoded with the "
             'earlier turns and the reference\'s answers in its context. "later" pools the second and '
             "later turns.", "",
             "| method | "
             + " | ".join(f"MAT turn {t}" for t in turns)
             + " | MAT first | MAT later | later / first | speedup first | speedup later | lossless |",
             "|---|" + "---:|" * (len(turns) + 6)]
    for a in arms:
        s = summary[a["name"]]
        first, later = s["by_position"]["first"], s["by_position"]["later"]
        cells = [
            _f(s["by_turn"][t].get("mat")) if s["by_turn"].get(t, {}).get("requests") else "–" for t in turns
        ]
        ratio = later["mat"] / first["mat"] if later.get("mat") and first.get("mat") else None
        done = first.get("lossless", 0) + later.get("lossless", 0)
        total = first.get("requests", 0) + later.get("requests", 0)
        lines.append(
            f"| {a['name']} | " + " | ".join(cells) + f" | {_f(first.get('mat'))} | {_f(later.get('mat'))} | "
            f"{_f(ratio, '{:.3f}x')} | {_f(first.get('speedup'), '{:.2f}x')} | "
            f"{_f(later.get('speedup'), '{:.2f}x')} | {done}/{total} |"
        )
    categories = list(dict.fromkeys(c for a in arms for c in summary[a["name"]]["by_category"]))
    if len(categories) > 1:
        lines += ["", "| method | " + " | ".join(f"{c}: MAT first / later" for c in categories) + " |",
                  "|---|" + "---:|" * len(categories)]
        for a in arms:
            by = summary[a["name"]]["by_category"]
            lines.append(
                f"| {a['name']} | "
                + " | ".join(
                    f"{_f(by[c]['first'].get('mat'))} / {_f(by[c]['later'].get('mat'))}" if c in by else "–"
                    for c in categories
                )
                + " |"
            )
    by_name = {a["name"]: summary[a["name"]]["by_position"]["later"] for a in arms}
    for a in arms:
        mine = by_name[a["name"]]
        if a["method"] != "recap" or not mine.get("mat"):
            continue
        bits = []
        for other, what in (("tr", "Token Recycling"), ("recap", "the default `recap` row")):
            theirs = by_name.get(other, {})
            if other != a["name"] and theirs.get("mat") and theirs.get("tokens_per_s"):
                bits.append(f"against {what} MAT {mine['mat'] / theirs['mat']:.3f}x, tokens/s "
                            f"{mine['tokens_per_s'] / theirs['tokens_per_s']:.3f}x")
        if bits:
            lines += ["", f"Later turns, `{a['name']}`: " + "; ".join(bits) + "."]
    return lines


def acceptance_lines(results: dict[str, Any]) -> list[str]:
    """One line per engine row: its pooled acceptance (``AcceptanceStats.summary``), as the CLI prints."""
    summary = results["summary"]
    out = []
    for a in results["arms"]:
        acc = summary.get(a["name"], {}).get("overall", {}).get("acceptance")
        if acc:
            out.append(f"{a['name']}: {AcceptanceStats.from_dict(acc).summary()}")
    return out


def acceptance_markdown(results: dict[str, Any]) -> list[str]:
    """The acceptance section: per row the pooled per-depth conditional rates, passes by accepted drafted
    tokens, the rate per question kind (and per category), and requests by their own rate."""
    summary = results["summary"]
    rows = [(a["name"], summary[a["name"]]) for a in results["arms"]
            if summary.get(a["name"], {}).get("overall", {}).get("acceptance")]
    if not rows:
        return []
    stats = {name: AcceptanceStats.from_dict(s["overall"]["acceptance"]) for name, s in rows}
    depth = max(len(st.per_depth) for st in stats.values())
    lines = ["", "## Acceptance", "",
             "Depth d: P(the draft's token at depth d accepted | depth d - 1 accepted), pooled over the "
             "row's passes (– : no pass reached that depth with a drafted token). Accepted: the drafted "
             "tokens accepted over those drafted (each pass also emits the target's own token).", "",
             "| method | accepted / drafted | tokens/pass | "
             + " | ".join(f"d{d}" for d in range(1, depth + 1)) + " |", "|---|---:|---:|" + "---:|" * depth]
    for name, st in stats.items():
        rates = st.depth_rates() + [None] * (depth - len(st.per_depth))
        lines.append(f"| {name} | {st.accepted}/{st.drafted} ({_f(st.acceptance_rate, '{:.0%}')}) | "
                     f"{st.tokens_per_pass:.2f} | " + " | ".join(_f(r) for r in rates) + " |")
    most = max(max(st.accepted_hist, default=0) for st in stats.values())
    lines += ["", "Passes by accepted drafted tokens (share of the row's passes):", "",
              "| method | " + " | ".join(str(k) for k in range(most + 1)) + " |",
              "|---|" + "---:|" * (most + 1)]
    for name, st in stats.items():
        lines.append(f"| {name} | " + " | ".join(f"{st.accepted_hist.get(k, 0) / max(st.steps, 1):.0%}"
                                                 for k in range(most + 1)) + " |")
    groups = [("question kind", "by_kind", list(results["meta"].get("kinds", [])))]
    cats = list(dict.fromkeys(c for _, s in rows for c in s.get("by_category", {})))
    if len(cats) > 1:
        groups.append(("category", "by_category", cats))
    for what, key, names in groups:
        lines += ["", f"Acceptance rate per {what}:", "", "| method | " + " | ".join(names) + " |",
                  "|---|" + "---:|" * len(names)]
        for name, s in rows:
            by = s.get(key, {})
            cells = []
            for k in names:
                group = by.get(k, {})
                acc = (group.get("all", group)).get("acceptance")  # by_category holds all / first / later
                cells.append(_f(AcceptanceStats.from_dict(acc).acceptance_rate, "{:.0%}") if acc else "–")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    bins = len(next(s["overall"]["rate_hist"] for _, s in rows))
    lines += ["", "Requests by their own acceptance rate (a very low rate flags garbled output, a very high "
              "one a repetition loop):", "",
              "| method | " + " | ".join(f"{100 * i // bins}-{100 * (i + 1) // bins}%" for i in range(bins))
              + " |", "|---|" + "---:|" * bins]
    for name, s in rows:
        lines.append(f"| {name} | " + " | ".join(str(n) for n in s["overall"]["rate_hist"]) + " |")
    return lines


def render_html(results: dict[str, Any], path: Path) -> None:
    """Interactive Plotly figures: speedup and MAT per method and kind; accepted-length histograms."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    summary, kinds = results["summary"], results["meta"]["kinds"]
    names = [a["name"] for a in results["arms"] if a["name"] in summary]
    cols = ["overall", *kinds]
    # Method rows take the registry's colours (as in the app); other rows plotly's defaults.
    colours = {m.name: m.colour for m in registered()}
    marker = {name: {"color": colours[name]} if name in colours else {} for name in [*names, "oracle"]}

    def values(name: str, key: str) -> list[float | None]:
        s = summary[name]
        return [s["overall"].get(key)] + [s["by_kind"].get(k, {}).get(key) for k in kinds]

    fig = make_subplots(
        rows=3,
        cols=1,
        subplot_titles=(
            "Speedup over HF "
            + ("generate(do_sample=True)" if results["meta"].get("sampling") else "greedy generate()"),
            "MAT (tokens per target decode pass)", "Accepted tokens per pass (share of passes)",
        ),
        vertical_spacing=0.09,
    )
    for name in names:
        if name != "hf":
            fig.add_trace(
                go.Bar(name=name, x=cols, y=values(name, "speedup"), legendgroup=name, marker=marker[name]),
                row=1, col=1,
            )
    for name in [*names, "oracle"]:
        fig.add_trace(go.Bar(
                          name=name, x=cols, y=values(name, "mat"), legendgroup=name, showlegend=False,
                          marker=marker[name],
                      ),
                      row=2, col=1)
    for name in names:
        hist = summary[name]["overall"].get("accepted_hist")
        if not hist:
            continue
        total = sum(hist.values())
        xs = [int(k) for k in hist]
        fig.add_trace(
            go.Bar(name=name, x=xs, y=[hist[str(x)] / total for x in xs], legendgroup=name, showlegend=False,
                   marker=marker[name]),
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


def write_results(results: dict[str, Any], out: str | Path, stem: str = "results") -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "md": out / f"{stem}.md", "html": out / f"{stem}.html"}
    paths["json"].write_text(json.dumps(results, indent=1))
    paths["md"].write_text(render_markdown(results))
    render_html(results, paths["html"])
    return paths
