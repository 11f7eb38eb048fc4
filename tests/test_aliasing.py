"""Aliasing classification (app/aliasing.py) on hand-made traces."""

from __future__ import annotations

import conftest_app  # noqa: F401  (puts the repo root on sys.path under plain `pytest`)

from app.state.aliasing import (
    BOTH_WRONG,
    FIXED,
    MISSING,
    SCOPED_FIX,
    expanded_states,
    step_states,
    summary,
    trace_states,
)
from recap.trace.format import DecodeTrace, SourceInfo, TraceNode, TraceStep

RED, BLUE, GREEN, CIRCLE, LARGE = 10, 11, 12, 20, 30
TEXT = {RED: "red", BLUE: "blue", GREEN: "green", CIRCLE: "circle", LARGE: "large", 1: "A"}


def s(kind: str, prob: float, request: int = 0, same_image: bool | None = False, top: int = -1) -> SourceInfo:
    return SourceInfo(kind=kind, weight=0.3, entropy=0.5, concentration=0.7, prob=prob, request=request,
                      step=4, depth=1, same_image=same_image, top_token=top, top_text=TEXT.get(top, ""),
                      top_prob=0.9 if top >= 0 else 0.0)


def node(
    i: int, token: int, parent: int, depth: int, fused: float, target: int, sources=(), accepted=False
) -> TraceNode:
    return TraceNode(index=i, token=token, text=TEXT.get(token, str(token)), parent=parent, depth=depth,
                     score=fused, fused=fused, origin="root" if parent < 0 else "mixed", target_token=target,
                     target_text=TEXT.get(target, str(target)), accepted=accepted, sources=list(sources))


def step(nodes: list[TraceNode], accepted: list[int], number: int = 1) -> TraceStep:
    last = nodes[accepted[-1]]
    return TraceStep(step=number, nodes=nodes, accepted=accepted, bonus_token=last.target_token,
                     bonus_text=last.target_text,
                     emitted=[nodes[i].token for i in accepted[1:]] + [last.target_token], draft_s=0.0,
                     verify_s=0.0, update_s=0.0)


def trace(steps: list[TraceStep], method: str = "recap") -> DecodeTrace:
    ids = [t for st in steps for t in st.emitted]
    return DecodeTrace(method=method, model="m", prompt="p", request=1, image_key="b", config={},
                       prompt_tokens=3, steps=steps, token_ids=ids)


def fixed_step() -> TraceStep:
    # Context "large" (node 0). M1 (from request 0, image A) says "red"; M2 and M3 (this image) say "blue";
    # the fused choice is "blue" and the target wants "blue": RECAP fixed it.
    return step(
        [
            node(0, LARGE, -1, 0, 1.0, BLUE, accepted=True),
            node(1, BLUE, 0, 1, 0.6, CIRCLE, [s("m3", 0.9, 1, True), s("m2", 0.8, 1, True), s("m1", 0.1)],
                 accepted=True),
            node(2, RED, 0, 1, 0.3, CIRCLE, [s("m3", 0.05, 1, True), s("m2", 0.1, 1, True), s("m1", 0.85)]),
        ],
        [0, 1],
    )


def test_recap_fixed_it():
    [state] = step_states(fixed_step())
    assert state.verdict == FIXED
    assert (state.key_text, state.m1.text, state.target_text, state.fused_text) == (
        "large", "red", "blue", "blue",
    )
    assert state.m1.request == 0 and state.m1.same_image is False
    assert state.m2.text == "blue" and state.m3.text == "blue"
    assert state.on_path and state.node == 0


def test_both_wrong():
    # M2 / M3 exist but also prefer "red"; the target wants "green" (not drafted at all).
    st = step([
                  node(0, LARGE, -1, 0, 1.0, GREEN, accepted=True),
                  node(1, RED, 0, 1, 0.7, CIRCLE, [s("m2", 0.7, 1, True), s("m1", 0.9)]),
                  node(2, BLUE, 0, 1, 0.2, CIRCLE, [s("m2", 0.2, 1, True), s("m1", 0.05)]),
              ],
              [0])
    [state] = step_states(st)
    assert state.verdict == BOTH_WRONG and state.m3 is None and state.fused_text == "red"


def test_contextual_memory_missing_and_tr():
    st = step(
        [
            node(0, LARGE, -1, 0, 1.0, BLUE, accepted=True), node(1, RED, 0, 1, 0.8, CIRCLE, [s("m1", 0.8)]),
            node(2, BLUE, 0, 1, 0.1, CIRCLE, [s("m1", 0.1)]),
        ],
        [0, 2],
    )
    [state] = step_states(st)
    assert state.verdict == MISSING
    assert state.m2 is None and state.m3 is None


def test_no_aliasing_when_m1_right_and_leaves_not_states():
    st = step([
                  node(0, LARGE, -1, 0, 1.0, RED, accepted=True),
                  node(1, RED, 0, 1, 0.8, CIRCLE, [s("m1", 0.8)], accepted=True),  # leaf: never expanded
                  node(2, BLUE, 0, 1, 0.1, CIRCLE, [s("m1", 0.1)]),
              ],
              [0, 1])
    assert step_states(st) == []
    assert expanded_states(trace([st])) == 1


def test_suffix_only_children_are_ignored():
    # a suffix chain child carries no memory sources: it says nothing about M1
    st = step([
                  node(0, LARGE, -1, 0, 1.0, BLUE, accepted=True), node(1, RED, 0, 1, 1.0, CIRCLE, []),
              ],
              [0])
    assert step_states(st) == []
    assert expanded_states(trace([st])) == 0


def test_rejected_branch_state_and_filters():
    # A deeper state on a rejected branch: node 2 ("red") was rejected; below it M1 predicted "circle",
    # the target (at node 2) wanted "large".
    st = step([
                  node(0, LARGE, -1, 0, 1.0, BLUE, accepted=True),
                  node(1, BLUE, 0, 1, 0.6, CIRCLE, [s("m3", 0.9, 1, True), s("m1", 0.1)], accepted=True),
                  node(2, RED, 0, 1, 0.3, LARGE, [s("m3", 0.05, 1, True), s("m1", 0.85)]),
                  node(3, CIRCLE, 2, 2, 0.9, 1, [s("m1", 0.9, request=2, same_image=True)]),
              ],
              [0, 1], number=3)
    states = trace_states(trace([fixed_step(), st]))
    assert [(x.step, x.node) for x in states] == [(1, 0), (3, 0), (3, 2)]
    deeper = states[-1]
    assert not deeper.on_path and deeper.verdict == MISSING and deeper.m1.request == 2
    assert [(x.step, x.node) for x in trace_states(trace([fixed_step(), st]), on_path_only=True)] == [
        (1, 0), (3, 0),
    ]
    assert [(x.step, x.node) for x in trace_states(trace([fixed_step(), st]), from_request=2)] == [(3, 2)]
    counts = summary(states, total=expanded_states(trace([fixed_step(), st])))
    assert counts[FIXED] == 2 and counts[MISSING] == 1 and counts[BOTH_WRONG] == 0
    assert counts["aliasing states"] == 3 and counts["on accepted path"] == 2
    assert counts["M1 from another image"] == 2 and counts["expanded states"] == 3
    assert states[0].to_dict()["m1"]["text"] == "red"


def test_recorded_top1_is_the_prediction_even_when_not_drafted():
    # M1's own top-1 at "large" is GREEN, which lost the search: only RED and BLUE were drafted.
    st = step(
        [
            node(0, LARGE, -1, 0, 1.0, BLUE, accepted=True),
            node(1, BLUE, 0, 1, 0.6, CIRCLE, [s("m2", 0.8, 1, True, top=BLUE), s("m1", 0.05, top=GREEN)],
                 accepted=True),
            node(2, RED, 0, 1, 0.3, CIRCLE, [s("m2", 0.1, 1, True, top=BLUE), s("m1", 0.04, top=GREEN)]),
        ],
        [0, 1],
    )
    [state] = step_states(st)
    assert (state.m1.text, state.m1.in_tree, state.m1.prob) == ("green", False, 0.9)
    assert state.m2.text == "blue" and state.m2.in_tree
    assert state.verdict == FIXED


def test_recorded_top1_equal_to_target_is_not_aliasing():
    # Without the record, the best drafted child (RED) would look like M1's wrong guess.
    st = step([
                  node(0, LARGE, -1, 0, 1.0, GREEN, accepted=True),
                  node(1, RED, 0, 1, 0.6, CIRCLE, [s("m1", 0.3, top=GREEN)]),
              ],
              [0])
    assert step_states(st) == []


def test_a_fix_by_a_row_an_earlier_request_on_this_image_wrote_is_counted_apart():
    # This run is request 1 (image "b"). At "large" M3 comes from request 0 on this image (an image-scoped
    # row) and says "blue", as the target; M1 (another image) says "red". In the second step the right
    # M3 row is this request's own, and in the third one from another image: neither counts.
    def fixed_by(m3_request: int, same: bool | None, number: int) -> TraceStep:
        return step([
                        node(0, LARGE, -1, 0, 1.0, BLUE, accepted=True),
                        node(1, BLUE, 0, 1, 0.6, CIRCLE,
                             [s("m3", 0.9, m3_request, same, top=BLUE), s("m1", 0.1, top=RED)],
                             accepted=True),
                        node(2, RED, 0, 1, 0.3, CIRCLE,
                             [s("m3", 0.05, m3_request, same, top=BLUE), s("m1", 0.85, top=RED)]),
                    ],
                    [0, 1], number=number)

    states = trace_states(trace([fixed_by(0, True, 1), fixed_by(1, True, 2), fixed_by(0, False, 3)]))
    assert [x.verdict for x in states] == [FIXED] * 3
    assert [x.scoped_fix for x in states] == [True, False, False]
    assert summary(states)[SCOPED_FIX] == 1
    assert (
        step_states(fixed_by(0, True, 1))[0].scoped_fix is False
    )  # the run's request unknown: never counted
