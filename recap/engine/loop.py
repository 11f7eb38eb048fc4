"""The decode loop: prefill, then draft -> verify -> accept -> update -> record (DESIGN.md sections 5-6).

Contract
--------
``iter_steps(target, image, prompt, ...)`` (or ``iter_steps(target, messages=...)``, a
conversation: ``recap.models.messages``) is the single source of truth: a generator that
prefills the prompt and then yields one ``StepRecord`` per target forward pass after the
prefill. ``generate(...)`` consumes it and returns a ``Generation``; the app consumes it to
stream; ``recap.engine.conversation.converse`` calls ``generate`` once per user turn. There
is no second copy of the loop: its verbs are functions over one ``DecodeState``
(``recap.engine.steps``, ``recap.engine.state``; ``record`` is here), and every method runs
through them alike, its drafter built by the method registry (``recap.methods``) and spoken
to through the drafter contract (``recap.drafting.protocol``).

Output is token-for-token what the model's own ``target.model.generate(**prepare_inputs(...),
max_new_tokens=n)`` returns under its generation config (tested for every method and
family, against ``do_sample=False``, against plain ``generate()`` and, for a config that
samples, against ``generate(do_sample=True)`` after the same ``torch.manual_seed``), because
every emitted token is the one ``generate()`` picks after an exact prefix: the argmax of the
target's logits after the config's logits processors, or under sampling a draw from the
processed and warped distribution, one draw per emitted token from the same generator
(``recap.verification.generation_config``, ``recap.verification.acceptance``,
``recap.verification.sampling``):

1. prefill all prompt tokens but the last one; its predictions reach the drafter (``update``);
2. draft: the root of each tree is the last accepted token, not yet fed to the target (in
   step 1 the last prompt token); the drafter grows a tree below it;
3. verify: one forward over the tree with an additive tree mask and explicit positions
   (prefix + depth, family-adjusted), then per node the acceptance rule's pick, the
   processed argmax (``recap.verification.acceptance``), each node's own root-to-node path
   part of its context; a sampling rule draws instead, from the root down the drafted
   child its draw names, until a draw names none (``recap.verification.sampling``);
4. accept: follow the children carrying those tokens; the bonus token is the one at the
   last accepted node; cut at any EOS id or ``max_new_tokens``;
5. update: keep the KV entries of the accepted path only; the drafter learns the pass (the
   memory drafters record every node's raw top-k prediction, the path last);
6. record: the step's ``StepRecord`` (and trace step), the output's spellings grown by the
   step's tokens.

Draws come from torch's default generator (so ``torch.manual_seed(s)`` before this call and
before ``generate(do_sample=True)`` gives the same tokens), or with ``seed=`` from a private
``torch.Generator`` (reproducible, the global state left alone). Anything ``generate()``
would do differently (beams, several return sequences, ...) raises ``ValueError`` naming
the field.

``decode_steps`` counts the passes of steps 2-6, so plain autoregressive decoding has a MAT of
exactly 1.00.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from PIL import Image
from transformers import GenerationConfig

from recap.core.config import RecapConfig
from recap.drafting.protocol import Drafter, DraftSetup, Resizable
from recap.drafting.tree import DraftTree
from recap.engine import autobudget, generate_args
from recap.engine.controller import SizeController, cost_model
from recap.engine.state import DecodeState, TargetPass
from recap.engine.steps import accept, draft, prefill, seed_drafter, update, verify
from recap.memory.scoped import check_owner
from recap.memory.store import TokenMemory
from recap.methods import get_method
from recap.models.target import Target
from recap.models.tokens import Speller
from recap.trace.format import DecodeTrace, TraceSampling, TraceStep
from recap.trace.record import trace_step
from recap.trace.sizing import TreeSizing, tree_sizing
from recap.verification.acceptance import Accepted
from recap.verification.generation_config import acceptance_rule
from recap.verification.hostcopy import HostPredictions
from recap.verification.ties import dtype_name

MAX_NEW_TOKENS_LIMIT = 4096


@dataclass
class StepRecord:
    """One decode step, as the engine saw it (the app and generate() read these)."""

    step: int  # 1-based
    tree: DraftTree
    # per tree node, the token generate() emits next: the processed argmax, or the draw where one was made
    argmax: list[int]
    accepted: list[int]  # accepted node path from the root (trimmed to what was emitted)
    bonus: int
    emitted: list[int]  # tokens appended to the output this step
    token_ids: list[int]  # all generated tokens so far
    timings: dict[str, float]  # cumulative seconds: prefill, draft, verify, update, total
    step_timings: dict[str, float]  # this step's draft / verify / update seconds
    done: bool
    stop_reason: str  # "" while running, then "eos" or "max_new_tokens"
    request: int
    budget: int
    tree_size: int = 0  # drafted nodes this step (the budget is a cap when the tree grows cost-aware)
    trace_step: TraceStep | None = None
    trace: DecodeTrace | None = None
    # sampling: the nodes the target drew at (its walk); else []
    drawn: list[int] = field(default_factory=list)
    sizing: TreeSizing | None = None  # a cost-aware tree: the size chosen and why; else None


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    decode_steps: int
    timings: dict[str, float]
    method: str
    stop_reason: str
    trace: DecodeTrace | None = None
    accepted_lengths: list[int] = field(default_factory=list)
    #: The target's dtype: "bf16" / "fp16" outputs equal generate()'s up to a tie (docs/design.md, Precision).
    dtype: str = ""

    @property
    def mat(self) -> float:
        """Mean accepted tokens per target decode pass."""
        return len(self.token_ids) / self.decode_steps if self.decode_steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        total = self.timings.get("total", 0.0)
        return len(self.token_ids) / total if total > 0 else 0.0


# --------------------------------------------------------------------------- validation


def _validate(
    method: str, max_new_tokens: Any, config: RecapConfig | None, logits_processor: Any,
    stopping_criteria: Any, *, owner: str | None = None, streamer: Any = None,
) -> RecapConfig:
    """The checked config, after the other arguments (``seed`` is checked where the rule is resolved,
    with the generation config)."""
    for name, value in (("logits_processor", logits_processor), ("stopping_criteria", stopping_criteria)):
        if value:  # None or an empty list: nothing to reproduce
            raise ValueError(
                f"{name}= is not supported: recap verifies a whole tree of continuations at once and "
                "cannot run a custom callable on each of them exactly; express it in a generation_config "
                "or use model.generate()"
            )
    get_method(method)  # a ValueError naming the choices
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
        raise ValueError(f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}, got {max_new_tokens}")
    if config is not None and not isinstance(config, RecapConfig):
        raise ValueError(f"config must be a RecapConfig, got {type(config).__name__}")
    check_owner(owner)
    generate_args.check_streamer(streamer)
    return RecapConfig() if config is None else config


# --------------------------------------------------------------------------- the loop


@torch.inference_mode()
def iter_steps(
    target: Target, image: Image.Image | str | os.PathLike[str] | None = None, prompt: str | None = None, *,
    messages: Any = None, allow_paths: bool = False, memory_scope: str | None = None, method: str = "recap",
    max_new_tokens: int = 128, memory: TokenMemory | None = None, config: RecapConfig | None = None,
    trace: bool = False, generation_config: GenerationConfig | Mapping[str, Any] | None = None,
    logits_processor: Any = None, stopping_criteria: Any = None, seed: int | None = None,
    owner: str | None = None, inputs: Mapping[str, Any] | None = None, streamer: Any = None, **settings: Any,
) -> Iterator[StepRecord]:
    """Decode one request, yielding a ``StepRecord`` after every verification.

    The request is ``messages`` (a conversation in transformers' chat form, images inline;
    ``recap.models.messages``; a path as an image only with ``allow_paths``) or ``image`` and
    ``prompt`` (its one turn; ``image`` may be a path). The output is the answer to the last
    user message, what ``generate()`` gives on the rendered conversation.
    memory_scope: the key the drafters file this request's image-scoped M2 / M3 rows under in the
    persistent memory (its provenance stays its images' fingerprint); None: that fingerprint.
    ``recap.engine.conversation`` keys a whole conversation's turns with one.
    generation_config: what ``generate()`` would run with (a ``GenerationConfig`` or a
    dict; None: the model's own ``generation_config``); its unset fields come from the
    model's, as in ``generate()``. ``logits_processor`` / ``stopping_criteria`` exist to
    refuse them clearly (ValueError): custom callables cannot be reproduced exactly.
    seed: when the config samples, draw from a private ``torch.Generator`` seeded with it (0 to
    ``recap.verification.seed.MAX_SEED``); None draws from torch's default generator, as
    ``generate()`` does. A greedy config draws nothing and ignores it.
    owner: whose request this is, for ``RecapConfig.scoped_memory``: a request drafts only from the
    image-scoped rows of its own owner's earlier requests on ``memory`` (None: the memory has one
    owner). A non-empty string; ValueError otherwise.
    As ``generate()`` takes them (``recap.engine.generate_args``): ``inputs`` (model inputs already
    built, instead of a request), ``streamer`` (called as generate() calls it) and ``settings``
    (generation-config fields as keywords, over ``generation_config``; other names: ValueError).

    To stop early, stop iterating and ``close()`` the generator (or let it be collected):
    nothing needs cleaning up, and the memories keep what the finished steps taught them.
    """
    cfg = _validate(method, max_new_tokens, config, logits_processor, stopping_criteria, owner=owner,
                    streamer=streamer)
    generation_config = generate_args.generation_settings(generation_config, settings)
    started = time.perf_counter()
    request = generate_args.request_inputs(
        target, image, prompt, messages=messages, allow_paths=allow_paths, inputs=inputs
    )
    ids = request.inputs["input_ids"]
    rule = acceptance_rule(
        target.model, generation_config, prompt_len=ids.shape[-1], max_new_tokens=max_new_tokens,
        vocab_size=target.vocab_size, device=target.device, seed=seed,
    )
    if streamer is not None:  # after the checks: a refused call puts nothing
        generate_args.stream_prompt(streamer, ids)
    scope = request.image_key if memory_scope is None else memory_scope
    context = int(ids.shape[-1])  # the tree's cost is learnt at this context length
    sizer = size_loop(target, cfg, context, memory)
    setup = _setup(target, cfg, memory, request, scope, owner=owner, context=context, sizer=sizer)
    drafter = get_method(method).build(setup)
    state, top = prefill(target, request.inputs, rule, HostPredictions(target.device, cfg.top_k,
                         need_topk=drafter.needs_predictions), started=started)
    seed_drafter(state, drafter, top)  # the prompt's top-k rows (P - 1, k), or None
    del top
    if trace:
        state.speller, state.trace = Speller(target.texts), _new_trace(state, request, method, cfg, drafter)
    yield from _steps(state, drafter, sizer, streamer)


def _new_trace(
    state: DecodeState, request: generate_args.Request, method: str, config: RecapConfig, drafter: Drafter
) -> DecodeTrace:
    """The trace of a decode about to start (its steps are appended by ``record``)."""
    target, rule = state.target, state.rule
    return DecodeTrace(
        method=method, model=target.name, prompt=request.prompt, request=_request(drafter),
        image_key=request.image_key, config=config.to_dict(), prompt_tokens=len(state.seq),
        budget=drafter.budget,
        sampling=None if rule.sampling is None else TraceSampling(**asdict(rule.sampling)),
        turn=request.turn, dtype=dtype_name(target.dtype),
    )


def _steps(
    state: DecodeState, drafter: Drafter, sizer: SizeController | None, streamer: Any
) -> Iterator[StepRecord]:
    """The decode's steps after the prefill: draft, verify, accept, update, record, until it stops."""
    sized = isinstance(drafter, Resizable)  # once per request: a runtime protocol check costs ~7 us
    resizable = sizer is not None and sized
    while not state.stop_reason:
        active: Drafter | None = drafter
        if resizable:  # the size loop's limit and learnt cost for this step's tree
            limit = sizer.next_limit()  # type: ignore[union-attr]
            drafter.resize(limit, sizer.cost())  # type: ignore[union-attr]
            if limit == 0 and not sizer.learns():  # type: ignore[union-attr]
                active = None  # a plain pass with no drafter work: what generate()'s costs
        tree = draft(state, active)
        verified = verify(state, tree)
        accepted = accept(state, verified)
        update(state, active, verified, accepted)
        if sizer is not None:  # what the tree cost and earned, host work included
            # the drafter's own cost rule left the tree empty: its work bought nothing this pass
            refused = sized and active is not None and len(tree) == 1 and drafter.last_stop == "cost"  # type: ignore[attr-defined]
            seconds = sum(state.step_timings.values())
            sizer.observe(len(tree) - 1, seconds, len(accepted.emitted), refused=refused)
        rec = record(state, drafter, verified, accepted, sizer=sizer, sized=sized, drafted=active is not None)
        del verified  # its logits (N, V): freed before the consumer runs
        if streamer is not None:
            generate_args.stream_tokens(streamer, rec.emitted, rec.done)
        yield rec


def size_loop(
    target: Target, config: RecapConfig, context: int, memory: TokenMemory | None = None
) -> SizeController | None:
    """The closed size loop of a ``budget="auto"`` decode (``recap.engine.controller``, the default):
    the cost model of (model, device, dtype, context bucket), its large sizes filled from a curve
    measured at load (``autobudget.prepare``) if there is one, and a node limit below
    ``config.auto_cap``, started where ``memory``'s last decode of the key left it (none: a fresh memory,
    a first probe). None unless ``config.sized_by_loop``: an explicit budget keeps its size."""
    if not config.sized_by_loop:
        return None
    bucket = autobudget.context_bucket(target, context)
    key = autobudget.curve_key(target, bucket)
    model = cost_model(key, prior=autobudget.cached_curve(target, bucket))
    states = None if memory is None else memory.size_loop_state
    return SizeController(model, config.auto_cap, states=states, key=key)


def record(
    state: DecodeState, drafter: Drafter, verified: TargetPass, accepted: Accepted, *,
    sizer: SizeController | None = None, sized: bool = False, drafted: bool = True,
) -> StepRecord:
    """The step as the app and ``generate()`` read it; with a trace, the step's trace data too
    (``sizer``: the size loop that chose the tree's limit, whose prediction the sizing records;
    ``sized``: the drafter is ``Resizable``, its ``cost`` and ``last_stop`` say why the tree has its size)."""
    step_t, timings = state.step_timings, state.timings
    for name, seconds in step_t.items():
        timings[name] += seconds
    timings["compute"] += sum(step_t.values())
    timings["total"] = time.perf_counter() - state.started
    tree, rule = verified.tree, state.rule
    # the nodes whose pick was emitted: under sampling, where the target drew (one draw per token)
    drawn = accepted.shown[: len(accepted.emitted)] if rule.sampling is not None else []
    # a resizable drafter's cost-aware trees keep their pass cost and why growth stopped; others have neither
    # (a plain pass the drafter never saw stopped at the loop's limit, 0)
    stop = (drafter.last_stop if drafted else "budget") if sized else ""
    realised = None if sizer is None else sizer.last
    sizing = tree_sizing(tree, drafter.cost if sized else None, stop, realised=realised)
    rec = StepRecord(
        step=state.step, tree=tree, argmax=verified.picked, accepted=accepted.shown, bonus=accepted.bonus,
        emitted=accepted.emitted, token_ids=list(state.generated), timings=dict(timings), step_timings=step_t,
        done=bool(state.stop_reason), stop_reason=state.stop_reason, request=_request(drafter),
        budget=drafter.budget,
        tree_size=len(tree) - 1, drawn=drawn, sizing=sizing,
    )
    tr, speller = state.trace, state.speller
    if tr is not None and speller is not None:
        rec.trace_step = trace_step(
            state.target, tree, argmax=verified.picked, path=accepted.shown, bonus=accepted.bonus,
            emitted=accepted.emitted, step=state.step, step_t=step_t, req_mem=drafter.memory, drawn=drawn,
            accept_probs=verified.accept_probs, sizing=sizing,
        )
        tr.steps.append(rec.trace_step)
        tr.token_ids = list(state.generated)
        # exact per-token spellings (= target.spell(generated)): their join is tr.text
        speller.extend(accepted.emitted)
        tr.token_texts = list(speller.texts)
        tr.text = speller.text
        tr.timings = dict(timings)
        tr.stop_reason = state.stop_reason
        rec.trace = tr
    return rec


def _request(drafter: Drafter) -> int:
    """The request's number in the drafter's memory (-1: it keeps none)."""
    return drafter.memory.request if drafter.memory is not None else -1


def _setup(
    target: Target, config: RecapConfig, memory: TokenMemory | None, request: generate_args.Request,
    scope: str | None, *, owner: str | None = None, context: int | None = None,
    sizer: SizeController | None = None,
) -> DraftSetup:
    """What the method's factory gets: the request (its image-scoped rows filed under ``scope``), the
    target's facts, and its pass cost: the size loop's (``RecapConfig.size_loop``: nothing measured on
    the request's clock), else the measured curve's (called through the module at use: a digest may
    fix the pass cost)."""
    if sizer is not None:  # the cap, sized below each step by the loop
        auto, cost = (lambda: config.auto_cap), (lambda cap: sizer.cost())
    else:  # one budget / curve measured at first use for this (model, device, dtype, context bucket)
        auto = lambda: autobudget.auto_budget(target, config, context)  # noqa: E731
        cost = lambda cap: autobudget.pass_cost(target, cap, context)  # noqa: E731
    return DraftSetup(
        config=config, vocab_size=target.vocab_size, memory=memory, blocked=frozenset(target.image_token_ids),
        image_key=request.image_key, scope=scope, prompt=request.prompt, owner=owner, auto_budget=auto,
        pass_cost=cost,
    )


def generate(
    target: Target, image: Image.Image | str | os.PathLike[str] | None = None, prompt: str | None = None, *,
    messages: Any = None, allow_paths: bool = False, memory_scope: str | None = None, method: str = "recap",
    max_new_tokens: int = 128, memory: TokenMemory | None = None, config: RecapConfig | None = None,
    trace: bool = False, generation_config: GenerationConfig | Mapping[str, Any] | None = None,
    logits_processor: Any = None, stopping_criteria: Any = None, seed: int | None = None,
    owner: str | None = None, inputs: Mapping[str, Any] | None = None, streamer: Any = None, **settings: Any,
) -> Generation:
    """Decode one request to the end (a thin wrapper over ``iter_steps``: the request or ``inputs``,
    ``seed``, ``memory_scope``, ``owner``, ``streamer`` and the generation settings as keywords as there)."""
    last: StepRecord | None = None
    lengths: list[int] = []
    for rec in iter_steps(
        target, image, prompt, messages=messages, allow_paths=allow_paths, memory_scope=memory_scope,
        method=method, max_new_tokens=max_new_tokens, memory=memory, config=config, trace=trace,
        generation_config=generation_config, logits_processor=logits_processor,
        stopping_criteria=stopping_criteria, seed=seed, owner=owner, inputs=inputs, streamer=streamer,
        **settings,
    ):
        lengths.append(len(rec.emitted))
        last = rec
    assert last is not None  # max_new_tokens >= 1 guarantees one step
    return Generation(
        text=target.output_text(last.token_ids),
        token_ids=last.token_ids,
        decode_steps=last.step,
        timings=last.timings,
        method=method,
        stop_reason=last.stop_reason,
        trace=last.trace,
        accepted_lengths=lengths,
        dtype=dtype_name(target.dtype),
    )

