"""Which step of a trace a view shows: the step of a token, the most telling step, a step by number.

Queries over a trace (pure: no Gradio, no model). The session keeps the step a visitor picked
(``Session.view_step``); the shipped example and every finished run open on ``telling_step``.
"""

from __future__ import annotations

from recap.trace.format import DecodeTrace, TraceStep


def token_steps(trace: DecodeTrace) -> list[tuple[int, bool]]:
    """Per generated token: (the step that produced it, whether it was the bonus token)."""
    out: list[tuple[int, bool]] = []
    for s in trace.steps:
        bonus_at = len(s.accepted) - 1  # path (root excluded) then the bonus
        for j, _ in enumerate(s.emitted):
            out.append((s.step, j == bonus_at))
    return out


def step_of_token(trace: DecodeTrace, index: int) -> int | None:
    steps = token_steps(trace)
    return steps[index][0] if 0 <= index < len(steps) else None


def telling_step(trace: DecodeTrace) -> int | None:
    """The step a finished run opens on: its longest accepted path (the earliest on ties); None without steps.

    The last step is often the least telling (a column of end-of-turn tokens); the slider goes anywhere.
    """
    best = max(trace.steps, key=lambda s: (s.accepted_length, -s.step), default=None)
    return best.step if best is not None else None


def find_step(trace: DecodeTrace, step: int | None) -> TraceStep | None:
    """The trace step numbered ``step`` (None / out of range: the latest)."""
    if not trace.steps:
        return None
    if step is None:
        return trace.steps[-1]
    step = min(max(int(step), 1), len(trace.steps))
    return trace.steps[step - 1]
