"""Suffix-matched continuations (DESIGN.md section 4), as a kernel.

``suffix_chain`` finds the longest suffix of the request's tokens (prompt and generated) that
occurred earlier in them and returns what followed it. Prompt lookup (``pld``) proposes that
chain alone; RECAP puts it below the root before its best-first search (``recap.drafting.search``).
"""

from __future__ import annotations

from recap.memory.jit import njit
from recap.memory.rows import blocked

#: The longest suffix matched (what RECAP uses).
SUFFIX_MAX_LEN = 8


@njit
def suffix_chain(seq, n, lengths, img, out):  # noqa: ANN001, ANN201
    """The tokens that followed the latest earlier occurrence of the longest suffix of seq[:n].

    ``lengths`` = (min_len, max_len, max_tokens): the suffix is min_len to max_len tokens long
    (latest occurrence on ties), at most max_tokens follow. Image placeholders (``img``) never
    match and end a continuation. The chain goes into ``out``; returns its length.
    """
    min_len, max_len, max_tokens = lengths
    if n < min_len + 1:
        return 0
    last = seq[n - 1]
    if blocked(last, img):
        return 0
    best_len, best_end = 0, -1
    for end in range(n - 2, -1, -1):  # candidate earlier end positions, latest first
        if seq[end] != last:
            continue
        length = 1
        while (
            length < max_len
            and end - length >= 0
            and seq[end - length] == seq[n - 1 - length]
            and not blocked(seq[end - length], img)
        ):
            length += 1
        if length > best_len:
            best_len, best_end = length, end
            if length == max_len:
                break
    if best_len < min_len:
        return 0
    m = 0
    for j in range(best_end + 1, min(best_end + 1 + max_tokens, n)):
        if blocked(seq[j], img):
            break
        out[m] = seq[j]
        m += 1
    return m
