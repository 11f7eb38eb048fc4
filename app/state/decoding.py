"""Model access and the app's one decode loop: ``decode_run``.

A thin loop over ``recap.iter_steps(..., trace=True)`` that keeps the session's memories and
their history and yields the growing ``Run`` after every verification step; what it reads of a
decode is the trace (``recap.trace.format``), never the engine's internals. ``Sampling`` is how
a run draws (the Sampling group's choice, ``app.widgets.sampling_form``, parses into one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PIL import Image

import recap

from ..boundary.errors import UserError
from .gpu_calls import DecodeRequest, decode_steps
from .memories import MemorySlot, RequestRecord
from .runs import Run
from .session import Session
from .settings import ModelSpec, Settings, memory_methods, method_labels
from .targets import MODELS, LoadedModel

log = logging.getLogger("recap.app")

#: The seed a new page (and every API call that names none) starts with; "new seed" draws another.
DEFAULT_SEED = 1234


@dataclass(frozen=True)
class Sampling:
    """How a run draws: ``on`` with its warpers, or (off) under the model's own config; always ``seed``."""

    on: bool = False
    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 0
    seed: int = DEFAULT_SEED

    @property
    def generation_config(self) -> dict[str, Any] | None:
        """What ``recap.iter_steps`` gets as its ``generation_config`` (None: the model's own)."""
        if not self.on:
            return None
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}

    @property
    def note(self) -> str:
        """What the views say of settings that do not sample after all ("": none)."""
        if self.on and self.top_k == 1:
            return (
                "top-k 1 keeps only the most probable token: this run decodes greedily, as generate() would."
            )
        return ""


#: Sampling off, the default seed: what the app's own runs (guided demo, walkthrough, /decode) use.
OFF = Sampling()


def session_spec(session: Session, settings: Settings) -> ModelSpec:
    return session.model or settings.default_spec


def get_model(spec: ModelSpec, settings: Settings, progress: Any = None) -> LoadedModel:
    """The loaded model; UserError when it cannot load (in public mode without the server's details)."""
    try:
        return MODELS.get(spec, progress)
    except Exception as exc:  # noqa: BLE001 - any loader failure is one clear sentence
        log.warning("loading the model %s (%s) failed: %s", spec.name, spec.source, exc)
        if settings.public:
            raise UserError(
                f"the model {spec.name} could not be loaded (the server log has the details)"
            ) from None
        raise UserError(f"the model could not be loaded: {exc}") from None


def session_model(session: Session, settings: Settings) -> LoadedModel:
    return get_model(session_spec(session, settings), settings)


# --------------------------------------------------------------------------- the decode loop


def decode_run(
    session: Session,
    settings: Settings,
    image: Image.Image | None,
    prompt: str,
    method: str,
    max_new_tokens: int,
    *,
    config: recap.RecapConfig,
    source: str = "run",
    label: str = "",
    memory_slot: MemorySlot | None = None,
    model: LoadedModel | None = None,
    add: bool = True,
    sampling: Sampling = OFF,
    messages: list[dict[str, Any]] | None = None,
    memory_scope: str | None = None,
) -> Iterator[Run]:
    """Decode one request; yield the (growing) Run after every verification step.

    ``sampling``: the Sampling group's choice (``app.widgets.sampling_form``): its generation config
    (None: the model's own) and the seed every draw comes from, a private generator per run, so
    the same seed gives the same tokens whatever the method (default: off, the default seed).

    ``messages``: a conversation's next turn (``app.state.conversation``; ``image`` is then only its
    thumbnail's, ``prompt`` the question), decoded under ``memory_scope``.

    Uses the session's persistent memory for the method (or ``memory_slot``), records
    the request in that memory's history, honours the session's stop flag (the trace
    then ends with stop_reason "stopped"), and adds the run to the session (unless
    ``add`` is false).
    """
    model = model or session_model(session, settings)
    target = model.target
    slot = None
    if method in memory_methods():
        slot = memory_slot or session.slot(model.spec.source, method, config.top_k, target.vocab_size)
    run_id = session.next_run_id()
    thumb = session.files.thumbnail(image, f"request_{run_id}")
    request = DecodeRequest(image, prompt, method, max_new_tokens, config, sampling.generation_config,
                            sampling.seed, messages, memory_scope)
    # The GPU call (app.state.gpu_calls) yields the steps, then the memory; the session is written here,
    # never inside it (on ZeroGPU it runs in another process).
    steps = decode_steps(model.spec, request, slot.memory if slot else None)
    run: Run | None = None
    try:
        while True:
            try:
                item = next(steps)
            except StopIteration:
                break
            except (recap.InputError, ValueError) as exc:
                raise UserError(str(exc)) from None
            if item.finished:
                if slot is not None:
                    slot.memory = item.memory  # the same object here; the GPU process's copy on ZeroGPU
                break
            rec = item.step
            if run is None:
                assert rec.trace is not None
                rec.trace.model = model.name  # the short name: traces and views never carry a server path
                run = Run(
                    run_id,
                    rec.trace,
                    thumb,
                    slot,
                    source,
                    label or f"run {run_id} · {method_labels()[method]}",
                )
                if add:
                    session.add_run(run)
                if slot is not None:
                    slot.requests[rec.request] = RequestRecord(
                        rec.request, method, prompt, thumb, rec.trace.image_key, None, run_id
                    )
                    session.trim_history(slot)
            else:
                rec.trace.model = model.name
                run.follow(rec.trace)  # the same trace here; each step's copy on ZeroGPU
            yield run
            if session.jobs.stop.is_set() and not rec.done:
                run.trace.stop_reason = "stopped"
                yield run
                break
    finally:
        steps.close()


def decode_to_end(session: Session, settings: Settings, image: Image.Image | None, prompt: str, method: str,
                  max_new_tokens: int, *, config: recap.RecapConfig, **kwargs: Any) -> Run:
    """``decode_run`` to its end; the finished Run."""
    run = None
    for run in decode_run(session, settings, image, prompt, method, max_new_tokens, config=config,  # noqa: B007
                          **kwargs):
        pass
    if run is None:
        raise UserError("the decode produced no step")
    return run
