"""What the app runs on a GPU, and for how long: the decode of one request (``decode_steps``) and a
benchmark suite (``bench_suite``). Every long job reaches the model through one of them.

On ZeroGPU (``app.boundary.gpu``) each is ``spaces.GPU`` with a duration computed from the call's own
bounds, and runs in another process: it takes plain values (the model's spec, the request, the
memory) and yields or returns what it made (the steps, then the memory; the results), and the
caller (``app.state.decoding.decode_run``, the Benchmark tab) writes them into the session. A
mutation made inside would be lost there. Everywhere else they are plain functions in this process,
and the values they hand back are the caller's own objects.

The durations are bounds, not measurements: ``DECODE_BASE_S`` for loading the request onto the GPU
(image encoding, prefill, the first tree's cost measurement) and ``SECONDS_PER_TOKEN`` per token
asked (a one-token pass of a 7B-class model with room for the drafting; fewer passes are the point,
but a decode with no accepted draft makes one per token), never above ``MAX_DURATION_S``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import recap

from ..boundary.gpu import on_gpu
from .model_entry import ModelSpec
from .targets import MODELS

DECODE_BASE_S = 15
SECONDS_PER_TOKEN = 0.1
MAX_DURATION_S = 300
#: The benchmark's generation limit per request (``recap.bench.bench``'s default).
BENCH_TOKENS = 160


@dataclass(frozen=True)
class DecodeRequest:
    """One request as ``recap.iter_steps`` takes it (plain values: on ZeroGPU they cross to the GPU's
    process)."""

    image: Any  # a PIL image or None
    prompt: str | None
    method: str
    max_new_tokens: int
    config: recap.RecapConfig
    generation_config: dict[str, Any] | None = None
    seed: int | None = None
    messages: list[dict[str, Any]] | None = None
    memory_scope: str | None = None


@dataclass(frozen=True)
class Decoded:
    """What ``decode_steps`` yields: a step (``step``), or last, the memory after the decode (``memory``)."""

    step: Any = None  # a recap StepRecord: its trace, request, done
    memory: Any = None
    finished: bool = False  # the last item: the decode ended and ``memory`` is its memory


def _bounded(seconds: float) -> int:
    return int(min(MAX_DURATION_S, max(1, round(seconds))))


def decode_seconds(spec: ModelSpec, request: DecodeRequest, memory: Any = None) -> int:
    """The GPU seconds one decode asks for: ``DECODE_BASE_S`` + ``SECONDS_PER_TOKEN`` per token asked."""
    return _bounded(DECODE_BASE_S + SECONDS_PER_TOKEN * max(0, int(request.max_new_tokens)))


@on_gpu(duration=decode_seconds)
def decode_steps(spec: ModelSpec, request: DecodeRequest, memory: Any = None) -> Iterator[Decoded]:
    """Decode ``request`` on the shared model of ``spec`` with ``memory``; yield each step, then the memory.

    The model is the shared one (``MODELS``: on ZeroGPU loaded at start, so the GPU's process has it).
    A caller that stops early closes the generator: the memory then stays as the steps left it in this
    process, and on ZeroGPU as it was before the call.
    """
    model = MODELS.get(spec)
    iterator = recap.iter_steps(
        model.target,
        request.image if request.messages is None else None,
        request.prompt if request.messages is None else None,
        messages=request.messages,
        memory_scope=request.memory_scope,
        method=request.method,
        max_new_tokens=request.max_new_tokens,
        memory=memory,
        config=request.config,
        trace=True,
        generation_config=request.generation_config,
        seed=request.seed,
    )
    try:
        while True:
            try:
                rec = model.step(iterator)
            except StopIteration:
                break
            yield Decoded(step=rec)
            if rec.done:
                break
    finally:
        iterator.close()
    yield Decoded(memory=memory, finished=True)


def bench_seconds(spec: ModelSpec, suite: str) -> int:
    """The GPU seconds a suite asks for: its requests x its rows x ``BENCH_TOKENS`` x ``SECONDS_PER_TOKEN``
    (capped: a suite longer than ``MAX_DURATION_S`` belongs on dedicated GPU hardware)."""
    from recap.bench.suite import HF_METHODS, all_methods

    rows = len(all_methods()) + len(HF_METHODS)
    return _bounded(DECODE_BASE_S + _suite_size(suite) * rows * BENCH_TOKENS * SECONDS_PER_TOKEN)


@functools.cache
def _suite_size(suite: str) -> int:
    """Requests in a suite (building one renders its scenes, about 2 s: once per process)."""
    from recap.bench.suite import build_suite

    return len(build_suite(suite))


@on_gpu(duration=bench_seconds)
def bench_suite(spec: ModelSpec, suite: str) -> dict[str, Any]:
    """One benchmark suite on a private copy of the model of ``spec`` (the shared one's lock is never held);
    returns the results (``recap.bench.bench``'s), which the caller writes."""
    from recap.bench import bench

    target = recap.load_target(spec.source, **spec.load_kwargs(MODELS.device))
    return bench(target, suite=suite, repeats=1, progress=True)  # the private copy goes with the call
