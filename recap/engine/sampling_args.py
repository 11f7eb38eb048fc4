"""The command line's sampling options, shared by ``generate`` and ``bench``: argparse only.

``--temperature``, ``--top-p`` and ``--top-k`` set those generation-config fields and turn
``do_sample`` on (any one of them is enough; the others keep the model's values, then
transformers' defaults, as ``generate()`` resolves them); ``--seed`` seeds the draws.
Nothing here imports torch or transformers: ``python -m recap --help`` builds these parsers.
"""

from __future__ import annotations

import argparse
from typing import Any

from recap.verification.seed import MAX_SEED


def _temperature(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _top_p(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text}")
    return value


def _top_k(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (off) or positive, got {text}")
    return value


def _seed(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {MAX_SEED}, got {text}")
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def add_sampling_arguments(p: argparse.ArgumentParser, seed_help: str) -> None:
    """Add ``--temperature``, ``--top-p``, ``--top-k`` and ``--seed`` (explained by ``seed_help``)."""
    group = p.add_argument_group("sampling (any of temperature / top-p / top-k turns do_sample on)")
    group.add_argument("--temperature", type=_temperature, default=None,
                       help="sampling temperature (above 0)")
    group.add_argument(
        "--top-p", type=_top_p, default=None,
        help="nucleus sampling: keep the smallest set of tokens whose probability reaches P (0 < P <= 1)",
    )
    group.add_argument("--top-k", type=_top_k, default=None,
                       help="keep the K most probable tokens (0: off; transformers' default is 50)")
    group.add_argument("--seed", type=_seed, default=None, help=seed_help)


def sampling_fields(args: argparse.Namespace) -> dict[str, Any] | None:
    """The generation-config fields the options ask for (None: none given, the model's own config)."""
    fields = {name: getattr(args, name) for name in ("temperature", "top_p", "top_k")}
    fields = {k: v for k, v in fields.items() if v is not None}
    return {"do_sample": True, **fields} if fields else None
