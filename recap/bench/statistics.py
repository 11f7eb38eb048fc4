"""The benchmark's statistics: per-row totals, MAT, pooled speedups, the oracle, mismatches."""

from __future__ import annotations

import math
from typing import Any

from recap.bench.suite import HF_METHODS, Arm
from recap.trace.stats import AcceptanceStats, pooled, rate_histogram

#: Bins of the per-request acceptance-rate histogram (``rate_hist``: tenths of [0, 1]).
RATE_BINS = 10


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
        "ties": sum(bool(r.get("tie")) for r in done),  # bf16 / fp16 differences within the tie tolerance
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
        out["decode_tokens_per_s"] = tokens / decode  # realised: every token over the passes' own seconds
    ones = sorted(r["one_token_s"] for r in done if r.get("one_token_s"))
    if ones:  # what one-token passes would earn, as the size loop measured them (the median request's)
        out["one_token_tokens_per_s"] = 1.0 / ones[len(ones) // 2]
    sizes = [n for r in done for n in r.get("tree_sizes", [])]
    if sizes:
        out["nodes_per_pass"] = sum(sizes) / len(sizes)
    lengths = [n for r in done for n in r.get("accepted_lengths", [])]
    if lengths:
        hist: dict[str, int] = {}
        for n in sorted(lengths):
            hist[str(n)] = hist.get(str(n), 0) + 1
        out["accepted_hist"] = hist
    out.update(acceptance_summary(done))
    return out


def acceptance_summary(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows' acceptance figures pooled (``acceptance``: per-depth rates, histogram of accepted drafted
    tokens per pass, ``recap.trace.stats``) and the requests by their own acceptance rate (``rate_hist``,
    ``RATE_BINS`` bins of [0, 1]); {} when no record has them (hf rows, results written before them)."""
    per_request = [AcceptanceStats.from_dict(r["acceptance"]) for r in recs if r.get("acceptance")]
    if not per_request:
        return {}
    return {"acceptance": pooled(per_request).to_dict(), "rate_hist": rate_histogram(per_request, RATE_BINS)}


def oracle_stats(hf_recs: list[dict[str, Any]], depth: int) -> dict[str, Any]:
    """MAT of proposing the true greedy continuation as one chain of ``depth`` nodes.

    Each pass then accepts ``depth`` drafted tokens plus the bonus one, so a request of
    L tokens takes ceil(L / (depth + 1)) passes.
    """
    tokens = sum(r["tokens"] for r in hf_recs)
    steps = sum(math.ceil(r["tokens"] / (depth + 1)) for r in hf_recs if r["tokens"])
    return {
        "requests": len(hf_recs), "tokens": tokens, "steps": steps, "mat": tokens / steps if steps else 0.0,
    }


def summarize(records: list[dict[str, Any]], arms: list[Arm], depth: int) -> dict[str, Any]:
    """Per row: ``overall``, ``by_kind`` and ``by_position`` (``first``: a scene's first request in
    the suite, or a conversation's first turn; ``later``: every later one); on conversations also
    ``by_turn`` ("1", "2", ...) and ``by_category`` (each: all, first and later turns); plus the oracle's."""
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
            "by_position": {
                "first": _stats([r for r in mine if not r.get("position", 0)], hf),
                "later": _stats([r for r in mine if r.get("position", 0)], hf),
            },
        }
        if any(r.get("conversation") for r in mine):
            turns = sorted({r.get("position", 0) for r in mine})
            categories = list(dict.fromkeys(r.get("category", "") for r in mine))
            out[arm.name]["by_turn"] = {
                str(t + 1): _stats([r for r in mine if r.get("position", 0) == t], hf) for t in turns
            }
            by_category: dict[str, Any] = {}
            for c in categories:
                group = [r for r in mine if r.get("category", "") == c]
                by_category[c] = {
                    "all": _stats(group, hf),
                    "first": _stats([r for r in group if not r.get("position", 0)], hf),
                    "later": _stats([r for r in group if r.get("position", 0)], hf),
                }
            out[arm.name]["by_category"] = by_category
    hf_recs = list(hf.values())
    out["oracle"] = {
        "overall": oracle_stats(hf_recs, depth),
        "by_kind": {k: oracle_stats([r for r in hf_recs if r["kind"] == k], depth) for k in kinds},
    }
    return out


def mismatches(records: list[dict[str, Any]], *, sampling: bool = False) -> list[dict[str, Any]]:
    """The rows' outputs that differ from hf's: the lossless check's failures (a bf16 / fp16 tie is none).

    Under sampling only the engine rows count: transformers' own prompt lookup (hf-pld) draws
    every candidate position at once, another use of the generator, so its tokens equal plain
    sampling's in distribution, not under the same seed (its identical share is still reported).
    """
    return [r for r in checked(records, sampling=sampling) if not r["match"] and not r.get("tie")]


def ties(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows' outputs that differ from hf's in bf16 / fp16 by a tie (``recap.verification.ties``):
    lossless within the dtype's rounding, each with its sentence ("bf16 tie at token 27: ...")."""
    return [r for r in checked(records) if not r["match"] and r.get("tie")]


def checked(records: list[dict[str, Any]], *, sampling: bool = False) -> list[dict[str, Any]]:
    """The rows' runs the lossless check covers (see ``mismatches``)."""
    skip = HF_METHODS if sampling else ("hf",)
    return [r for r in records if r["method"] not in skip and r.get("median_s") is not None]
