"""The benchmark's suite (which requests, in which order) and its rows (which methods, which settings)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from recap.core.config import RecapConfig
from recap.memory.store import TokenMemory
from recap.methods import get_method, method_names

#: Rows that run transformers' own generate() (not engine methods; ``hf`` is the reference).
HF_METHODS = ("hf", "hf-pld")
#: Draft length of transformers' built-in prompt lookup (its documented typical value is 10).
HF_PLD_TOKENS = 10
#: Node budgets of the ablation's fixed-size rows, and the caps of its cost-aware rows.
FIXED_BUDGETS = (4, 8, 12, 16, 32, 64, 128)
#: Token Recycling at its own best fixed budget on this CPU, next to its default row (a fair reference).
TR_BUDGET = 12
COST_CAPS = (16, 24, 64)
#: The row of the library's default RECAP (``RecapConfig()``: trees sized by measured cost), beside
#: the fixed 24-node ``recap`` row (the paper's comparison at Token Recycling's tree size).
AUTO_ROW = "recap-auto"
#: The benchmark's settings for the ``recap`` and ``tr`` rows: 24 nodes a step, always.
FIXED_CONFIG = RecapConfig(budget=24, cost_aware=False)


@dataclass(frozen=True)
class Request:
    index: int
    seed: int
    kind: str
    prompt: str
    answer: str  # the scene's true answer (for information: the bench checks losslessness, not accuracy)
    position: int = 0  # how many earlier requests of the suite asked about the same scene (0: the first)

    def image(self) -> Any:
        from recap.shapes.scene import render_scene

        return render_scene(self.seed)[0]


#: name -> (first seed, number of scenes). Seeds come from the held-out EVAL_SEEDS range.
SUITES = {"default": (1_000_000, 24), "quick": (1_000_000, 3), "followup": (1_000_000, 12)}
#: Follow-up suites: name -> questions asked about each scene in a row (a visitor's conversation).
FOLLOWUP_QUESTIONS = {"followup": 5}
#: The rows a follow-up suite runs unless ``--methods`` names others (each RECAP row also runs
#: without its image-scoped memories, beside it: ``followup_arms``).
FOLLOWUP_METHODS = ("hf", "tr", "recap")
#: Suffix of a RECAP row's twin with the image-scoped memories off.
UNSCOPED = " unscoped"
WARMUP_SEED = 1_999_999  # outside every suite


def build_suite(name: str = "default", limit: int | None = None) -> list[Request]:
    """The suite's requests in their fixed interleaved order.

    Round r, slot j asks kind ``KINDS[j]`` about scene ``seeds[(r + j) % n]``: a Latin
    square, so consecutive requests differ in image and kind and each (scene, kind)
    pair is asked once (the scene's fixed evaluation question of that kind).

    A follow-up suite (``FOLLOWUP_QUESTIONS``) asks instead each scene its questions in a row,
    scene after scene: scene i asks the kinds from ``KINDS[i % len(KINDS)]`` on (wrapping, a
    kind the scene has no question of skipped), so every kind comes first for some scenes.
    ``Request.position`` counts the earlier requests about the same scene, in either order.
    """
    from recap.shapes.data import eval_example
    from recap.shapes.scene import KINDS

    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    start, n = SUITES[name]
    seeds = list(range(start, start + n))
    if name in FOLLOWUP_QUESTIONS:
        order = [(seed, KINDS[(i + j) % len(KINDS)]) for i, seed in enumerate(seeds) for j in range(len(KINDS))]
    else:
        order = [(seeds[(r + j) % n], kind) for r in range(n) for j, kind in enumerate(KINDS)]
    asked: dict[int, int] = {}
    out: list[Request] = []
    for seed, kind in order:
        if asked.get(seed, 0) >= FOLLOWUP_QUESTIONS.get(name, len(KINDS)):
            continue
        ex = eval_example(seed, kind)
        if ex is None:
            continue
        out.append(Request(len(out), ex.seed, kind, ex.prompt, ex.answer, asked.get(seed, 0)))
        asked[seed] = asked.get(seed, 0) + 1
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
        return self.method not in HF_METHODS and get_method(self.method).keeps_memory


def default_label(method: str) -> str:
    """A row's label: the registry's for engine methods, the bench's own for the HF rows."""
    if method == "hf":
        return "transformers generate(), greedy (reference)"
    if method == "hf-pld":
        return f"transformers prompt lookup ({HF_PLD_TOKENS} tokens)"
    return f"{get_method(method).label} (engine)"


def all_methods() -> tuple[str, ...]:
    """Every row the benchmark can run: the HF rows, then every registered engine method (read now),
    ``AUTO_ROW`` right after ``recap``."""
    names = [m for name in method_names() for m in ((name, AUTO_ROW) if name == "recap" else (name,))]
    return (*HF_METHODS, *names)


def method_arms(methods: Sequence[str], config: RecapConfig) -> list[Arm]:
    arms = []
    known = all_methods()
    for m in methods:
        if m not in known:
            raise ValueError(f"unknown method {m!r}; choose from {', '.join(known)}")
        if m == AUTO_ROW:  # the default RECAP: the row's settings but the tree's size
            arms.append(Arm(m, "recap", replace(config, budget="auto", cost_aware=True),
                            label="RECAP, trees sized by measured cost (the library's default)"))
            continue
        arms.append(Arm(m, m, None if m in HF_METHODS else config))
    if not any(a.method == "hf" for a in arms):
        arms.insert(0, Arm("hf", "hf"))  # the reference is always measured
    elif arms[0].method != "hf":
        arms.sort(key=lambda a: a.method != "hf")
    return arms


def followup_arms(methods: Sequence[str] | None, config: RecapConfig) -> list[Arm]:
    """A follow-up suite's rows: ``methods`` (default ``FOLLOWUP_METHODS``), each ``recap`` row with its
    image-scoped memories on and, beside it, its twin with them off (named ``recap`` + ``UNSCOPED``)."""
    arms: list[Arm] = []
    for arm in method_arms(FOLLOWUP_METHODS if methods is None else methods, config):
        if arm.method != "recap":
            arms.append(arm)
            continue
        on = replace(arm.config or config, scoped_memory=True)
        arms.append(Arm(arm.name, arm.method, on, label="RECAP with image-scoped M2 / M3 (engine)"))
        arms.append(Arm(arm.name + UNSCOPED, arm.method, replace(on, scoped_memory=False),
                        label="RECAP, M2 / M3 fresh every request (engine)"))
    return arms


def ablation_arms(config: RecapConfig) -> list[Arm]:
    """The ablation rows (all RECAP variants but the hf reference and the TR baseline)."""
    c = config
    rows = [
        Arm("hf", "hf", label="reference"),
        Arm("tr", "tr", c, label="Token Recycling baseline"),
        Arm(f"tr budget={TR_BUDGET}", "tr", replace(c, budget=TR_BUDGET), label=f"Token Recycling, {TR_BUDGET} nodes"),
        Arm("m1", "recap", replace(c, use_m2=False, use_m3=False, suffix=False), label="1-token memory, best-first"),
        Arm("m1+m2", "recap", replace(c, use_m3=False, suffix=False), label="+ 2-token memory"),
        Arm("m1+m2+m3", "recap", replace(c, suffix=False), label="+ 3-token memory (= suffix off)"),
        Arm("recap", "recap", c, label="+ suffix matches (full RECAP, entropy fusion, warm, 24 nodes)"),
        Arm("fusion=backoff", "recap", replace(c, fusion="backoff"), label="longest key only"),
        Arm("fusion=fixed", "recap", replace(c, fusion="fixed"), label="0.7/0.2/0.1 by rank"),
        Arm("cold", "recap", c, memory="cold", label="persistent memory reset every request"),
    ]
    for b in FIXED_BUDGETS:
        rows.append(Arm(f"budget={b}", "recap", replace(c, budget=b, cost_aware=False), label=f"{b} nodes, fixed"))
    rows.append(Arm("budget=auto", "recap", replace(c, budget="auto", cost_aware=False), label="recap.engine.autobudget, fixed"))
    for b in COST_CAPS:
        rows.append(Arm(f"cost<={b}", "recap", replace(c, budget=b, cost_aware=True), label=f"cost-aware, cap {b}"))
    rows.append(Arm(AUTO_ROW, "recap", replace(c, budget="auto", cost_aware=True),
                    label="cost-aware, cap RecapConfig.MAX_BUDGET (the library's default)"))
    return rows
