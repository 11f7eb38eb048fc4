"""recap.trace.aliasing_stats: what aliasing cost a run, on a hand-built trace with known answers."""

from __future__ import annotations

import json

from recap.trace.aliasing_stats import aliasing_cost, source_of
from recap.trace.format import DecodeTrace, SourceInfo, TraceNode, TraceStep


def _src(kind: str, top: int, *, step: int = 3, same: bool | None = True, prob: float = 0.5) -> SourceInfo:
    return SourceInfo(kind=kind, weight=0.5, entropy=0.1, concentration=0.9, prob=prob, request=1, step=step,
                      depth=1, same_image=same, top_token=top, top_text=f"t{top}", top_prob=0.6)


def _node(i: int, token: int, parent: int, depth: int, origin: str, want: int, sources: list[SourceInfo],
          accepted: bool = False) -> TraceNode:
    return TraceNode(index=i, token=token, text=f"t{token}", parent=parent, depth=depth, score=0.5, fused=0.5,
                     origin=origin, target_token=want, target_text=f"t{want}", accepted=accepted,
                     sources=sources)


def _trace() -> DecodeTrace:
    # step 1: the root (" the", 16) wants 20. Drafted: 21 (M1, written under another image), 20 (M2:
    # accepted), 22 (M1, written from the prompt: step 0). Node 2 wants 30; its child 31 (M3) is refused,
    # and 31's child 32 was never checked. At the root M2's own top-1 is 20, the target's token: the two M1
    # refusals there are ones M2/M3 would have fixed; at node 2 M3 said 31: not fixable.
    s1 = TraceStep(step=1, nodes=[
        _node(0, 16, -1, 0, "root", 20, [], accepted=True),
        _node(1, 21, 0, 1, "m1", 0, [_src("m1", 21, same=False), _src("m2", 20, prob=0.1)]),
        _node(2, 20, 0, 1, "m2", 30, [_src("m2", 20, prob=0.8)], accepted=True),
        _node(3, 22, 0, 1, "m1", 0, [_src("m1", 21, step=0)]),
        _node(4, 31, 2, 2, "m3", 0, [_src("m3", 31)]),
        _node(5, 32, 4, 3, "m1", 0, [_src("m1", 32)]),
    ], accepted=[0, 2], bonus_token=30, bonus_text="t30", emitted=[20, 30], draft_s=0.0, verify_s=0.0,
        update_s=0.0)
    # step 2: the root (16 again) wants 41: 40 (M1, this image, no M2/M3 row) is refused; 41 is the
    # target's own token, cut by a stop (not a refusal).
    s2 = TraceStep(step=2, nodes=[
        _node(0, 16, -1, 0, "root", 41, [], accepted=True),
        _node(1, 40, 0, 1, "m1", 0, [_src("m1", 40, same=True)]),
        _node(2, 41, 0, 1, "m1", 0, [_src("m1", 40, same=True)]),
    ], accepted=[0], bonus_token=41, bonus_text="t41", emitted=[41], draft_s=0.0, verify_s=0.0, update_s=0.0)
    return DecodeTrace(method="recap", model="tiny", prompt="p", request=1, image_key=None, config={},
                       prompt_tokens=3, steps=[s1, s2], token_ids=[20, 30, 41])


def test_refusals_by_source_and_provenance() -> None:
    c = aliasing_cost(_trace())
    assert (c.drafted, c.accepted, c.refused, c.unchecked) == (7, 1, 4, 1)
    assert c.by_source == {"M1 · this image": 1, "M1 · another image": 1, "M1 · prompt": 1, "M3": 1}
    assert [(r.step, r.node, r.source, r.contextual, r.fixable) for r in c.refusals] == [
        (1, 1, "M1 · another image", True, True), (1, 3, "M1 · prompt", True, True),
        (1, 4, "M3", True, False), (2, 1, "M1 · this image", False, False)]
    assert (c.contextual, c.fixable) == (3, 2) and c.fixable_share == 0.5


def test_contexts_worst_first_each_with_its_first_state() -> None:
    c = aliasing_cost(_trace())
    assert [(x.token, x.refusals, x.m1, x.fixable, x.step, x.node) for x in c.contexts] == [
        (16, 3, 3, 2, 1, 0), (20, 1, 0, 0, 1, 2)]
    assert aliasing_cost(_trace(), top=1).contexts == c.contexts[:1]
    d = json.loads(json.dumps(c.to_dict()))
    assert d["refused"] == 4 and d["fixable_share"] == 0.5 and "refusals" not in d


def test_without_contextual_rows_the_share_is_unknown_not_zero() -> None:
    t = _trace()
    t.steps = t.steps[1:]
    t.steps[0].step = 1
    c = aliasing_cost(t)
    assert c.refused == 1 and c.contextual == 0 and c.fixable_share is None
    assert aliasing_cost(DecodeTrace(method="ar", model="m", prompt="p", request=1, image_key=None, config={},
                                     prompt_tokens=1)).refused == 0


def test_source_names() -> None:
    n = _node(1, 5, 0, 1, "m1", 0, [_src("m1", 5, same=None)])
    assert source_of(n) == "M1 · unknown"
    assert source_of(_node(1, 5, 0, 1, "m1", 0, [])) == "M1 · unknown"
    assert source_of(_node(1, 5, 0, 1, "suffix", 0, [])) == "suffix"
    assert source_of(_node(1, 5, 0, 1, "m3", 0, [])) == "M3"
