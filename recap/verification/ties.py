"""The reduced-precision guarantee: every emitted token is a greedy choice of the model, ties allowed.

In fp32 every method's output equals ``generate()``'s token for token. In bf16 and fp16 a tree
pass and ``generate()``'s one-token passes add the same numbers in a different order, so two
logits that are equal within the dtype's rounding can swap places, and the engine may then take
the other one of a tie. What still holds, and what ``check_greedy`` checks for a decoded output:

    every emitted token t_i, fed after the prompt and t_1 .. t_{i-1} through the model exactly
    as ``generate()`` computes it (one-token passes with the KV cache, the generation config's
    logits processors), has a processed logit within ``tie_tolerance`` of the maximum there.

The check runs ``model.generate()`` itself with one extra logits processor, last in the list
(``_Forcer``): it records the processed scores generate() would pick from and then forces the
emitted token, so the next pass sees the emitted prefix (teacher forcing through the reference's
own computation, cache and positions included). Under a sampling config the check applies the
config's processors and greedy choice (``do_sample=False``): sampled outputs are promised the
same distribution, not the same tokens (docs/design.md, "Precision").

Tolerance: ``TIE_ULPS`` units of the dtype's resolution at the maximum's magnitude, ``eps(dtype)
* 2**floor(log2(|max|))`` (one unit in the last place of a number that large: bf16 keeps 8
significant bits, fp16 11, fp32 24). Anything further from the maximum is not a tie: an error.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

#: How many units of the dtype's resolution at the logits' magnitude a tie may be apart. The
#: engine's and generate()'s logits each carry the dtype's rounding of every layer; on the tiny
#: models of every family the first differences measured within 0.9 units, so 2 leaves room for
#: deeper models without covering a real bug (a mask or position error moves logits by far more).
TIE_ULPS = 2.0


def resolution(magnitude: float, dtype: torch.dtype) -> float:
    """One unit in the last place of a ``dtype`` number of this magnitude: ``eps * 2**floor(log2|m|)``
    (numbers below the dtype's smallest normal: the unit there)."""
    info = torch.finfo(dtype)
    m = max(abs(float(magnitude)), info.tiny)
    return float(info.eps) * 2.0 ** math.floor(math.log2(m))


def tie_tolerance(max_logit: float, dtype: torch.dtype, ulps: float = TIE_ULPS) -> float:
    """How far below the maximum a logit may be and still be a tie: ``ulps`` resolutions at its magnitude."""
    return ulps * resolution(max_logit, dtype)


def dtype_name(dtype: torch.dtype) -> str:
    """"bf16", "fp16", "fp32" (else torch's own name without "torch.")."""
    short = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
    return short.get(dtype, str(dtype).removeprefix("torch."))


@dataclass(frozen=True)
class TokenCheck:
    """One emitted token against the reference's processed scores for its prefix."""

    index: int  # 0-based position in the output
    token: int  # what was emitted
    best: int  # the reference's argmax there
    max_logit: float  # its processed score
    gap: float  # max_logit - the emitted token's processed score (0 when it is the argmax)
    tolerance: float  # tie_tolerance(max_logit, dtype)

    @property
    def is_argmax(self) -> bool:
        return self.token == self.best or self.gap == 0.0

    @property
    def is_tie(self) -> bool:
        """Not the argmax, but within the tolerance of it."""
        return not self.is_argmax and self.gap <= self.tolerance

    @property
    def ok(self) -> bool:
        return self.gap <= self.tolerance


@dataclass(frozen=True)
class PrecisionCheck:
    """An output checked token by token (``check_greedy``): which tokens were ties, which were errors."""

    dtype: str  # "bf16", "fp16", "fp32"
    tokens: list[TokenCheck] = field(default_factory=list)

    @property
    def ties(self) -> list[TokenCheck]:
        return [t for t in self.tokens if t.is_tie]

    @property
    def errors(self) -> list[TokenCheck]:
        """Tokens that are no greedy choice of the model even within the tolerance."""
        return [t for t in self.tokens if not t.ok]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def first_difference(self) -> TokenCheck | None:
        """The first token that is not the reference's argmax (a tie or an error), or None."""
        return next((t for t in self.tokens if not t.is_argmax), None)

    def sentence(self) -> str:
        """The verdict in one line: "every token the argmax", a tie with its gap, or the first error."""
        if self.errors:
            bad = self.errors[0]
            return (f"{self.dtype} error at token {bad.index + 1}: emitted {bad.token}, not a greedy choice "
                    f"(gap {bad.gap:.4g} to the maximum {bad.max_logit:.4g} of token {bad.best}, "
                    f"tolerance {bad.tolerance:.2g})")
        first = self.first_difference
        if first is None:
            return f"{self.dtype}: every token is the model's argmax"
        return describe_tie(self.dtype, first)


def describe_tie(dtype: str, tie: TokenCheck) -> str:
    """``"bf16 tie at token 27: top-2 gap 0.0039, tolerance 0.0052"`` (tokens counted from 1)."""
    return f"{dtype} tie at token {tie.index + 1}: top-2 gap {tie.gap:.2g}, tolerance {tie.tolerance:.2g}"


class _Forcer:
    """A logits processor, last in generate()'s list: records the processed scores (float32, as
    generate() picks from them), then forces the next emitted token."""

    def __init__(self, tokens: Sequence[int], dtype: torch.dtype, ulps: float) -> None:
        self.tokens = [int(t) for t in tokens]
        self.dtype, self.ulps = dtype, ulps
        self.checks: list[TokenCheck] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        i = len(self.checks)
        token = self.tokens[i]
        row = scores[0].float()
        best = int(torch.argmax(row))
        top = float(row[best])
        gap = top - float(row[token])
        self.checks.append(TokenCheck(i, token, best, top, gap, tie_tolerance(top, self.dtype, self.ulps)))
        forced = torch.full_like(scores, -math.inf)
        forced[:, token] = 0.0
        return forced


@torch.inference_mode()
def check_greedy(
    target: Any,
    inputs: dict[str, Any],
    tokens: Sequence[int],
    *,
    generation_config: Any = None,
    ulps: float = TIE_ULPS,
) -> PrecisionCheck:
    """Check that each of ``tokens`` (an output of ``recap.generate`` on ``inputs``) is the model's
    greedy choice for its own prefix within ``tie_tolerance`` (see the module docstring).

    target: a ``recap.Target`` (its ``model`` and ``dtype`` are read); inputs: ``recap.prepare_inputs``'s
    dict; generation_config: what the decode ran with (None: the model's own), run greedily.
    Returns a ``PrecisionCheck``: one ``TokenCheck`` per token, its ties and its errors.
    """
    if not tokens:
        return PrecisionCheck(dtype_name(target.dtype))
    vocab = int(target.model.get_output_embeddings().weight.shape[0])
    bad = [t for t in tokens if not 0 <= int(t) < vocab]
    if bad:
        raise ValueError(f"tokens {bad[:5]} are outside the vocabulary of {vocab}")
    from transformers import GenerationConfig, LogitsProcessorList

    config = generation_config if generation_config is not None else target.model.generation_config
    config = GenerationConfig(**config) if isinstance(config, dict) else copy.deepcopy(config)
    config.do_sample, config.max_new_tokens = False, len(tokens)  # greedy, exactly this long
    forcer = _Forcer(tokens, target.dtype, ulps)
    target.model.generate(
        **inputs, generation_config=config, logits_processor=LogitsProcessorList([forcer]),
    )
    if len(forcer.checks) < len(tokens):  # generate() stopped at a forced EOS: an output goes no further
        raise ValueError(f"the output continues after a stop token at token {len(forcer.checks)}")
    return PrecisionCheck(dtype_name(target.dtype), forcer.checks)


def compare_with_reference(
    target: Any, inputs: dict[str, Any], tokens: Sequence[int], reference: Sequence[int], **kwargs: Any,
) -> tuple[bool, str]:
    """A decode against ``generate()``'s ``reference``: (lossless, sentence). Identical: (True, "").
    A difference in bf16 / fp16 that ``check_greedy`` finds within tolerance is a tie (True, "bf16 tie at
    token 27: ..."); any other difference, or any difference in fp32, is an error (False, why)."""
    if list(tokens) == list(reference):
        return True, ""
    if target.dtype in (torch.float32, torch.float64):
        first = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b),
                     min(len(tokens), len(reference)))
        name = dtype_name(target.dtype)
        return False, f"{name} differs from generate() at token {first + 1} (not lossless)"
    check = check_greedy(target, inputs, tokens, **kwargs)
    return check.ok, check.sentence()


@torch.inference_mode()
def check_against_generate(
    target: Any, inputs: dict[str, Any], tokens: Sequence[int], *, generation_config: Any = None,
) -> tuple[bool, str]:
    """Run the model's own greedy ``generate()`` on ``inputs`` for as many tokens as ``tokens`` and
    compare (``compare_with_reference``): (True, "") identical, (True, "bf16 tie at token 27: ...")
    a reduced-precision tie, (False, why) an error. A sampling config is refused (ValueError): its
    promise is the same distribution, checked by ``tests/test_sampling_distribution.py``."""
    from transformers import GenerationConfig

    config = generation_config if generation_config is not None else target.model.generation_config
    config = GenerationConfig(**config) if isinstance(config, dict) else copy.deepcopy(config)
    if config.do_sample:
        raise ValueError("the check compares greedy decodes; a sampled one equals generate()'s under the "
                         "same seed in fp32 and in distribution otherwise")
    config.max_new_tokens = max(len(tokens), 1)
    out = target.model.generate(**inputs, generation_config=config)
    reference = out[0, inputs["input_ids"].shape[-1]:].tolist()
    return compare_with_reference(target, inputs, tokens, reference, generation_config=config)
