"""The benchmark's runner: every row on every request, interleaved, repeats from one memory state.

Under sampling (``sampling``: generation-config fields with ``do_sample``) every run of
request i, every row and every repeat, starts from ``torch.manual_seed(seed + i)``: the
shared seed under which each method's tokens are compared with HF ``generate()``'s (and
repeats of a request draw alike, so they still do the same work).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from recap.bench.suite import HF_METHODS, HF_PLD_TOKENS, Arm, Request, warmup_requests
from recap.core.config import RecapConfig
from recap.memory.store import TokenMemory
from recap.trace.stats import StepCounts, acceptance, counts_of


@dataclass
class Run:
    tokens: list[int]
    seconds: float  # wall time of the whole request (inputs, prefill, decode)
    steps: int  # target decode passes (hf: forward calls, the first being the prefill)
    timings: dict[str, float] = field(default_factory=dict)
    accepted_lengths: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)  # drafted nodes per pass
    tree_digest: int = 0  # hash of every step's tree (tokens and parents), in order
    # each step's acceptance counts (``recap.trace.stats``): the record's ``acceptance`` figures
    counts: list[StepCounts] = field(default_factory=list)
    one_token_s: float = 0.0  # the size loop's plain-pass seconds at the run's end (0: no loop sized it)

    def work(self) -> tuple[int, list[int], list[int], int]:
        """What the run did, beyond its output: repeats of a request must agree on all of it."""
        return self.steps, self.accepted_lengths, self.tree_sizes, self.tree_digest


class RepeatMismatchError(RuntimeError):
    """Repeats of one request did different work: the timings would describe different drafters."""


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


def run_hf(
    target: Any, req: Request, image: Any, *, max_new_tokens: int, counter: ForwardCounter, pld: bool = False,
    sampling: Mapping[str, Any] | None = None, messages: list[dict[str, Any]] | None = None,
) -> Run:
    """HF ``generate()``: greedy, or with ``sampling``'s fields (the caller seeds the generator);
    on ``messages`` (a conversation's turn) when given, else on ``image`` and the request's prompt."""
    from recap.models.inputs import prepare_inputs

    extra = {"prompt_lookup_num_tokens": HF_PLD_TOKENS} if pld else {}
    extra.update(sampling or {"do_sample": False})
    _sync(target)
    counter.calls = 0
    t0 = time.perf_counter()
    if messages is not None:
        inputs = prepare_inputs(target, messages=messages)
    else:
        inputs = prepare_inputs(target, image, req.prompt)
    with torch.inference_mode():
        out = target.model.generate(**inputs, max_new_tokens=max_new_tokens, **extra)
    tokens = out[0, inputs["input_ids"].shape[-1] :].tolist()
    seconds = time.perf_counter() - t0
    return Run(tokens, seconds, max(counter.calls, 1))


def run_engine(
    target: Any, arm: Arm, req: Request, image: Any, *, max_new_tokens: int, memory: TokenMemory | None,
    sampling: Mapping[str, Any] | None = None, messages: list[dict[str, Any]] | None = None,
) -> Run:
    """One engine decode (``sampling``: its generation config; the caller seeds the generator); on
    ``messages`` (a conversation's turn, carrying what ``arm.carry`` says) when given."""
    from recap.engine.conversation import DEFAULT_CARRY, carry_settings
    from recap.engine.loop import iter_steps

    lengths: list[int] = []
    sizes: list[int] = []
    steps: list[tuple[Any, list[int], list[int], int]] = []  # per step (tree, picks, path, emitted)
    digest = 0
    config, scope = arm.config, None
    if messages is not None and config is not None:
        config, scope = carry_settings(arm.carry or DEFAULT_CARRY, config,
                                       f"conversation:{req.conversation}")
    request: dict[str, Any] = {"messages": messages}
    if messages is None:
        request = {"image": image, "prompt": req.prompt}
    _sync(target)
    t0 = time.perf_counter()
    # What recap.generate does, keeping each step's tree size and a digest of its tree.
    for rec in iter_steps(
        target, **request, memory_scope=scope, method=arm.method, max_new_tokens=max_new_tokens,
        memory=memory, config=config, generation_config=sampling,
    ):
        lengths.append(len(rec.emitted))
        sizes.append(len(rec.tree) - 1)
        steps.append((rec.tree, rec.argmax, rec.accepted, len(rec.emitted)))
        digest = hash((digest, tuple(rec.tree.tokens), tuple(rec.tree.parents)))
        last = rec
    seconds = time.perf_counter() - t0
    # the acceptance counts after the clock: hf's rows pay for no such bookkeeping either
    counts = [counts_of(tree.parents, tree.tokens, picks, path, n) for tree, picks, path, n in steps]
    one = last.sizing.one_token_s if last.sizing is not None else 0.0  # what the loop weighed trees against
    return Run(list(last.token_ids), seconds, last.step, dict(last.timings), lengths, sizes, digest, counts,
               one_token_s=one)


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
    sampling: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Run every arm on every request (interleaved); returns one record per (request, arm).

    sampling: generation-config fields every row decodes with (None: greedy); request i's
    runs then all start from ``torch.manual_seed(seed + i)``.
    """
    from tqdm.auto import tqdm

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    counter = ForwardCounter(target.model)
    # A collection before each request keeps GC pauses out of the timed runs. Everything
    # alive before the suite is frozen first, so those collections scan only what the suite
    # made: in a big process (the app, a test session) a full collection costs 0.2 s.
    gc.collect()
    gc.freeze()
    try:
        if warmup:
            _warmup(target, arms, max_new_tokens, counter, sampling, seed)
        for arm in arms:
            if arm.uses_memory and not arm.skipped:
                arm.live = TokenMemory(target.vocab_size, (arm.config or RecapConfig()).top_k)
        active = [a for a in arms if not a.skipped]
        records: list[dict[str, Any]] = []
        total = len(requests) * len(active) * repeats
        bar = tqdm(total=total, desc="bench", unit="run", disable=not progress)
        history: dict[str, list[dict[str, Any]]] = {}  # conversation -> its messages so far (hf's answers)
        for req in requests:
            images = req.images() if not req.conversation or req.conversation not in history else []
            image = images[0] if images else None
            messages = turn_messages(req, history, images)
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
                    if sampling is not None:
                        torch.manual_seed(seed + req.index)  # the shared seed of this request's runs
                    try:
                        if arm.method in HF_METHODS:
                            pld = arm.method == "hf-pld"
                            run = run_hf(target, req, image, max_new_tokens=max_new_tokens, counter=counter,
                                         pld=pld, sampling=sampling, messages=messages)
                        else:
                            if arm.memory == "cold" and arm.uses_memory:
                                mem = TokenMemory(target.vocab_size, arm.config.top_k)  # type: ignore[union-attr]
                            elif arm.name in before:
                                mem = before[arm.name] if last else before[arm.name].clone()
                            else:
                                mem = None
                            run = run_engine(target, arm, req, image, max_new_tokens=max_new_tokens,
                                             memory=mem, sampling=sampling, messages=messages)
                    except Exception as exc:  # noqa: BLE001 - recorded per request, reported loudly
                        if arm.method in HF_METHODS and arm.method != "hf":
                            errors[arm.name] = f"{type(exc).__name__}: {exc}"
                            continue
                        raise
                    runs[arm.name].append(run)
            bar.set_postfix_str(f"request {req.index + 1}/{len(requests)}")
            ref = runs["hf"][0].tokens
            if messages is not None:  # the next turn is decoded on the reference's answer
                answer = {"role": "assistant", "content": [{"type": "text", "text": target.output_text(ref)}]}
                history[req.conversation] = [*messages, answer]
            check = None if sampling is not None else _precision_check(target, req, image, messages)
            for arm in active:
                check_repeats(req, arm, runs[arm.name])
                error = errors.get(arm.name, "")
                records.append(_record(target, req, arm, runs[arm.name], ref, error=error, precision=check))
        bar.close()
    finally:
        gc.unfreeze()
        counter.close()
        for arm in arms:
            arm.live = None
    return records


def turn_messages(
    req: Request, history: dict[str, list[dict[str, Any]]], images: list[Any]
) -> list[dict[str, Any]] | None:
    """A conversation turn's messages: its conversation so far, then the question (the first
    turn shows ``images``); None for a request of its own (decoded on its image and prompt)."""
    if not req.conversation:
        return None
    before = history.get(req.conversation, [])
    shown = [{"type": "image", "image": img} for img in images] if not before else []
    return [*before, {"role": "user", "content": [*shown, {"type": "text", "text": req.prompt}]}]


def _warmup(
    target: Any, arms: list[Arm], max_new_tokens: int, counter: ForwardCounter,
    sampling: Mapping[str, Any] | None,
    seed: int,
) -> None:
    """Decode a few out-of-suite requests with every arm (throw-away memories); find arms that cannot run."""
    for req in warmup_requests():
        image = req.image()
        for arm in arms:
            if arm.skipped:
                continue
            if sampling is not None:
                torch.manual_seed(seed)
            try:
                if arm.method in HF_METHODS:
                    run_hf(target, req, image, max_new_tokens=min(max_new_tokens, 32), counter=counter,
                           pld=arm.method == "hf-pld", sampling=sampling)
                else:
                    mem = TokenMemory(target.vocab_size, arm.config.top_k) if arm.uses_memory else None  # type: ignore[union-attr]
                    run_engine(target, arm, req, image, max_new_tokens=min(max_new_tokens, 32), memory=mem,
                               sampling=sampling)
            except Exception as exc:  # noqa: BLE001
                if arm.method == "hf-pld":
                    arm.skipped = ("transformers' prompt lookup failed on this model: "
                                   f"{type(exc).__name__}: {exc}")
                    continue
                raise


def check_repeats(req: Request, arm: Arm, runs: list[Run]) -> None:
    """Raise RepeatMismatchError unless every repeat did the same work (steps, accepted lengths, trees).

    Outputs are always identical (lossless), so comparing them proves nothing: a repeat that
    drafts from a different memory state (say, a copy without the calibration table) emits
    the same tokens in different passes, and its time would not belong to the MAT reported.
    A row under the closed size loop (``RecapConfig.sized_by_loop``) sizes its trees by the passes'
    measured times, which no two repeats share: its repeats are held to the same tokens only (the
    lossless check), their work may differ.
    """
    if not runs or (arm.config is not None and arm.config.sized_by_loop):
        return
    first = runs[0].work()
    for i, run in enumerate(runs[1:], start=1):
        work = run.work()
        if work == first:
            continue
        what = [name
                for name, a, b in zip(("steps", "accepted lengths", "tree sizes", "trees"), first, work)
                if a != b]
        raise RepeatMismatchError(
            f"REPEAT CHECK FAILED: row {arm.name!r}, request {req.index} (seed {req.seed}, {req.kind}): "
            f"repeat {i} "
            f"differs from repeat 0 in {', '.join(what)} (steps {first[0]} vs {work[0]}). Every repeat must "
            "start "
            "from the same memory state: TokenMemory.clone() must copy everything a drafter reads."
        )


def _precision_check(
    target: Any, req: Request, image: Any, messages: list[dict[str, Any]] | None
) -> Callable[[list[int]], Any] | None:
    """In bf16 / fp16 under greedy decoding: tokens -> ``recap.verification.ties.check_greedy``'s record on
    this request's inputs (a difference from hf's output is a tie or an error); None in fp32 (exact)."""
    if target.dtype in (torch.float32, torch.float64):
        return None
    from recap.models.inputs import prepare_inputs
    from recap.verification.ties import check_greedy

    def check(tokens: list[int]) -> Any:
        inputs = (prepare_inputs(target, messages=messages) if messages is not None
                  else prepare_inputs(target, image, req.prompt))
        return check_greedy(target, inputs, tokens)

    return check


def _record(
    target: Any, req: Request, arm: Arm, runs: list[Run], ref: list[int], *, error: str = "",
    precision: Callable[[list[int]], Any] | None = None,
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "request": req.index,
        "seed": req.seed,
        "kind": req.kind,
        "position": req.position,
        "conversation": req.conversation,
        "category": req.category,
        "arm": arm.name,
        "method": arm.method,
        "error": error,
    }
    if not runs:
        rec.update(tokens=0, steps=0, times=[], median_s=None, match=None)
        return rec
    live = runs[-1]
    # the work of the repeats was held equal by check_repeats (the size loop's rows: exempt there)
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
        tree_sizes=live.tree_sizes,
        match=match,
        repeats_identical=same,
    )
    if live.one_token_s > 0:  # a loop-sized row: the one-token estimate its trees were judged against
        rec["one_token_s"] = live.one_token_s
    if live.counts:  # engine rows: per-depth acceptance, histogram, rate (hf rows record no trees)
        depths = arm.config.max_depth if arm.config is not None else None
        rec["acceptance"] = acceptance(live.counts, depths=depths).to_dict()
    if not match:
        got = live.tokens if same else next(r.tokens for r in runs if r.tokens != ref)
        first = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
        tok = target.tokenizer
        rec["mismatch"] = {
            "first_diff": first,
            "expected": tok.decode(ref, skip_special_tokens=False),
            "got": tok.decode(got, skip_special_tokens=False),
        }
        if precision is not None and same:  # reduced precision: a tie is the one allowed difference
            verdict = precision(got)
            rec["tie"] = bool(verdict.ok)
            rec["mismatch"]["precision"] = verdict.sentence()
    return rec
