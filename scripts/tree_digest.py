"""A digest of everything the drafters did over a bench suite (to prove an optimisation changed nothing).

    python scripts/tree_digest.py [--model DIR] [--suite quick] [--methods tr recap recap-cost] [--verbose]

For each method row, one persistent ``TokenMemory`` decodes the suite's requests in order
(``recap.iter_steps``, trace on), and a sha256 is taken over every step's tree (tokens,
parents, depths, scores, fused, sources, suffix, origins, order), the target's argmax, the
accepted path and the emitted tokens, the step's trace nodes (timings excluded), and, at the
end, the memory's dense table and calibration counts. Floats are hashed by their exact
``repr``. Two runs of the same code print the same digests; a change that alters one drafted
tree, score or memory row changes them.

Rows (``ROWS``): tr, recap, recap with ablation settings, pld. ``recap-cost`` is RECAP with ``cost_aware=True`` under a fixed ``PassCost`` built here
(the measured verify curve depends on timing, so the library's own would not repeat).
Every row runs with ``scoped_memory=False`` (``BASE``: the trees as they were before the
image-scoped memories) unless it sets it: ``recap-scoped`` is RECAP with them on (as the app and
the benchmark run it), its digest also covering the scoped rows left at the end, under their scope
names (the image keys).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import recap  # noqa: E402
import recap.engine.autobudget  # noqa: E402
from recap.bench import build_suite  # noqa: E402
from recap.drafting.treecost import PassCost  # noqa: E402

#: A fixed pass cost (seconds): 3 ms a pass, 30 us a node, a small quadratic term, 10 us host per node.
FIXED_FIT = (3e-3, 30e-6, 0.4e-6)
FIXED_HOST = {"host_s_per_node": 10e-6, "host_s_per_pass": 0.1e-3}


#: Settings under every row's own: the image-scoped memories off (so the older rows' digests stand),
#: 24 nodes a step, grown to the budget (the library's default before trees were sized by cost).
BASE: dict[str, Any] = {"scoped_memory": False, "budget": 24, "cost_aware": False}
#: row name -> (method, RecapConfig settings over ``BASE``): the defaults, cost-aware, the ablations' branches.
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "tr": ("tr", {}),
    "recap": ("recap", {}),
    "recap-cost": ("recap", {"cost_aware": True}),
    "recap-nocal": ("recap", {"calibrate": False}),
    "recap-fixed": ("recap", {"fusion": "fixed", "depth_discount": 0.9}),
    "recap-backoff": ("recap", {"fusion": "backoff", "suffix": False}),
    "recap-m1": ("recap", {"use_m2": False, "use_m3": False, "budget": 8}),
    "recap-narrow": ("recap", {"max_children": 4, "suffix_max_tokens": 4}),
    "recap-64": ("recap", {"budget": 64, "max_depth": 12}),
    "recap-cost-64": ("recap", {"budget": 64, "cost_aware": True, "max_children": 2}),
    "tr-64": ("tr", {"budget": 64}),
    "pld": ("pld", {}),
    "recap-scoped": ("recap", {"scoped_memory": True}),
}


def _fixed_pass_cost(target: Any, cap: int, context_tokens: int | None = None) -> PassCost:
    return PassCost.from_fit(FIXED_FIT, cap, **FIXED_HOST)


def _entry(e: Any) -> tuple:
    return (e.ids, e.probs, e.entropy, e.concentration, e.request, e.step, e.depth)


def tree_record(tree: Any) -> tuple:
    sources = tuple(tuple((kind, w, _entry(e)) for kind, w, e in src) for src in tree.sources)
    return (
        tuple(tree.tokens), tuple(tree.parents), tuple(tree.depths), tuple(tree.scores), tuple(tree.fused),
        sources, tuple(tree.suffix), tuple(tree.origins), tuple(tree.order),
    )


def trace_record(ts: Any) -> tuple:
    nodes = []
    for n in ts.nodes:
        d = dict(vars(n))
        d["sources"] = [sorted(vars(s).items()) for s in n.sources]
        nodes.append(sorted(d.items()))
    return (ts.step, repr(nodes), tuple(ts.accepted), ts.bonus_token, tuple(ts.emitted), ts.tree_size)


def run(target: Any, reqs: list, images: dict, method: str, cfg: recap.RecapConfig, max_new: int,
        verbose: bool) -> str:
    h = hashlib.sha256()
    memory = recap.TokenMemory.for_target(target, cfg.top_k)
    steps = lengths = 0
    for r in reqs:
        for rec in recap.iter_steps(target, images[r.seed], r.prompt, method=method, memory=memory, config=cfg,
                                    max_new_tokens=max_new, trace=True):
            part = repr((tree_record(rec.tree), tuple(rec.argmax), tuple(rec.accepted), rec.bonus,
                         tuple(rec.emitted), rec.tree_size, trace_record(rec.trace_step)))
            h.update(part.encode())
            steps += 1
            lengths += len(rec.emitted)
        h.update(repr(("request-end", rec.token_ids)).encode())
    for name in ("ids", "probs", "entropy", "concentration", "request", "step", "depth"):
        h.update(getattr(memory, name).numpy().tobytes())
    h.update(repr(memory.calibration.table).encode())
    for key, scope in memory.scoped.scopes.items():  # none unless the row keeps image-scoped rows
        h.update(repr((key, scope.last_request, [(k, _entry(e)) for k, e in (*scope.m2.items(), *scope.m3.items())]))
                 .encode())
    if verbose:
        print(f"  {steps} steps, {lengths} tokens (MAT {lengths / steps:.3f})")
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--methods", nargs="+", default=list(ROWS))
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    recap.engine.autobudget.pass_cost = _fixed_pass_cost  # the engine calls it through the module: no timing enters
    target = recap.load_target(args.model)
    reqs = build_suite(args.suite)
    images = {r.seed: r.image() for r in reqs}
    for row in args.methods:
        method, settings = ROWS[row]
        cfg = recap.RecapConfig(**{**BASE, **settings})
        print(f"{row:13s} {run(target, reqs, images, method, cfg, args.max_new_tokens, args.verbose)}", flush=True)


if __name__ == "__main__":
    main()
