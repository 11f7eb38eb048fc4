"""RECAP inside transformers' ``generate()``: ``custom_generate=recap.decoding(...)`` (issue 38).

    out = model.generate(**inputs, custom_generate=recap.decoding(method="recap", memory=memory),
                         max_new_tokens=64)

The contract (transformers 5.24, ``GenerationMixin.generate``): given a callable,
``generate()`` does its own preparation (the generation config with its keywords merged in,
the special tokens, the lengths, the logits processors and stopping criteria, the model
keywords), then calls ``fn(model, input_ids, logits_processor=, stopping_criteria=,
generation_config=, **model_kwargs)`` instead of its decoding loop and returns what ``fn``
returns. ``Decoding`` is such a callable over the one engine: ``recap.iter_steps(target,
inputs=...)``, the loop ``recap.generate`` runs, so the output is token for token greedy (or
equal-seed sampled) ``generate()``'s. It returns what ``generate()`` returns: the (1, P + n)
LongTensor of prompt and new tokens, or with ``return_dict_in_generate=True`` a
``RecapGenerateOutput`` (a ``GenerateDecoderOnlyOutput``: ``sequences``, the score fields None)
carrying the decode's record (``trace`` with ``decoding(trace=True)``, ``decode_steps``, ...).

Where the contract does not fit, and what is done:

* **Images.** ``generate()`` runs the vision encoder before the loop and drops the processor's
  image inputs (``image_grid_thw`` too) for encoder outputs and positions of its own. The engine
  prefills from the processor's outputs (its family adapters compute the positions), so
  ``__call__`` names the image inputs (``IMAGE_INPUTS``) as parameters: ``generate()`` hands a
  callable's own parameters over untouched, before its preparation (transformers PR #40586).
* **The streamer.** ``generate()`` puts the prompt into its ``streamer=`` and then gives a
  callable none (5.24 keeps only the callable's own parameters), so the tokens and ``end()`` would
  never come and a ``TextIteratorStreamer`` reader would wait forever. ``__call__`` reads it from
  the frame of the ``generate()`` call that passed this very callable (read-only; nothing of
  transformers is changed) and sends it the rest: the calls ``generate(streamer=...)`` makes.
  ``decoding(streamer=...)`` is the other way in (the prompt included).
* **Custom processors and criteria** (``logits_processor=``, ``prefix_allowed_tokens_fn=``,
  ``negative_prompt_ids=``, ``stopping_criteria=``...): the lists ``generate()`` hands over are
  compared with the ones its generation config alone builds; anything more is refused
  (``ValueError`` naming the class): a tree cannot run a callable per node exactly.
* Refused too, each named: ``assistant_model=`` (read like the streamer), a batch of several
  sequences, padding, a prefilled cache, model keywords the engine does not take
  (``inputs_embeds``...), ``output_scores`` / ``output_logits`` / ``output_attentions`` /
  ``output_hidden_states``. The generation config's own refusals are the engine's
  (``recap.verification.generation_config``).

The model is wrapped with ``recap.Target.from_model`` (once per model object); texts (a trace)
need ``decoding(processor=...)``. ``hub_generate`` is the same call for the Hub layout: the
repository's ``custom_generate/generate.py`` is one line over it.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from recap.core.config import RecapConfig
from recap.engine.generate_args import IMAGE_INPUTS, check_streamer
from recap.engine.loop import iter_steps
from recap.memory.scoped import check_owner
from recap.memory.store import TokenMemory
from recap.methods import get_method
from recap.models.target import Target, check_processor, wrap_model
from recap.trace.format import DecodeTrace
from recap.verification.generation_config import acceptance_rule
from recap.verification.seed import check_seed

#: Model keywords generate() adds for its own loop: the engine makes its own cache and positions.
OWN_KEYWORDS = frozenset({"cache", "position_ids", "use_cache", "logits_to_keep", "mm_encoder_outputs"})
#: Model keywords with one entry per prompt token that the engine's prefill takes as given.
TOKEN_KEYWORDS = frozenset({"attention_mask", "mm_token_type_ids", "token_type_ids"})
#: Output fields recap does not compute (it verifies trees, not one token's scores at a time).
OUTPUT_FIELDS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
#: The arguments of ``decoding`` that ``hub_generate`` takes out of generate()'s keywords.
OPTIONS = ("method", "memory", "config", "seed", "trace", "processor", "owner", "memory_scope")

#: One Target per model object (its prefill lock guards the model's per-request rope state).
_TARGETS: weakref.WeakKeyDictionary[Any, Target] = weakref.WeakKeyDictionary()


@dataclass
class RecapGenerateOutput(GenerateDecoderOnlyOutput):
    """``generate()``'s output object, with the RECAP decode's record (the score fields stay None)."""

    method: str | None = None
    decode_steps: int | None = None  # target passes after the prefill
    accepted_lengths: list[int] | None = None  # tokens emitted per pass
    stop_reason: str | None = None  # "eos" or "max_new_tokens"
    timings: dict[str, float] | None = None
    trace: DecodeTrace | None = None  # with decoding(trace=True)

    @property
    def mat(self) -> float:
        """Mean accepted tokens per target pass."""
        return sum(self.accepted_lengths or []) / self.decode_steps if self.decode_steps else 0.0


class Decoding:
    """The ``custom_generate=`` callable (see the module docstring); build it with ``recap.decoding``."""

    def __init__(
        self, *, method: str = "recap", memory: TokenMemory | None = None, config: RecapConfig | None = None,
        seed: int | None = None, trace: bool = False, processor: Any = None, streamer: Any = None,
        owner: str | None = None, memory_scope: str | None = None,
    ) -> None:
        get_method(method)  # a ValueError naming the choices
        if memory is not None and not isinstance(memory, TokenMemory):
            raise ValueError(f"memory must be a recap.TokenMemory, got {type(memory).__name__}")
        if config is not None and not isinstance(config, RecapConfig):
            raise ValueError(f"config must be a recap.RecapConfig, got {type(config).__name__}")
        if not isinstance(trace, bool):
            raise ValueError(f"trace must be True or False, got {trace!r}")
        if trace and processor is None:
            raise ValueError("trace=True needs processor=: a trace spells its tokens with the tokenizer")
        check_processor(processor)
        check_streamer(streamer)
        check_owner(owner)
        if memory_scope is not None and not (isinstance(memory_scope, str) and memory_scope):
            raise ValueError(f"memory_scope must be a non-empty string or None, got {memory_scope!r}")
        self.method, self.memory, self.config, self.seed = method, memory, config, check_seed(seed)
        self.trace, self.processor, self.streamer = trace, processor, streamer
        self.owner, self.memory_scope = owner, memory_scope

    def __call__(
        self,
        model: Any,
        input_ids: torch.LongTensor,
        *,  # generate() passes the model and the ids by position, the rest by name
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        generation_config: Any = None,
        # the processor's image inputs, handed over before generate() encodes them (module docstring)
        pixel_values: torch.Tensor | None = None,
        pixel_values_videos: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
        video_grid_thw: torch.Tensor | None = None,
        image_sizes: torch.Tensor | None = None,
        pixel_attention_mask: torch.Tensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
        **model_kwargs: Any,
    ) -> torch.LongTensor | RecapGenerateOutput:
        if generation_config is None:
            raise ValueError("recap.decoding() runs inside model.generate(custom_generate=...), "
                             "which passes the generation config; call it that way")
        images = {
            "pixel_values": pixel_values, "pixel_values_videos": pixel_values_videos,
            "image_grid_thw": image_grid_thw, "video_grid_thw": video_grid_thw, "image_sizes": image_sizes,
            "pixel_attention_mask": pixel_attention_mask, "second_per_grid_ts": second_per_grid_ts,
        }
        assert set(images) == set(IMAGE_INPUTS)  # one list: the parameters above are IMAGE_INPUTS
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            # generate() expands the batch for beams and return sequences: name those settings first
            acceptance_rule(model, generation_config, prompt_len=int(input_ids.shape[-1]), max_new_tokens=1,
                            vocab_size=int(model.get_output_embeddings().weight.shape[0]))
            raise ValueError(
                f"recap decodes one sequence at a time, but generate() got a batch of {input_ids.shape[0]}; "
                "call it once per prompt"
            )
        asked = [name for name in OUTPUT_FIELDS if getattr(generation_config, name, False)]
        if asked:
            raise ValueError(f"{', '.join(asked)} cannot be returned by recap's decoding (it verifies whole "
                             "trees, not one token's scores at a time); unset them")
        as_dict = bool(generation_config.return_dict_in_generate)
        if self.trace and not as_dict:
            raise ValueError("decoding(trace=True) needs return_dict_in_generate=True: the trace is a field "
                             "of the output object")
        prompt_len = int(input_ids.shape[1])
        caller = sys._getframe(1).f_locals  # generate() itself, when it runs this callable
        ours = caller.get("custom_generate") is self
        given_streamer = caller.get("streamer") if ours else None
        assistant = caller.get("assistant_model") if ours else None
        del caller  # none of generate()'s locals kept past here
        if assistant is not None:  # generate() drops it for a callable: say so
            raise ValueError("assistant_model= is not used by recap's decoding, which drafts from its own "
                             "memory; leave it out")
        streamer = _streamer(self.streamer, given_streamer)
        _check_lists(model, generation_config, input_ids, logits_processor, stopping_criteria, model_kwargs)
        inputs = _model_inputs(input_ids, images, model_kwargs)
        last, lengths = None, []
        for rec in iter_steps(
            _target(model, self.processor), inputs=inputs, method=self.method,
            max_new_tokens=int(generation_config.max_length) - prompt_len, memory=self.memory,
            config=self.config, trace=self.trace, generation_config=generation_config, seed=self.seed,
            owner=self.owner, memory_scope=self.memory_scope, streamer=streamer,
        ):
            lengths.append(len(rec.emitted))
            last = rec
        assert last is not None  # max_new_tokens >= 1 (generate() refuses a max_length the prompt fills)
        new = torch.tensor([last.token_ids], dtype=input_ids.dtype, device=input_ids.device)
        sequences = torch.cat([input_ids, new], dim=1)
        if not as_dict:
            return sequences
        return RecapGenerateOutput(
            sequences=sequences, method=self.method, decode_steps=last.step, accepted_lengths=lengths,
            stop_reason=last.stop_reason, timings=dict(last.timings), trace=last.trace,
        )


def decoding(
    *, method: str = "recap", memory: TokenMemory | None = None, config: RecapConfig | None = None,
    seed: int | None = None, trace: bool = False, processor: Any = None, streamer: Any = None,
    owner: str | None = None, memory_scope: str | None = None,
) -> Decoding:
    """The ``custom_generate=`` callable that runs ``method`` (``recap.METHODS``) inside ``generate()``.

    memory / config / seed / owner / memory_scope: as ``recap.generate`` takes them (keep the
    memory to stay warm across calls). trace: the ``DecodeTrace`` as the output object's ``trace``
    (needs ``return_dict_in_generate=True`` and ``processor``). processor: the model's processor
    (texts). streamer: transformers' streamer protocol, for a call whose ``generate()`` has none
    (``generate(streamer=...)`` works too: the module docstring says how). Bad values raise
    ValueError naming them.
    """
    return Decoding(method=method, memory=memory, config=config, seed=seed, trace=trace, processor=processor,
                    streamer=streamer, owner=owner, memory_scope=memory_scope)


def hub_generate(model: Any, *args: Any, **kwargs: Any) -> Any:
    """``generate(model, ...)`` for ``custom_generate/generate.py`` (the Hub layout): ``generate()``'s
    own arguments, plus ``decoding``'s (``method=``, ``memory=``, ...) and its ``streamer=`` taken
    out of them, run through the class's ``generate`` with ``custom_generate=decoding(...)``."""
    options = {name: kwargs.pop(name) for name in OPTIONS if name in kwargs}
    streamer = kwargs.pop("streamer", None)
    # The class's generate: a model loaded from such a repository has this very function as its own
    # generate (transformers binds it at load), which would call itself.
    method = decoding(streamer=streamer, **options)
    return type(model).generate(model, *args, custom_generate=method, **kwargs)


# --------------------------------------------------------------------------- checks


class _AfterPrompt:
    """generate()'s own streamer, which has had the prompt: the engine's first put (the prompt) is
    not sent again, the tokens and ``end()`` are."""

    def __init__(self, streamer: Any) -> None:
        self.streamer, self.prompt_sent = streamer, False

    def put(self, value: torch.Tensor) -> None:
        if self.prompt_sent:
            self.streamer.put(value)
        self.prompt_sent = True

    def end(self) -> None:
        self.streamer.end()


def _streamer(own: Any, generates: Any) -> Any:
    """The streamer to decode with: ``decoding(streamer=)``'s, or the one generate() was given."""
    if generates is None:
        return own
    if own is not None and own is not generates:
        raise ValueError("two streamers: pass one, to generate(streamer=) or to recap.decoding(streamer=)")
    check_streamer(generates)
    return _AfterPrompt(generates)


def _target(model: Any, processor: Any) -> Target:
    """The model's Target, wrapped once per model object (and again when its processor, device or
    dtype changed; the prefill lock stays the model's)."""
    known = _TARGETS.get(model)
    if known is not None and known.processor is processor and (known.device, known.dtype) == (
        model.device, model.dtype
    ):
        return known
    target = wrap_model(model, processor)
    if known is not None:
        target.prefill_lock = known.prefill_lock
    _TARGETS[model] = target
    return target


def _model_inputs(
    input_ids: torch.Tensor, images: dict[str, Any], model_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The request's model inputs as the processor made them, from what generate() handed over."""
    cache = model_kwargs.get("cache")
    if cache is not None and cache.get_seq_length() > 0:
        raise ValueError("a prefilled cache cannot be continued by recap's decoding; start from the prompt")
    if model_kwargs.get("mm_encoder_outputs"):
        raise ValueError("precomputed mm_encoder_outputs are not taken; pass the processor's pixel_values")
    unknown = sorted(set(model_kwargs) - OWN_KEYWORDS - TOKEN_KEYWORDS)
    if unknown:
        raise ValueError(
            f"model keyword{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} cannot be passed to "
            "recap's decoding: it takes the processor's outputs (input_ids, the image inputs, attention_mask)"
        )
    inputs: dict[str, Any] = {"input_ids": input_ids}
    for name in sorted(TOKEN_KEYWORDS):
        if model_kwargs.get(name) is not None:
            inputs[name] = model_kwargs[name]
    # generate() drops an all-ones mask; the processor's outputs (what the engine prefills) hold one
    inputs.setdefault("attention_mask", torch.ones_like(input_ids))
    inputs.update({name: value for name, value in images.items() if value is not None})
    return inputs


def _check_lists(
    model: Any, config: Any, input_ids: torch.Tensor, processors: Any, criteria: Any,
    model_kwargs: dict[str, Any],
) -> None:
    """ValueError naming any logits processor or stopping criterion the generation config did not make."""
    from transformers import LogitsProcessorList, StoppingCriteriaList

    own_processors = model._get_logits_processor(
        generation_config=config, input_ids_seq_length=input_ids.shape[1], encoder_input_ids=input_ids,
        logits_processor=LogitsProcessorList(), device=input_ids.device, model_kwargs=dict(model_kwargs),
    )
    try:
        own_criteria = model._get_stopping_criteria(config, StoppingCriteriaList())
    except ValueError:  # stop strings without a tokenizer: generate() built them with one, none are own
        own_criteria = StoppingCriteriaList()
    for kind, given, own, where in (
        ("logits processor", processors, own_processors, "logits_processor=, prefix_allowed_tokens_fn= or "
         "negative_prompt_ids="),
        ("stopping criterion", criteria, own_criteria, "stopping_criteria= or stop_strings="),
    ):
        extra = _extra(list(given or []), list(own))
        if extra:
            raise ValueError(
                f"{kind} {', '.join(extra)} (from {where}) cannot be applied exactly by recap's decoding, "
                "which verifies a whole tree of continuations at once; leave it out or use generate() "
                "without custom_generate"
            )


def _extra(given: list[Any], own: list[Any]) -> list[str]:
    """The class names of the objects of ``given`` with no equal object in ``own`` (equal: same class,
    same attributes; a user's object replacing one of the config's counts as extra unless equal)."""
    left = list(own)
    extra: Counter[str] = Counter()
    for obj in given:
        match = next((i for i, mine in enumerate(left) if _same(obj, mine)), None)
        if match is None:
            extra[type(obj).__name__] += 1
        else:
            left.pop(match)
    return sorted(extra)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    va, vb = vars(a), vars(b)
    if va.keys() != vb.keys():
        return False
    for key, x in va.items():
        y = vb[key]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and torch.equal(x.cpu(), y.cpu())):
                return False
        else:
            try:
                if x != y:
                    return False
            except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
                return False
    return True
