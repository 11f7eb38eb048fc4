"""The sampling seed's range: one home for the engine, the trace schema and the command line.

Light on purpose (no torch): the CLI's help and the trace schema read it.
"""

from __future__ import annotations

from typing import Any

#: Largest seed: 2**53 - 1, an integer every JSON reader (and a browser's number field) keeps exact.
MAX_SEED = 2**53 - 1


def check_seed(seed: Any) -> int | None:
    """``seed`` itself when it is None or an integer from 0 to ``MAX_SEED``; else ValueError naming it."""
    bad = isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    if seed is not None and bad:
        raise ValueError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
    return seed


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The seed turn ``turn`` (0 = the first) of a conversation draws with: ``seed + turn``, wrapping
    past ``MAX_SEED`` to 0 (None stays None: torch's default generator). One rule for the library's
    ``converse`` and the app's follow-ups, so a conversation sampled in one replays in the other."""
    if seed is None:
        return None
    return (check_seed(seed) + turn) % (MAX_SEED + 1)
