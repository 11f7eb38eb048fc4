"""The decode loop: draft -> verify -> accept -> update (DESIGN.md sections 5-6).

Contract
--------
``iter_steps(target, image, prompt, ...)`` is the single source of truth: a generator
that prefills the prompt and then yields one ``StepRecord`` per target forward pass
after the prefill. ``generate(...)`` consumes it and returns a ``Generation``; the app
consumes it to stream. There is no second copy of the loop.

Output is token-for-token what the model's own ``target.model.generate(**prepare_inputs(...),
max_new_tokens=n)`` returns under its generation config (tested for every method and
family, against ``do_sample=False`` and against plain ``generate()``), because every
emitted token is the one ``generate()`` picks after an exact prefix: the argmax of the
target's logits after the config's logits processors (``recap.verification.generation_config``,
``recap.verification.acceptance``):

1. prefill all prompt tokens but the last one; its logits seed the memories;
2. the root of each tree is the last accepted token, not yet fed to the target (in
   step 1 the last prompt token); the drafter grows a tree below it;
3. verify (``recap.verification.verify.verify_tree``): one forward over the tree with an additive
   tree mask and explicit positions (prefix + depth, family-adjusted), then per node the
   processed argmax, each node's own root-to-node path part of its context;
4. accept: follow the children carrying those tokens; the bonus token is the one at the
   last accepted node; cut at any EOS id or ``max_new_tokens``;
5. update: keep the KV entries of the accepted path only; record every node's raw
   top-k prediction into the memories (rejected branches first, the path last).

A config that really samples (``do_sample=True``, ``top_k`` other than 1) is decoded
greedily and says so (``Generation.notice``, ``sampling_ignored``); anything else
``generate()`` would do differently raises ``ValueError`` naming the field.

``decode_steps`` counts step 2-5 passes, so plain autoregressive decoding has a MAT of
exactly 1.00.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image
from transformers import DynamicCache, GenerationConfig

from recap.core.config import RecapConfig
from recap.drafting.drafters import Drafter
from recap.drafting.tree import DraftTree
from recap.engine import autobudget
from recap.memory.store import RequestMemory, TokenMemory
from recap.methods import get_method
from recap.models.inputs import image_key, load_image, prepare_inputs
from recap.models.target import Target
from recap.trace.format import DecodeTrace, TraceStep
from recap.trace.record import trace_step
from recap.verification.acceptance import History, accept_greedy, cut_at_stop
from recap.verification.generation_config import acceptance_rule
from recap.verification.hostcopy import HostPredictions, topk_predictions
from recap.verification.verify import keep_accepted, verify_tree

MAX_NEW_TOKENS_LIMIT = 4096


@dataclass
class StepRecord:
    """One decode step, as the engine saw it (the app and generate() read these)."""

    step: int  # 1-based
    tree: DraftTree
    argmax: list[int]  # per tree node, the token generate() would emit next (processed argmax)
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
    notice: str = ""  # why the output is not what plain generate() would give ("": it is)
    sampling_ignored: bool = False  # the generation config samples; this step decoded greedily


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
    #: True when the generation config samples (do_sample with top_k != 1): the output is
    #: the greedy one, generate(do_sample=False)'s; ``notice`` says so in words.
    sampling_ignored: bool = False
    notice: str = ""

    @property
    def mat(self) -> float:
        """Mean accepted tokens per target decode pass."""
        return len(self.token_ids) / self.decode_steps if self.decode_steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        total = self.timings.get("total", 0.0)
        return len(self.token_ids) / total if total > 0 else 0.0


# --------------------------------------------------------------------------- pure helpers


def node_keys(tree: DraftTree, before_root: Sequence[int | None]) -> list[tuple[int | None, int | None, int]]:
    """Memory keys (x_{t-2}, x_{t-1}, x_t) ending at every tree node.

    before_root: the two tokens preceding the root in the request (None where absent).
    """
    b1, b2 = before_root[-1], before_root[-2]  # token right before the root, and the one before it
    keys: list[tuple[int | None, int | None, int]] = []
    toks, parents = tree.tokens, tree.parents
    for i, tok in enumerate(toks):
        p = parents[i]
        if p < 0:
            keys.append((b2, b1, tok))
            continue
        pp = parents[p]
        keys.append((toks[pp] if pp >= 0 else b1, toks[p], tok))
    return keys


# --------------------------------------------------------------------------- validation


def _validate(
    method: str, max_new_tokens: Any, config: RecapConfig | None, logits_processor: Any, stopping_criteria: Any
) -> RecapConfig:
    for name, value in (("logits_processor", logits_processor), ("stopping_criteria", stopping_criteria)):
        if value:  # None or an empty list: nothing to reproduce
            raise ValueError(
                f"{name}= is not supported: recap verifies a whole tree of continuations at once and cannot run "
                "a custom callable on each of them exactly; express it in a generation_config or use model.generate()"
            )
    get_method(method)  # a ValueError naming the choices
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
        raise ValueError(f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}, got {max_new_tokens}")
    if config is None:
        return RecapConfig()
    if not isinstance(config, RecapConfig):
        raise ValueError(f"config must be a RecapConfig, got {type(config).__name__}")
    return config


# --------------------------------------------------------------------------- the loop


@torch.inference_mode()
def iter_steps(
    target: Target,
    image: Image.Image | str | os.PathLike[str] | None,
    prompt: str,
    *,
    method: str = "recap",
    max_new_tokens: int = 128,
    memory: TokenMemory | None = None,
    config: RecapConfig | None = None,
    trace: bool = False,
    generation_config: GenerationConfig | Mapping[str, Any] | None = None,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
) -> Iterator[StepRecord]:
    """Decode one request, yielding a ``StepRecord`` after every verification.

    generation_config: what ``generate()`` would run with (a ``GenerationConfig`` or a
    dict; None: the model's own ``generation_config``); its unset fields come from the
    model's, as in ``generate()``. ``logits_processor`` / ``stopping_criteria`` exist to
    refuse them clearly (ValueError): custom callables cannot be reproduced exactly.

    To stop early, stop iterating and ``close()`` the generator (or let it be collected):
    nothing needs cleaning up, and the memories keep what the finished steps taught them.
    """
    cfg = _validate(method, max_new_tokens, config, logits_processor, stopping_criteria)
    t_start = time.perf_counter()
    img = load_image(image)
    inputs = prepare_inputs(target, img, prompt)
    model, adapter = target.model, target.adapter
    image_ids = target.image_token_ids
    ids: list[int] = inputs["input_ids"][0].tolist()
    rule = acceptance_rule(
        model, generation_config, prompt_len=len(ids), max_new_tokens=max_new_tokens,
        vocab_size=target.vocab_size, device=target.device,
    )

    spec = get_method(method)
    if memory is None and spec.keeps_memory:
        memory = TokenMemory(target.vocab_size, cfg.top_k)
    if memory is not None and memory.vocab_size != target.vocab_size:
        raise ValueError(
            f"the memory was made for a vocabulary of {memory.vocab_size}; this model has {target.vocab_size}"
        )
    if memory is not None and spec.keeps_memory and memory.k != cfg.top_k:
        raise ValueError(f"the memory keeps top-{memory.k} rows but config.top_k is {cfg.top_k}")
    budget = resolve_budget(target, cfg) if spec.keeps_memory else 0
    req_mem = None
    if spec.keeps_memory and memory is not None:
        req_mem = RequestMemory(memory, image_token_ids=image_ids, image_key=image_key(img), prompt=prompt)
    cost = autobudget.pass_cost(target, budget) if spec.cost_aware and cfg.cost_aware else None
    drafter: Drafter = spec.build(req_mem, cfg, budget, image_ids, cost)
    host = HostPredictions(target.device, cfg.top_k, need_topk=drafter.needs_predictions)
    request = req_mem.request if req_mem is not None else -1

    # 1. prefill every prompt token but the last (the first tree's root).
    prefill = adapter.prefill_inputs(inputs)
    t0 = time.perf_counter()
    with target.prefill_lock:  # the rope delta is state on the shared model: read it before anyone else prefills
        adapter.before_prefill(model)
        out = model(**prefill, cache=DynamicCache(config=model.config), use_cache=True)
        rope_delta = adapter.rope_delta(model)
    cache = out.cache
    prefill_s = time.perf_counter() - t0
    if drafter.needs_predictions and len(ids) > 1:
        t0 = time.perf_counter()
        top_ids, top_probs = (t.cpu() for t in topk_predictions(out.logits[0], cfg.top_k))  # (P-1, k), host
        pre = [None, None, *ids[:-1]]
        keys = [(pre[t], pre[t + 1], pre[t + 2]) for t in range(len(ids) - 1)]
        drafter.observe(keys, top_ids, top_probs, step=0, depths=[0] * len(keys))
        prefill_s += time.perf_counter() - t0
    del out

    seq: list[int] = list(ids)  # the request's tokens so far; seq[-1] is the next root
    history = History(ids, target.device, keep_ids=rule.needs_context)  # the same, as the rule reads it
    prefix_len = len(ids) - 1  # tokens in the KV cache
    generated: list[int] = []
    # "total" is wall time since the call (it includes a streaming consumer's time between
    # yields); "compute" is the engine's own time: prefill + draft + verify + update.
    timings = {"prefill": prefill_s, "draft": 0.0, "verify": 0.0, "update": 0.0, "compute": prefill_s, "total": 0.0}
    tr = None
    if trace:
        tr = DecodeTrace(
            method=method,
            model=target.name,
            prompt=prompt,
            request=request,
            image_key=image_key(img),
            config=cfg.to_dict(),
            prompt_tokens=len(ids),
            budget=budget,
            notice=rule.notice,
        )
    step = 0
    while True:
        step += 1
        # 2. draft
        t0 = time.perf_counter()
        tree = drafter.draft(seq)
        t1 = time.perf_counter()
        # 3. verify: tree forward, logits processing, argmax
        verified = verify_tree(
            model, adapter, tree.tokens, tree.parents, tree.depths,
            prefix_len=prefix_len, rope_delta=rope_delta, cache=cache, device=target.device, dtype=target.dtype,
            rule=rule, history=history, host=host,
        )
        logits, argmax, cache = verified.logits, verified.argmax, verified.cache  # logits (N, V), raw
        del verified
        t2 = time.perf_counter()
        # 4. accept
        path, bonus = accept_greedy(tree, argmax)
        emitted, stop_reason = cut_at_stop(
            [tree.tokens[i] for i in path[1:]] + [bonus], len(generated), max_new_tokens, rule.eos
        )
        generated.extend(emitted)
        shown_path = path[: len(emitted) + 1] if len(emitted) < len(path) else path  # cut inside the path
        # 5. update: cache keeps prefix + accepted path; memories learn every node.
        if not stop_reason:
            keep_accepted(cache, prefix_len, path)
            prefix_len += len(path)
        if drafter.needs_predictions:
            _observe(drafter, tree, host, logits, argmax, path, seq, step)
        del logits
        seq.extend(emitted)
        history.extend(emitted)
        t3 = time.perf_counter()

        step_t = {"draft": t1 - t0, "verify": t2 - t1, "update": t3 - t2}
        for key, value in step_t.items():
            timings[key] += value
        timings["compute"] += t3 - t0
        timings["total"] = time.perf_counter() - t_start
        rec = StepRecord(
            step=step,
            tree=tree,
            argmax=argmax,
            accepted=shown_path,
            bonus=bonus,
            emitted=emitted,
            token_ids=list(generated),
            timings=dict(timings),
            step_timings=step_t,
            done=bool(stop_reason),
            stop_reason=stop_reason,
            request=request,
            budget=budget,
            notice=rule.notice,
            sampling_ignored=rule.sampling_ignored,
            tree_size=len(tree) - 1,
        )
        if tr is not None:
            rec.trace_step = trace_step(target, tree, argmax, shown_path, bonus, emitted, step, step_t, req_mem)
            tr.steps.append(rec.trace_step)
            tr.token_ids = list(generated)
            tr.token_texts = target.spell(generated)  # exact per-token spellings: their join is tr.text
            tr.text = "".join(tr.token_texts)
            tr.timings = dict(timings)
            tr.stop_reason = stop_reason
            rec.trace = tr
        yield rec
        if stop_reason:
            return


def _observe(
    drafter: Drafter,
    tree: DraftTree,
    host: HostPredictions,
    logits: torch.Tensor,
    argmax: list[int],
    path: list[int],
    seq: list[int],
    step: int,
) -> None:
    """Record every node's raw top-k prediction (rejected branches first, the path last: it wins)."""
    top_ids, top_probs = host.topk(logits)  # (N, k) on the host, whatever the device
    on_path = set(path)
    order = [i for i in range(len(tree)) if i not in on_path] + path
    keys = node_keys(tree, seq[-3:-1] if len(seq) >= 3 else [None, *seq[:-1]])
    drafter.observe(keys, top_ids, top_probs, step=step, depths=tree.depths, order=order, verified=(tree, argmax))


def generate(
    target: Target,
    image: Image.Image | str | os.PathLike[str] | None,
    prompt: str,
    *,
    method: str = "recap",
    max_new_tokens: int = 128,
    memory: TokenMemory | None = None,
    config: RecapConfig | None = None,
    trace: bool = False,
    generation_config: GenerationConfig | Mapping[str, Any] | None = None,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
) -> Generation:
    """Decode one request to the end (a thin wrapper over ``iter_steps``)."""
    last: StepRecord | None = None
    lengths: list[int] = []
    for rec in iter_steps(
        target, image, prompt, method=method, max_new_tokens=max_new_tokens, memory=memory, config=config,
        trace=trace, generation_config=generation_config, logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
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
        sampling_ignored=last.sampling_ignored,
        notice=last.notice,
    )


def resolve_budget(target: Target, config: RecapConfig) -> int:
    """The node budget for this target: the configured one, or measured when 'auto'."""
    if config.budget != "auto":
        return int(config.budget)
    return autobudget.auto_budget(target, config)
