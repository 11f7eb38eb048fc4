"""What every tab shares, in one place: the decode run, model access, validation, errors, records.

Tabs import all of it from here. The pieces live in small modules of their own:
``app.boundary`` (errors, guarded handlers, one job per visitor), ``app.validation``
(checking what visitors send), ``app.config_form`` (the advanced settings: widgets and
their checks), ``app.records`` (typed output records). This module adds
model access and ``decode_run``, the one decode loop of the app: a thin loop over
``recap.iter_steps(..., trace=True)`` that keeps the session's memories and history and
yields the growing ``Run`` after every verification step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from PIL import Image

import recap
from app.boundary import (
    ALREADY_QUEUED,
    UserError,
    decode_queue,
    fail,
    guarded,
    job_handler,
    log,
    on_gpu,
    one_job_per_visitor,
    redact,
    warn,
)
from app.config_form import check_limits, parse_config
from app.records import KEEP, Record
from app.sampling_form import OFF, Sampling, parse_sampling
from app.session import MemorySlot, RequestRecord, Run, Session
from app.settings import ModelSpec, Settings, memory_methods, method_labels
from app.targets import MODELS, LoadedModel
from app.validation import as_float, as_int, check_request, check_top_k, event_index, open_image

__all__ = [
    "ALREADY_QUEUED", "KEEP", "Record", "UserError", "as_float", "as_int", "check_limits", "check_request",
    "check_top_k", "decode_queue", "decode_run", "decode_to_end", "event_index", "fail", "get_model", "guarded",
    "job_handler", "log", "on_gpu", "one_job_per_visitor", "open_image", "parse_config", "parse_sampling", "redact",
    "session_model", "session_spec", "warn",
]


def session_spec(session: Session, settings: Settings) -> ModelSpec:
    return session.model or settings.default_spec


def get_model(spec: ModelSpec, settings: Settings, progress: Any = None) -> LoadedModel:
    """The loaded model; UserError when it cannot load (in public mode without the server's details)."""
    try:
        return MODELS.get(spec, progress)
    except Exception as exc:  # noqa: BLE001 - any loader failure is one clear sentence
        log.warning("loading the model %s (%s) failed: %s", spec.name, spec.source, exc)
        if settings.public:
            raise UserError(f"the model {spec.name} could not be loaded (the server log has the details)") from None
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
    config: recap.RecapConfig,
    *,
    source: str = "run",
    label: str = "",
    memory_slot: MemorySlot | None = None,
    model: LoadedModel | None = None,
    add: bool = True,
    sampling: Sampling = OFF,
) -> Iterator[Run]:
    """Decode one request; yield the (growing) Run after every verification step.

    ``sampling``: the Sampling group's choice (``app.sampling_form``): its generation config
    (None: the model's own) and the seed every draw comes from, a private generator per run, so
    the same seed gives the same tokens whatever the method (default: off, the default seed).

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
    thumb = session.thumbnail(image, run_id)
    iterator = recap.iter_steps(
        target,
        image,
        prompt,
        method=method,
        max_new_tokens=max_new_tokens,
        memory=slot.memory if slot else None,
        config=config,
        trace=True,
        generation_config=sampling.generation_config,
        seed=sampling.seed,
    )
    run: Run | None = None
    try:
        while True:
            try:
                rec = model.step(iterator)
            except StopIteration:
                break
            except (recap.InputError, ValueError) as exc:
                raise UserError(str(exc)) from None
            if run is None:
                assert rec.trace is not None
                rec.trace.model = model.name  # the short name: traces and views never carry a server path
                run = Run(run_id, rec.trace, thumb, slot, source, label or f"run {run_id} · {method_labels()[method]}")
                if add:
                    session.add_run(run)
                if slot is not None:
                    slot.requests[rec.request] = RequestRecord(
                        rec.request, method, prompt, thumb, rec.trace.image_key, None, run_id
                    )
                    session.trim_history(slot)
            yield run
            if rec.done:
                break
            if session.stop.is_set():
                run.trace.stop_reason = "stopped"
                yield run
                break
    finally:
        iterator.close()


def decode_to_end(session: Session, settings: Settings, image: Image.Image | None, prompt: str, method: str,
                  max_new_tokens: int, config: recap.RecapConfig, **kwargs: Any) -> Run:
    """``decode_run`` to its end; the finished Run."""
    run = None
    for run in decode_run(session, settings, image, prompt, method, max_new_tokens, config, **kwargs):  # noqa: B007
        pass
    if run is None:
        raise UserError("the decode produced no step")
    return run
