"""Tokens per step against temperature, RECAP and Token Recycling: the How it works chart's data.

    python scripts/sampling_curve.py  # writes assets/sampling-curve.json (about 2 minutes on 2 CPU cores)

The embedded shapes model decodes the six descriptive shipped examples (assets/examples, in
order) at each temperature, with top-k and top-p off (temperature alone shapes the
distribution), from the shipped warm memory as an app session starts, under a few seeds; a
point is the total tokens over the total steps of one method at one temperature (all
examples and seeds together). Greedy decoding is the reference line. Every run is recorded
(``runs``), so ``tests/test_app_sampling_curve.py`` decodes one afresh and finds it unchanged.
One sampled step of RECAP at temperature 2 is kept as the section's worked example
(``example``): the drafted children of its root, each with its acceptance probability, and the
token the target drew there.

The app reads the file (``app.sampling_curve``); nothing here runs when a page loads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import recap  # noqa: E402
from recap.models.target import DEFAULT_MODEL_DIR  # noqa: E402
from recap.shapes.warm_memory import load_warm  # noqa: E402

OUT = REPO / "assets" / "sampling-curve.json"
EXAMPLES = REPO / "assets" / "examples"
WARM = REPO / "assets" / "warm-memory"
TEMPERATURES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)
SEEDS = (0, 1, 2)
METHODS = ("recap", "tr")
N_EXAMPLES = 6  # the descriptive ones: long answers, many recycled phrases
MAX_NEW = 96
EXAMPLE_TEMPERATURE = 2.0  # hot enough that a root's drafted children split the draw


def examples(n: int = N_EXAMPLES) -> list[tuple[str, str]]:
    """(image path, prompt) of the first ``n`` shipped examples."""
    entries = json.loads((EXAMPLES / "examples.json").read_text(encoding="utf-8"))
    return [(str(EXAMPLES / e["file"]), e["prompt"]) for e in entries[:n]]


#: The trees the curve was recorded with: 24 fixed nodes, the image scopes on (the app's session).
CONFIG = recap.RecapConfig(budget=24, cost_aware=False, scoped_memory=True)


def generation_config(temperature: float | None) -> dict[str, Any] | None:
    """Sampling at ``temperature`` with top-k and top-p off (None: the model's own, greedy, config)."""
    if temperature is None:
        return None
    return {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}


def decode_series(
    target: Any, method: str, temperature: float | None, seed: int, requests: list[tuple[str, str]],
    max_new: int = MAX_NEW, *, trace: bool = False,
) -> list[recap.Generation]:
    """The requests in order, one memory for all of them starting from the warm memory (as a session does)."""
    memory = load_warm(WARM, target.vocab_size).memory.clone()
    return [recap.generate(target, image, prompt, method=method, max_new_tokens=max_new, memory=memory,
                           generation_config=generation_config(temperature), seed=seed, trace=trace,
                           config=CONFIG)
            for image, prompt in requests]


def worked_example(gens: list[recap.Generation]) -> dict[str, Any]:
    """The step (after the first, over every request) whose root's drafted children split the target's
    probability most evenly (the largest second-best chance): what the draw there chose from.
    ``context``: the last output tokens before that step (the root's the last of them)."""
    best: tuple[float, recap.Generation, Any] | None = None
    for gen in gens:
        assert gen.trace is not None and gen.trace.sampling is not None
        for step in gen.trace.steps[1:]:
            chances = sorted(
                (step.accept_probs[n.index] for n in step.nodes[1:] if n.parent == 0), reverse=True
            )
            if len(chances) >= 2 and (best is None or chances[1] > best[0]):
                best = (chances[1], gen, step)
    if best is None:
        raise LookupError("no step with two drafted children at the root")
    _, gen, step = best
    trace = gen.trace
    assert trace is not None and trace.sampling is not None
    before = sum(len(s.emitted) for s in trace.steps[: step.step - 1])
    kids = [n for n in step.nodes[1:] if n.parent == 0]
    return {
        "temperature": trace.sampling.temperature, "seed": trace.sampling.seed, "prompt": trace.prompt,
        "request": gens.index(gen), "step": step.step, "context": trace.token_texts[:before][-6:],
        "root": step.nodes[0].text, "drawn": step.nodes[0].target_text,
        "children": [
            {"text": k.text, "accept_prob": step.accept_probs[k.index], "accepted": k.accepted} for k in kids
        ],
        "accepted_tokens": len(step.emitted),
    }


def measure(temperatures: tuple[float, ...] = TEMPERATURES, seeds: tuple[int, ...] = SEEDS) -> dict[str, Any]:
    torch.manual_seed(0)
    target = recap.load_target(DEFAULT_MODEL_DIR)
    requests = examples()
    runs: list[dict[str, Any]] = []
    curve: dict[str, list[float]] = {m: [] for m in METHODS}
    greedy: dict[str, float] = {}
    example: dict[str, Any] | None = None
    for method in METHODS:
        gens = decode_series(target, method, None, 0, requests)
        greedy[method] = round(sum(len(g.token_ids) for g in gens) / sum(g.decode_steps for g in gens), 4)
        for t in temperatures:
            tokens = steps = 0
            for seed in seeds:
                want_example = (
                    method == "recap" and t == EXAMPLE_TEMPERATURE and seed == seeds[0] and example is None
                )
                gens = decode_series(target, method, t, seed, requests, trace=want_example)
                if want_example:
                    example = worked_example(gens)
                for i, g in enumerate(gens):
                    runs.append({"method": method, "temperature": t, "seed": seed, "example": i,
                                 "tokens": len(g.token_ids), "steps": g.decode_steps})
                tokens += sum(len(g.token_ids) for g in gens)
                steps += sum(g.decode_steps for g in gens)
            curve[method].append(round(tokens / steps, 4))
            print(f"{method} T={t}: {curve[method][-1]:.2f} tokens/step", flush=True)
    return {
        "format": "recap-sampling-curve", "version": 1,
        "command": "python scripts/sampling_curve.py",
        "model": "shapes-vlm", "examples": [Path(p).name for p, _ in requests], "max_new_tokens": MAX_NEW,
        "memory": "assets/warm-memory (a fresh copy per method, temperature and seed)",
        "sampling": "do_sample, top_k 0 and top_p 1 (off): the temperature alone", "seeds": list(seeds),
        "temperatures": list(temperatures), "tokens_per_step": curve, "greedy_tokens_per_step": greedy,
        "example": example, "runs": runs,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    data = measure()
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
