"""A model's generation config, resolved into the rule that acceptance applies.

Lossless means "what this model's own ``generate()`` emits". ``generate()`` does not take
the raw logits: it runs the logits processors its ``generation_config`` asks for
(repetition penalty, n-gram bans, minimum length, suppressed and forced tokens, ...), then,
when it samples, the warpers (temperature, top-k, top-p, ...), and takes the argmax of the
result or draws from it. ``acceptance_rule(model, generation_config, ...)`` resolves the
config exactly as ``generate()`` does (the caller's config, its unset fields filled from
``model.generation_config``, then transformers' global defaults) and turns it into an
acceptance rule (``recap.verification.acceptance``, the contract): plain data and small
tensors that ``recap.verification.acceptance.process_logits`` applies to every tree node at once.

What the rule covers, in transformers' own order: ``sequence_bias``,
``repetition_penalty``, ``no_repeat_ngram_size``, ``bad_words_ids``, ``min_length`` /
``min_new_tokens``, ``forced_bos_token_id``, ``forced_eos_token_id``,
``remove_invalid_values``, ``suppress_tokens``, ``begin_suppress_tokens``, then under
``do_sample`` the warpers ``temperature``, ``top_h``, ``top_k``, ``top_p``, ``min_p``,
``typical_p``, ``epsilon_cutoff``, ``eta_cutoff`` (``sampling_warpers``: transformers' own
classes, built as generate() builds them), then ``renormalize_logits``; every id of
``eos_token_id`` stops. The engine's ``max_new_tokens`` replaces the config's
``max_new_tokens`` / ``max_length``, exactly like ``generate(max_new_tokens=n)``.

Greedy or sampling: ``do_sample=False`` gives a ``GreedyRule`` (the processed argmax); every
``do_sample=True`` config gives a ``SamplingRule`` (``recap.verification.sampling``): draws from
the default generator, or from a private one seeded with ``seed``. That includes ``top_k=1`` (as
Qwen2-VL / Qwen2.5-VL ship), whose warpers keep one token: ``generate()`` still draws once per
token, so the same draws keep the random stream after the call where ``generate()`` leaves it
(and a tie at the top breaks as its top-k warper breaks it). Anything else ``generate()`` would do
differently (beam search, contrastive search, DoLa, guidance, several return sequences, stop
strings, a time limit, ...) raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopHLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from recap.verification.acceptance import AcceptanceRule, GreedyRule, SamplingSettings, SequenceBias
from recap.verification.sampling import SamplingRule, Warper
from recap.verification.seed import check_seed

#: Generation modes whose output tree verification reproduces. Assisted generation (prompt
#: lookup, an assistant model) is itself lossless over greedy / sample; under sampling it
#: uses the generator differently, so its tokens are plain sampling's in distribution only.
SUPPORTED_MODES = ("greedy_search", "sample", "assisted_generation")
#: The fields that select each other mode, named in the error.
MODE_FIELDS = {
    "contrastive_search": "penalty_alpha, top_k",
    "dola_generation": "dola_layers",
    "beam_search": "num_beams",
    "beam_sample": "num_beams",
    "constrained_beam_search": "constraints / force_words_ids",
    "group_beam_search": "num_beams, num_beam_groups",
}


def _unsupported(gc: GenerationConfig) -> list[str]:
    """Fields set to something that changes generate()'s output in a way recap does not apply."""

    def val(name: str) -> Any:
        return getattr(gc, name, None)

    checks = {
        "guidance_scale": val("guidance_scale") is not None and val("guidance_scale") != 1,
        "encoder_repetition_penalty": val("encoder_repetition_penalty") not in (None, 1.0),
        "encoder_no_repeat_ngram_size": (val("encoder_no_repeat_ngram_size") or 0) > 0,
        "exponential_decay_length_penalty": val("exponential_decay_length_penalty") is not None,
        "watermarking_config": val("watermarking_config") is not None,
        "stop_strings": val("stop_strings") is not None,
        "max_time": val("max_time") is not None,
        "token_healing": bool(val("token_healing")),
        "num_return_sequences": (val("num_return_sequences") or 1) > 1,
    }
    return [name for name, bad in checks.items() if bad]


def _sequence_bias(
    field: str, bias: dict[tuple[int, ...], float], vocab: int, device: torch.device
) -> SequenceBias:
    too_big = sorted({t for seq in bias for t in seq if t >= vocab})
    if too_big:
        raise ValueError(
            f"generation config {field}: token ids {too_big} are outside the vocabulary of {vocab}"
        )
    single = None
    ones = {seq[0]: b for seq, b in bias.items() if len(seq) == 1}
    if ones:
        single = torch.zeros(vocab, dtype=torch.float32, device=device)
        single[list(ones)] = torch.tensor(list(ones.values()), dtype=torch.float32, device=device)
    by_len: dict[int, list[tuple[tuple[int, ...], float]]] = {}
    for seq, b in bias.items():
        if len(seq) > 1:
            by_len.setdefault(len(seq) - 1, []).append((seq, b))
    groups = tuple(
        (
            torch.tensor([s[:-1] for s, _ in group], device=device),
            torch.tensor([s[-1] for s, _ in group], device=device),
            torch.tensor([b for _, b in group], dtype=torch.float32, device=device),
        )
        for group in by_len.values()
    )
    return SequenceBias(single, groups)


def _token_lists(field: str, value: Any) -> list[list[int]]:
    ok = isinstance(value, list) and value and all(
        isinstance(seq, list) and seq
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in seq)
        for seq in value
    )
    if not ok:
        raise ValueError(
            f"generation config {field} must be a non-empty list of non-empty lists of token ids, "
            f"got {value!r}"
        )
    return value


def _parse_sequence_bias(value: Any) -> dict[tuple[int, ...], float]:
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list):
        pairs = (isinstance(p, (list, tuple)) and len(p) == 2 for p in value)
        items = [(p[0], p[1]) if ok else (None, None) for p, ok in zip(value, pairs)]
    else:
        items = [(None, None)]
    out: dict[tuple[int, ...], float] = {}
    for seq, bias in items:
        seq = tuple(seq) if isinstance(seq, (list, tuple)) else None
        if not seq or not all(isinstance(t, int) and t >= 0 for t in seq) or not isinstance(bias, float):
            raise ValueError(
                "generation config sequence_bias must map non-empty token-id sequences to float biases, "
                f"got {value!r}"
            )
        out[seq] = bias
    if not out:
        raise ValueError(f"generation config sequence_bias must not be empty, got {value!r}")
    return out


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def _mask(ids: Any, vocab: int, device: torch.device) -> torch.Tensor | None:
    """(V,) bool: True at the given ids (ids outside the vocabulary are ignored, as in transformers)."""
    ids = [i for i in _ids(ids) if 0 <= i < vocab]
    if not ids:
        return None
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    mask[ids] = True
    return mask


def resolve_generation_config(
    model: Any, generation_config: GenerationConfig | Mapping[str, Any] | None
) -> GenerationConfig:
    """The config generate() would run with: the caller's, unset fields from the model's, then defaults."""
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        if not isinstance(generation_config, Mapping):
            raise ValueError(
                "generation_config must be a transformers GenerationConfig or a dict, got "
                f"{type(generation_config).__name__}"
            )
        try:
            generation_config = GenerationConfig(**dict(generation_config))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid generation_config: {exc}") from exc
    try:
        resolved, _ = model._prepare_generation_config(generation_config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid generation config: {exc}") from exc
    return resolved


def acceptance_rule(
    model: Any,
    generation_config: GenerationConfig | Mapping[str, Any] | None,
    *,
    prompt_len: int,
    max_new_tokens: int,
    vocab_size: int,
    device: torch.device | str = "cpu",
    seed: int | None = None,
) -> AcceptanceRule:
    """Resolve ``generation_config`` (None: the model's own) into the rule for one request.

    seed: for a config that samples, draw from a private ``torch.Generator`` seeded with it
    (on ``device``) instead of torch's default generator; a greedy config draws nothing and
    ignores it. Raises ValueError naming the field when generate() would do something tree
    verification cannot reproduce.
    """
    gc = resolve_generation_config(model, generation_config)
    device = torch.device(device)
    mode = str(getattr(gc.get_generation_mode(), "value", gc.get_generation_mode()))
    if mode not in SUPPORTED_MODES:
        raise ValueError(
            f"the generation config asks for {mode.replace('_', ' ')} "
            f"({MODE_FIELDS.get(mode, 'see its fields')}); "
            "recap reproduces greedy decoding and sampling only: set num_beams=1 and "
            "leave those fields unset, or use model.generate()"
        )
    bad = _unsupported(gc)
    if bad:
        raise ValueError(
            f"the generation config sets {', '.join(bad)}, which recap cannot reproduce exactly; "
            "unset it (or use model.generate())"
        )
    check_seed(seed)
    # every do_sample config draws, top_k=1 too: generate() makes one draw per token whatever the
    # warpers leave, and the generator's state after the call is part of what it does
    samples = bool(gc.do_sample)
    processing = _processing(gc, prompt_len, max_new_tokens, vocab_size, device,
                             renormalize=bool(gc.renormalize_logits) and not gc.do_sample)
    if not samples:
        return processing
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    return SamplingRule(
        processing=processing,
        warpers=sampling_warpers(gc, device),
        renormalize=bool(gc.renormalize_logits),
        sampling=sampling_settings(gc, seed),
        generator=generator,
    )


def sampling_warpers(gc: GenerationConfig, device: torch.device) -> tuple[Warper, ...]:
    """The warpers generate() appends under ``do_sample`` (its ``_get_logits_processor``), in its
    order and with its arguments (one sequence, no beams: ``min_tokens_to_keep`` 1). A value the
    warper refuses raises ValueError naming the field, as generate() would."""
    keep = 1
    out: list[Warper] = []
    try:
        if gc.temperature is not None and gc.temperature != 1.0:
            out.append(TemperatureLogitsWarper(gc.temperature))
        if gc.top_h is not None:
            out.append(TopHLogitsWarper(top_h=gc.top_h))
        if gc.top_k is not None and gc.top_k != 0:
            out.append(TopKLogitsWarper(top_k=gc.top_k, min_tokens_to_keep=keep))
        if gc.top_p is not None and gc.top_p < 1.0:
            out.append(TopPLogitsWarper(top_p=gc.top_p, min_tokens_to_keep=keep))
        if gc.min_p is not None:
            out.append(MinPLogitsWarper(min_p=gc.min_p, min_tokens_to_keep=keep))
        if gc.typical_p is not None and gc.typical_p < 1.0:
            out.append(TypicalLogitsWarper(mass=gc.typical_p, min_tokens_to_keep=keep))
        if gc.epsilon_cutoff is not None and 0.0 < gc.epsilon_cutoff < 1.0:
            out.append(EpsilonLogitsWarper(epsilon=gc.epsilon_cutoff, min_tokens_to_keep=keep))
        if gc.eta_cutoff is not None and 0.0 < gc.eta_cutoff < 1.0:
            out.append(EtaLogitsWarper(epsilon=gc.eta_cutoff, min_tokens_to_keep=keep, device=device))
    except ValueError as exc:  # transformers' messages name the field (`top_p` has to be ...)
        raise ValueError(f"generation config: {exc}") from None
    return tuple(out)


def sampling_settings(gc: GenerationConfig, seed: int | None) -> SamplingSettings:
    """The warpers' settings as ``sampling_warpers`` applies them (None: that warper is off)."""
    return SamplingSettings(
        temperature=float(gc.temperature) if gc.temperature is not None else 1.0,
        top_k=int(gc.top_k) if gc.top_k else None,
        top_p=float(gc.top_p) if gc.top_p is not None and gc.top_p < 1.0 else None,
        min_p=float(gc.min_p) if gc.min_p is not None else None,
        typical_p=float(gc.typical_p) if gc.typical_p is not None and gc.typical_p < 1.0 else None,
        epsilon_cutoff=(
            float(gc.epsilon_cutoff) if gc.epsilon_cutoff and 0.0 < gc.epsilon_cutoff < 1.0 else None
        ),
        eta_cutoff=float(gc.eta_cutoff) if gc.eta_cutoff and 0.0 < gc.eta_cutoff < 1.0 else None,
        top_h=float(gc.top_h) if gc.top_h is not None else None,
        seed=seed,
    )


def _processing(
    gc: GenerationConfig, prompt_len: int, max_new_tokens: int, vocab_size: int, device: torch.device,
    *, renormalize: bool,
) -> GreedyRule:
    """The processors before the warpers (``renormalize``: ``renormalize_logits`` ends them, as
    under greedy decoding), the EOS ids and the lengths."""
    eos = _ids(gc.eos_token_id)
    # min_new_tokens replaces min_length (prompt + min_new_tokens), as generate() does.
    min_length = int(gc.min_length or 0)
    if gc.min_new_tokens is not None:
        min_length = prompt_len + int(gc.min_new_tokens)
    forced_bos = _ids(gc.forced_bos_token_id)
    forced_eos = _ids(gc.forced_eos_token_id)
    for name, ids in (("forced_bos_token_id", forced_bos), ("forced_eos_token_id", forced_eos)):
        if any(not 0 <= i < vocab_size for i in ids):
            raise ValueError(f"generation config {name}={ids} is outside the vocabulary of {vocab_size}")

    sequence_bias = None
    if gc.sequence_bias is not None:
        parsed = _parse_sequence_bias(gc.sequence_bias)
        sequence_bias = _sequence_bias("sequence_bias", parsed, vocab_size, device)
    bad_words = None
    if gc.bad_words_ids is not None:
        # generate() drops one-token bad words that are an EOS id (and then, if none is left, bans nothing)
        words = [w for w in _token_lists("bad_words_ids", gc.bad_words_ids) if all(w != [e] for e in eos)]
        if words:
            banned = {tuple(w): float("-inf") for w in words}
            bad_words = _sequence_bias("bad_words_ids", banned, vocab_size, device)

    penalty = gc.repetition_penalty
    if penalty is not None and penalty != 1.0:
        if not isinstance(penalty, float) or not penalty > 0:
            raise ValueError(
                f"generation config repetition_penalty must be a positive float, got {penalty!r}"
            )
    else:
        penalty = None
    ngram = gc.no_repeat_ngram_size
    if ngram is None or not ngram > 0:  # generate() adds no processor then
        ngram = 0
    elif not isinstance(ngram, int):
        raise ValueError(f"generation config no_repeat_ngram_size must be an int, got {ngram!r}")

    begin_index = prompt_len if (prompt_len > 1 or gc.forced_bos_token_id is None) else prompt_len + 1
    return GreedyRule(
        eos=frozenset(eos),
        prompt_len=prompt_len,
        max_length=prompt_len + max_new_tokens,
        sequence_bias=sequence_bias,
        repetition_penalty=penalty,
        no_repeat_ngram_size=int(ngram),
        bad_words=bad_words,
        min_length=min_length if eos else 0,  # without an EOS, generate() adds no min-length processor
        eos_mask=_mask(eos, vocab_size, device),
        forced_bos=forced_bos,
        forced_eos=forced_eos,
        remove_invalid_values=bool(gc.remove_invalid_values),
        suppress=_mask(gc.suppress_tokens, vocab_size, device),
        begin_suppress=_mask(gc.begin_suppress_tokens, vocab_size, device),
        begin_index=begin_index,
        renormalize=renormalize,
    )
