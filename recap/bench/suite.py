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
#: The row of the library's default RECAP (``RecapConfig()``: trees sized by the closed size loop), beside
#: the fixed 24-node ``recap`` row (the paper's comparison at Token Recycling's tree size).
AUTO_ROW = "recap-auto"
#: The benchmark's settings for the ``recap`` and ``tr`` rows: 24 nodes a step, always; each row's
#: memory has one owner, so the image-scoped memories are on (as the app's sessions have them).
FIXED_CONFIG = RecapConfig(budget=24, cost_aware=False, scoped_memory=True)


@dataclass(frozen=True)
class Request:
    index: int
    seed: int
    kind: str
    prompt: str
    answer: str  # the scene's true answer (for information: the bench checks losslessness, not accuracy)
    #: Single questions: how many earlier requests of the suite asked about the same scene (0: the
    #: first). Conversations: the turn's place in its conversation (0: the first turn).
    position: int = 0
    conversation: str = ""  # the conversation this turn belongs to ("": a request of its own)
    category: str = ""  # a suite file's category (MMSpec's); the shapes suites: "conversation" / "revisit"
    image_files: tuple[str, ...] = ()  # a suite file's images (in the first turn); none: the shapes scene

    def images(self) -> list[Any]:
        """The images the request (its conversation's first turn) shows."""
        if self.image_files:
            from recap.models.inputs import load_image

            return [load_image(path) for path in self.image_files]
        from recap.shapes.scene import render_scene

        return [render_scene(self.seed)[0]]

    def image(self) -> Any:
        return self.images()[0]


#: name -> (first seed, number of scenes). Seeds come from the held-out EVAL_SEEDS range.
SUITES = {"default": (1_000_000, 24), "quick": (1_000_000, 3), "followup": (1_000_000, 12)}
#: Conversation suites: name -> questions asked about each scene in a row, as one conversation
#: (each turn decoded with the earlier questions and the model's own answers in its context).
FOLLOWUP_QUESTIONS = {"followup": 5}
#: Conversation suites: name -> scenes visited again at the end by a new one-question conversation
#: (category "revisit": a first turn on an image the memory has seen; what carrying by image buys).
FOLLOWUP_REVISITS = {"followup": 4}
#: The rows a conversation suite runs unless ``--methods`` names others (each RECAP row also runs
#: under every other carry mode, beside it: ``followup_arms``).
FOLLOWUP_METHODS = ("hf", "tr", "recap")
#: Suffix of a RECAP row's twin that carries no contextual rows across its turns (the default,
#: ``recap``, carries the conversation's: ``recap.engine.conversation``).
UNSCOPED = " carry=none"
WARMUP_SEED = 1_999_999  # outside every suite


def build_suite(name: str = "default", limit: int | None = None) -> list[Request]:
    """The suite's requests in their fixed order (``name``: a key of ``SUITES`` or a suite file).

    Round r, slot j asks kind ``KINDS[j]`` about scene ``seeds[(r + j) % n]``: a Latin
    square, so consecutive requests differ in image and kind and each (scene, kind)
    pair is asked once (the scene's fixed evaluation question of that kind).

    A conversation suite (``FOLLOWUP_QUESTIONS``) holds one conversation per scene, scene after
    scene: scene i asks the kinds from ``KINDS[i % len(KINDS)]`` on (wrapping, a kind the scene
    has no question of skipped), so every kind comes first for some scenes; and the first
    ``FOLLOWUP_REVISITS`` scenes again, each in a new conversation of one question of a kind not
    asked before, after the conversation two scenes on. ``Request.position`` is the turn.
    (Suite files: ``recap.bench.suitefile``.)
    """
    from recap.shapes.data import eval_example
    from recap.shapes.scene import KINDS

    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)} or a .jsonl suite file")
    start, n = SUITES[name]
    seeds = list(range(start, start + n))
    if name in FOLLOWUP_QUESTIONS:
        order = [(seed, KINDS[(i + j) % len(KINDS)]) for i, seed in enumerate(seeds)
                 for j in range(len(KINDS))]
    else:
        order = [(seeds[(r + j) % n], kind) for r in range(n) for j, kind in enumerate(KINDS)]
    asked: dict[int, int] = {}
    talk = name in FOLLOWUP_QUESTIONS
    rows: list[tuple[int, str, str, int, str]] = []  # (seed, kind, conversation, turn, category)
    for seed, kind in order:
        if asked.get(seed, 0) >= FOLLOWUP_QUESTIONS.get(name, len(KINDS)) or eval_example(seed, kind) is None:
            continue
        rows.append((seed, kind, f"scene-{seed}" if talk else "", asked.get(seed, 0),
                     "conversation" if talk else ""))
        asked[seed] = asked.get(seed, 0) + 1
    for i, seed in enumerate(seeds[: FOLLOWUP_REVISITS.get(name, 0)]):
        # after the conversation two scenes on: the image's rows are still young enough to carry
        done = {row[1] for row in rows if row[0] == seed}
        kind = next(k for k in KINDS[i:] + KINDS[:i] if k not in done and eval_example(seed, k) is not None)
        later = seeds[min(i + 2, n - 1)]
        after = max(j for j, row in enumerate(rows) if row[0] == later and row[4] != "revisit")
        rows.insert(after + 1, (seed, kind, f"scene-{seed}-again", 0, "revisit"))
    out: list[Request] = []
    for seed, kind, conversation, turn, category in rows:
        ex = eval_example(seed, kind)
        assert ex is not None  # checked above
        out.append(Request(len(out), ex.seed, kind, ex.prompt, ex.answer, turn, conversation=conversation,
                           category=category))
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
    #: On a conversation's turns: what carries across them (``recap.engine.conversation.CARRY_MODES``;
    #: "": the default, ``DEFAULT_CARRY``).
    carry: str = ""

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
    """The rows a benchmark runs by default: the HF rows, then every registered engine method (read
    now), ``AUTO_ROW`` right after ``recap``."""
    names = [m for name in method_names() for m in ((name, AUTO_ROW) if name == "recap" else (name,))]
    return (*HF_METHODS, *names)


def method_arms(methods: Sequence[str], config: RecapConfig) -> list[Arm]:
    arms = []
    known = all_methods()
    for m in methods:
        if m not in known:
            raise ValueError(f"unknown method {m!r}; choose from {', '.join(known)}")
        if m == AUTO_ROW:  # the default RECAP: the row's settings but the tree's size, from the size loop
            arms.append(Arm(m, "recap", replace(config, budget="auto", cost_aware=True, size_loop=True),
                            label="RECAP, trees sized by the closed size loop (the library's default)"))
            continue
        arms.append(Arm(m, m, None if m in HF_METHODS else config))
    if not any(a.method == "hf" for a in arms):
        arms.insert(0, Arm("hf", "hf"))  # the reference is always measured
    elif arms[0].method != "hf":
        arms.sort(key=lambda a: a.method != "hf")
    return arms


def followup_arms(methods: Sequence[str] | None, config: RecapConfig) -> list[Arm]:
    """A conversation suite's rows: ``methods`` (default ``FOLLOWUP_METHODS``), each ``recap`` row
    (what carries across turns: ``DEFAULT_CARRY``) with, beside it, its twins under the other carry
    modes (named ``recap carry=MODE``)."""
    from recap.engine.conversation import CARRY_MODES, DEFAULT_CARRY

    labels = {"conversation": "M2 / M3 carried within the conversation",
              "image": "M2 / M3 carried by image, across conversations", "none": "M2 / M3 fresh every turn"}
    arms: list[Arm] = []
    for arm in method_arms(FOLLOWUP_METHODS if methods is None else methods, config):
        if arm.method != "recap":
            arms.append(arm)
            continue
        cfg = arm.config or config
        arms.append(Arm(arm.name, arm.method, cfg, label=f"RECAP, {labels[DEFAULT_CARRY]} (engine, default)",
                        carry=DEFAULT_CARRY))
        for mode in CARRY_MODES:
            if mode != DEFAULT_CARRY:
                arms.append(Arm(f"{arm.name} carry={mode}", arm.method, cfg,
                                label=f"RECAP, {labels[mode]} (engine)", carry=mode))
    return arms


def ablation_arms(config: RecapConfig) -> list[Arm]:
    """The ablation rows (all RECAP variants but the hf reference and the TR baseline)."""
    c = config
    rows = [
        Arm("hf", "hf", label="reference"),
        Arm("tr", "tr", c, label="Token Recycling baseline"),
        Arm(f"tr budget={TR_BUDGET}", "tr", replace(c, budget=TR_BUDGET),
            label=f"Token Recycling, {TR_BUDGET} nodes"),
        Arm("m1", "recap", replace(c, use_m2=False, use_m3=False, suffix=False),
            label="1-token memory, best-first"),
        Arm("m1+m2", "recap", replace(c, use_m3=False, suffix=False), label="+ 2-token memory"),
        Arm("m1+m2+m3", "recap", replace(c, suffix=False), label="+ 3-token memory (= suffix off)"),
        Arm("recap", "recap", c, label="+ suffix matches (full RECAP, entropy fusion, warm, 24 nodes)"),
        Arm("fusion=backoff", "recap", replace(c, fusion="backoff"), label="longest key only"),
        Arm("fusion=fixed", "recap", replace(c, fusion="fixed"), label="0.7/0.2/0.1 by rank"),
        Arm("cold", "recap", c, memory="cold", label="persistent memory reset every request"),
    ]
    for b in FIXED_BUDGETS:
        rows.append(Arm(f"budget={b}", "recap", replace(c, budget=b, cost_aware=False),
                        label=f"{b} nodes, fixed"))
    rows.append(Arm("budget=auto", "recap", replace(c, budget="auto", cost_aware=False),
                    label="grown to the size loop's limit"))
    for b in COST_CAPS:
        rows.append(Arm(f"cost<={b}", "recap", replace(c, budget=b, cost_aware=True),
                        label=f"cost-aware, cap {b}"))
    rows.append(Arm(AUTO_ROW, "recap", replace(c, budget="auto", cost_aware=True),
                    label="cost-aware, the size loop's limit (the library's default)"))
    return rows
