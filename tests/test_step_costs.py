"""recap.trace.step_costs: why a step's tree has its size, where a run's time goes; known answers on
hand-built traces (no model)."""

from __future__ import annotations

import pytest

from recap.trace.format import DecodeTrace, TraceNode, TraceStep
from recap.trace.sizing import TreeSizing
from recap.trace.step_costs import one_token_seconds, step_size, time_split


def _step(n: int, parents: list[int], scores: list[float], path: list[int], emitted: list[int],
          times: tuple[float, float, float], order: list[int] | None = None,
          sizing: TreeSizing | None = None) -> TraceStep:
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    order = order or list(range(len(parents)))
    nodes = [TraceNode(index=i, token=10 + i, text=f"t{i}", parent=p, depth=depth[i], score=s, fused=1.0,
                       origin="m1", target_token=0, target_text="", accepted=i in path, order=order[i])
             for i, (p, s) in enumerate(zip(parents, scores))]
    return TraceStep(step=n, nodes=nodes, accepted=path, bonus_token=emitted[-1], bonus_text="",
                     emitted=emitted, draft_s=times[0], verify_s=times[1], update_s=times[2], sizing=sizing)


def _trace(steps: list[TraceStep], method: str = "recap") -> DecodeTrace:
    return DecodeTrace(method=method, model="tiny", prompt="p", request=1, image_key=None, config={},
                       prompt_tokens=3, steps=steps, token_ids=[t for s in steps for t in s.emitted])


def test_gains_in_the_order_taken_against_the_needed_gain() -> None:
    sizing = TreeSizing(stop="cost", expected_tokens=2.1, last_gain=0.3, needed_gain=0.25, pass_s=0.01,
                        node_s=0.001)
    # nodes 1, 2, 3 were taken in the order 2, 1, 3 (node 2 first): gains 0.5, 0.3 then 0.3
    s = step_size(_step(1, [-1, 0, 0, 1], [1.0, 0.3, 0.5, 0.3], [0, 2], [12, 7], (0.001, 0.003, 0.001),
                        order=[0, 2, 1, 3], sizing=sizing))
    assert [(g.taken, g.node, g.gain, g.accepted) for g in s.gains] == [
        (1, 2, 0.5, True), (2, 1, 0.3, False), (3, 3, 0.3, False)]
    assert s.stop == "cost" and s.stop_at == 3 and s.needed_gain == 0.25
    assert s.predicted_tps == pytest.approx(2.1 / 0.01)  # expected tokens over the measured pass cost
    assert s.realised_tps == pytest.approx(2 / 0.005)  # 2 tokens over draft + verify + update
    sizing.realised_s = 0.004  # type: ignore[attr-defined]  # the optional field, when the engine records it
    s2 = step_size(_step(1, [-1, 0], [1.0, 0.5], [0, 1], [11, 7], (0.001, 0.003, 0.001), sizing=sizing))
    assert s2.seconds == 0.004 and s2.realised_tps == pytest.approx(2 / 0.004)


def test_a_fixed_tree_has_gains_but_no_needed_gain_nor_prediction() -> None:
    s = step_size(_step(1, [-1, 0, 1], [1.0, 0.6, 0.25], [0], [9], (0.0, 0.0, 0.0)))
    assert s.needed_gain is None and s.pass_s is None and s.predicted_tps is None and s.stop == ""
    assert s.expected_tokens == pytest.approx(1.85)  # 1 + the gains
    assert s.realised_tps is None  # no timings: unknown, never 0 tokens/s


def test_where_the_time_goes_against_an_ar_run() -> None:
    run = _trace([_step(1, [-1, 0], [1.0, 0.5], [0, 1], [11, 7], (0.001, 0.004, 0.001)),
                  _step(2, [-1, 0, 1], [1.0, 0.5, 0.4], [0, 1, 2], [11, 12, 7], (0.001, 0.005, 0.0))])
    ar = _trace([_step(i, [-1], [1.0], [0], [5], (0.0, 0.002, 0.0)) for i in range(1, 6)], method="ar")
    assert one_token_seconds(ar) == pytest.approx(0.002) and one_token_seconds(None) == 0.0
    t = time_split(run, ar)
    assert t.steps == (1, 2) and t.tokens == (2, 5)
    assert t.draft_s == pytest.approx((0.001, 0.002)) and t.verify_s == pytest.approx((0.004, 0.009))
    assert t.update_s == pytest.approx((0.001, 0.001))
    assert t.total_s == pytest.approx(0.012) and t.mean_pass_s == pytest.approx(0.006)
    assert t.one_token_source == "ar run" and t.one_token_total_s == pytest.approx(0.010)
    assert t.break_even == pytest.approx(3.0)  # 6 ms a pass over 2 ms a token: 3 tokens per pass to pay
    assert t.tokens_per_pass == 2.5 and t.speedup == pytest.approx(0.010 / 0.012)
    alone = time_split(run)  # no ar run, no sizing: not measured
    assert alone.one_token_source == "" and alone.break_even is None and alone.one_token_total_s is None


def test_one_token_time_from_the_sizing_when_recorded() -> None:
    sizing = TreeSizing(stop="budget", expected_tokens=1.5, last_gain=0.5, needed_gain=0.1, pass_s=0.004,
                        node_s=0.0005)
    sizing.one_token_s = 0.002  # type: ignore[attr-defined]
    run = _trace([_step(1, [-1, 0], [1.0, 0.5], [0, 1], [11, 7], (0.0, 0.004, 0.0), sizing=sizing)])
    t = time_split(run)
    assert t.one_token_source == "sizing" and t.one_token_s == 0.002 and t.break_even == pytest.approx(2.0)
