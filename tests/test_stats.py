"""recap.trace.stats: the acceptance figures on hand-built traces with known answers."""

from __future__ import annotations

import pytest

from recap.trace.format import DecodeTrace, TraceNode, TraceStep
from recap.trace.stats import (
    StepCounts,
    acceptance,
    counts_of,
    pooled,
    rate_histogram,
    run_stats,
    step_counts,
)


def _step(n: int, parents: list[int], tokens: list[int], chosen: list[int], path: list[int],
          emitted: list[int]) -> TraceStep:
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    nodes = [TraceNode(index=i, token=t, text=str(t), parent=p, depth=depth[i], score=1.0, fused=1.0,
                       origin="m1", target_token=c, target_text=str(c), accepted=i in path)
             for i, (p, t, c) in enumerate(zip(parents, tokens, chosen))]
    return TraceStep(step=n, nodes=nodes, accepted=path, bonus_token=emitted[-1], bonus_text="",
                     emitted=emitted, draft_s=0.001, verify_s=0.01, update_s=0.001)


def _trace() -> DecodeTrace:
    # step 1: chain 0 -> 1 -> 2 -> 3; the target wants 11 after the root, 12 after node 1, 99 after node 2:
    #   accepts depths 1 and 2, refuses depth 3.
    s1 = _step(1, [-1, 0, 1, 2], [5, 11, 12, 13], [11, 12, 99, 7], [0, 1, 2], [11, 12, 99])
    # step 2: root with two children, both refused at depth 1.
    s2 = _step(2, [-1, 0, 0], [99, 20, 21], [30, 1, 1], [0], [30])
    # step 3: 0 -> 1 accepted, node 1 has no child: depth 2 not reached (unobserved, not a rejection).
    s3 = _step(3, [-1, 0], [30, 40], [40, 41], [0, 1], [40, 41])
    steps = [s1, s2, s3]
    tokens = [t for s in steps for t in s.emitted]
    return DecodeTrace(method="recap", model="tiny", prompt="p", request=1, image_key=None,
                       config={"max_depth": 4}, prompt_tokens=3, steps=steps, token_ids=tokens)


def test_step_counts_known_answers() -> None:
    t = _trace()
    assert [step_counts(s) for s in t.steps] == [
        StepCounts(drafted=3, accepted=2, rejected_next=True, emitted=3),
        StepCounts(drafted=2, accepted=0, rejected_next=True, emitted=1),
        StepCounts(drafted=1, accepted=1, rejected_next=False, emitted=2),
    ]


def test_per_depth_conditional_with_unobserved_and_unreached_depth() -> None:
    s = run_stats(_trace(), depths=4)
    got = [(d.depth, d.observed, d.accepted, d.rate) for d in s.per_depth]
    # depth 1: observed by all 3 steps, accepted by steps 1 and 3; depth 2: observed only by step 1 (step 3
    # did not reach it); depth 3: step 1 refused it; depth 4: never observed -> None, not 0.
    assert got == [(1, 3, 2, 2 / 3), (2, 1, 1, 1.0), (3, 1, 0, 0.0), (4, 0, 0, None)]
    assert s.accepted_hist == {0: 1, 1: 1, 2: 1}
    assert (s.steps, s.tokens, s.drafted, s.accepted) == (3, 6, 6, 3)
    assert s.tokens_per_pass == pytest.approx(_trace().mat) == 2.0
    assert s.acceptance_rate == 0.5
    assert s.drafted_per_step == (3, 2, 1) and s.accepted_per_step == (2, 0, 1)
    assert run_stats(_trace()).depth_rates() == [2 / 3, 1.0, 0.0]  # by default: up to the deepest observed
    d = s.to_dict(per_step=True)
    assert d["per_depth"][3]["rate"] is None and d["accepted_hist"] == {"0": 1, "1": 1, "2": 1}


def test_a_stop_that_cut_the_path_is_not_a_rejection() -> None:
    # the child of the last accepted node holds the very token the target chose: cut by max_new_tokens.
    assert not counts_of([-1, 0, 1], [5, 6, 7], [6, 7, 8], [0, 1], 2).rejected_next
    assert counts_of([-1, 0, 1], [5, 6, 9], [6, 7, 8], [0, 1], 2).rejected_next


def test_generation_and_pooled() -> None:
    class Gen:  # what recap.generate returns, reduced to what the figures read
        trace = _trace()

    assert run_stats(Gen()) == run_stats(_trace())
    with pytest.raises(ValueError, match="without one"):
        run_stats(type("G", (), {"trace": None})())
    one = run_stats(_trace(), depths=4)
    both = pooled([one, one])
    assert both.requests == 2 and both.steps == 6 and both.accepted_hist == {0: 2, 1: 2, 2: 2}
    assert [(d.observed, d.accepted) for d in both.per_depth] == [(6, 4), (2, 2), (2, 0), (0, 0)]
    empty = acceptance([StepCounts(0, 0, False, 1)])
    assert empty.acceptance_rate is None and empty.per_depth == ()
    assert rate_histogram([one, empty, acceptance([StepCounts(2, 2, False, 3)])], bins=4) == [0, 0, 1, 1]


def test_bad_path_named() -> None:
    with pytest.raises(ValueError, match="root"):
        counts_of([-1], [1], [1], [], 1)
    with pytest.raises(ValueError, match="node 5"):
        counts_of([-1], [1], [1], [0, 5], 1)


def test_from_dict_reads_back_and_the_generate_line() -> None:
    from recap.trace.stats import AcceptanceStats, generation_line

    s = run_stats(_trace(), depths=4)
    assert AcceptanceStats.from_dict(s.to_dict(per_step=True)) == s
    assert generation_line(_trace()) == "acceptance: " + run_stats(_trace()).summary()

    class NoTrace:  # a Generation decoded without trace=True: its accepted lengths only
        trace = None
        accepted_lengths = [3, 1, 2, 2]

    assert generation_line(NoTrace()) == ("acceptance: 2.00 tokens/pass; passes by tokens emitted 1x1 2x2 "
                                          "3x1 (--trace adds the per-depth rates)")
    NoTrace.accepted_lengths = []
    assert generation_line(NoTrace()) == "acceptance: no decode steps"
