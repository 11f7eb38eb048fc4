"""recap.engine.controller: the closed size loop, on a fake clock (a step of N nodes costs a + c*N).

The controller never sees a model: each step here drafts as many nodes as its limit lets (the worst
case for the policy) and emits the bonus plus ``accept * log2(1 + N)`` tokens.
"""

from __future__ import annotations

import math

import pytest

from recap.engine import controller as ctl

CAP = 256


def tokens_for(nodes: int, accept: float) -> int:
    """Tokens a tree of ``nodes`` nodes emits: the bonus plus ``accept`` * log2(1 + nodes)."""
    return 1 + int(accept * math.log2(1 + nodes))


def run(c: ctl.SizeController, steps: int, a: float, slope: float, accept: float) -> list[int]:
    """Drive the controller for ``steps`` passes; the sizes it let the trees take."""
    sizes = []
    for _ in range(steps):
        n = c.next_limit()
        sizes.append(n)
        c.observe(n, a + slope * n, tokens_for(n, accept))
    return sizes


def test_no_tree_pays_converges_to_none_then_large_trees_when_they_pay() -> None:
    model = ctl.CostModel(prior={0: 1.0, 64: 1.0 + 64 * 0.5, 256: 1.0 + 256 * 0.5})
    c = ctl.SizeController(model, CAP)
    assert c.limit == ctl.PROBE  # a cost measured at load says what trees cost, not what they earn
    # c = 0.5 s a node: a tree of N nodes must emit 1 + N/2 tokens to break even, none does
    sizes = run(c, 60, a=1.0, slope=0.5, accept=0.5)
    assert sizes[0] == 0 and sizes[1] == ctl.PROBE  # T(0) measured first, by a plain pass
    # the policy's first plain passes (a lone 0 before them is T(0) re-measured)
    first_none = next(i for i in range(1, len(sizes)) if sizes[i:i + ctl.WINDOW] == [0] * ctl.WINDOW)
    assert first_none <= 2 + ctl.WINDOW  # the first probe failed: plain passes after one window
    assert all(s == 0 for s in sizes[first_none:first_none + ctl.FIRST_WAIT])  # then plain passes
    late = sizes[first_none:]
    assert sum(s > 0 for s in late) <= 2 * ctl.WINDOW  # two probes at most, each one window, backing off
    # the same controller, now on a cheap node (c = 0.001 s) and an acceptance that pays: it probes,
    # and doubles up to the cap in a bounded number of passes
    sizes = run(c, 200, a=1.0, slope=0.001, accept=1.0)
    assert sizes[-1] == CAP
    assert sizes.index(CAP) <= ctl.MAX_WAIT + 8 * ctl.WINDOW


def test_a_failed_probe_waits_longer_and_large_trees_hold() -> None:
    c = ctl.SizeController(ctl.CostModel(prior={0: 1.0, 8: 5.0}), CAP)
    sizes = run(c, 400, a=1.0, slope=0.5, accept=0.5)
    probes = [i for i in range(1, len(sizes)) if sizes[i] > 0 and sizes[i - 1] == 0 and sizes[i] == ctl.PROBE]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(probes) >= 2 and gaps == sorted(gaps) and gaps[-1] > gaps[0]  # backoff
    assert sum(s > 0 for s in sizes[probes[0]:]) < len(sizes[probes[0]:]) // 4  # mostly plain passes
    big = ctl.SizeController(ctl.CostModel(prior={0: 1.0, 256: 1.256}), CAP)
    sizes = run(big, 120, a=1.0, slope=0.001, accept=1.0)
    reached = sizes.index(CAP)
    assert reached <= 2 + 7 * ctl.WINDOW  # 4 -> 256: six doublings, one window each
    assert sizes[1:].count(0) <= 1 + 120 // ctl.REMEASURE  # T(0) re-measured, rarely
    assert all(s == CAP for s in sizes[reached:] if s)  # paying trees are left alone


def saturating(n: int) -> int:
    """Tokens a tree of ``n`` nodes emits when no tree earns more past 16 nodes."""
    return 1 + int(math.log2(1 + min(n, 16)))


def sizes_under(slope: float, steps: int = 600) -> list[int]:
    """The sizes a fresh controller lets the trees take when a step of N nodes costs 1 + slope * N."""
    c = ctl.SizeController(ctl.CostModel(), CAP)
    sizes = []
    for _ in range(steps):
        n = c.next_limit()
        sizes.append(n)
        c.observe(n, 1.0 + slope * n, saturating(n))
    return sizes


def test_on_a_flat_curve_the_limit_follows_the_marginal_gain_not_the_cap() -> None:
    # nodes almost free (c = 0.01 a), but no tree earns more past 16 nodes: 32 costs more, earns the same
    sizes = sizes_under(0.01)
    assert max(sizes) == 32  # the doubling past the knee was tried, and undone
    late = sizes[100:]
    assert late.count(16) > 0.8 * len(late)  # it holds at the knee, retrying 32 with a growing wait
    assert late.count(32) <= 5 * ctl.WINDOW  # a retry every MAX_WAIT passes at most, once the wait has grown
    # a steeper curve's knee is lower: nodes cost 0.1 a, 8 nodes earn 4 tokens, 16 only 5
    sizes = sizes_under(0.1)
    assert max(sizes) <= 16 and sizes[100:].count(8) > 0.8 * len(sizes[100:])


def test_the_cost_is_refitted_from_the_decodes_own_passes() -> None:
    # a wrong load-time curve (nodes free) is replaced by what the passes cost
    model = ctl.CostModel(prior={0: 1.0, 16: 1.0, 256: 1.0})
    c = ctl.SizeController(model, CAP, gate=False)
    run(c, 3 * ctl.WINDOW, a=1.0, slope=0.01, accept=1.0)
    assert model.seconds(CAP) == pytest.approx(1.0 + 0.01 * CAP, rel=0.05)
    assert c.cost().seconds[CAP] == pytest.approx(1.0 + 0.01 * CAP, rel=0.05)  # the next tree grows under it
    assert c.last is not None and c.last.realised_s == pytest.approx(1.0 + 0.01 * CAP)
    assert c.last.predicted_s == pytest.approx(1.0 + 0.01 * CAP, rel=0.05) and c.last.one_token_s == 1.0
    assert c.limit == CAP  # not gated: an explicit budget keeps its cap


def test_cost_is_shared_per_key_the_limit_is_each_memorys_and_a_cold_start_is_small() -> None:
    ctl.clear()
    key = ("m", "cpu", "torch.float32", 64)
    mine: dict = {}  # a memory's ``size_loop_state``
    cold = ctl.SizeController(ctl.cost_model(key), CAP, states=mine, key=key)
    assert cold.limit == ctl.PROBE and cold.model.fit is None  # nothing known, nothing measured
    sizes = run(cold, 3 * ctl.WINDOW, a=1.0, slope=0.5, accept=0.5)
    assert sizes[0] == 0 and set(sizes[1:1 + ctl.WINDOW]) == {ctl.PROBE}  # T(0) first, then the probe
    assert cold.limit == 0 and mine[key][0] == 0  # the probe did not pay: the memory keeps that
    assert mine[key][1] > ctl.FIRST_WAIT  # and the longer wait before its next probe
    assert ctl.cost_model(key) is cold.model and 0 in cold.model.seen  # a later request reads the cost
    later = ctl.SizeController(ctl.cost_model(key), CAP, states=mine, key=key)
    assert later.limit == 0 and later.next_limit() == 0  # this memory starts where its last decode ended
    other = ctl.SizeController(ctl.cost_model(key), CAP, states={}, key=key)  # another memory (visitor)
    assert other.limit == ctl.PROBE and other.model is cold.model  # the cost is shared, the limit is not
    assert ctl.cost_model(("m", "cpu", "torch.float32", 128)) is not cold.model
    ctl.clear()
    with pytest.raises(ValueError, match="cap"):
        ctl.SizeController(ctl.CostModel(), -1)


def test_at_limit_0_only_the_passes_before_a_probe_teach_the_memory() -> None:
    c = ctl.SizeController(ctl.CostModel(), CAP, states={("m", "cpu", "f32", 64): (0, 32, 0)},
                           key=("m", "cpu", "f32", 64))
    learnt = []
    for _ in range(40):
        n = c.next_limit()
        learnt.append(c.learns())
        c.observe(n, 1.0 + 0.5 * n, 1)
        if n:
            break
    probe = len(learnt) - 1  # the first pass with a tree
    assert probe == 32 and learnt[probe]  # the probe came after the wait, and trees always learn
    assert learnt[probe - ctl.WINDOW:probe] == [True] * ctl.WINDOW  # the passes just before it learn
    assert not any(learnt[:probe - ctl.WINDOW])  # the others do no drafter work: generate()'s cost


def test_a_window_of_trees_the_drafters_cost_rule_left_empty_drops_to_plain_passes() -> None:
    model = ctl.CostModel()
    model.observe(0, 1.0)  # T(0) known: no plain pass scheduled first
    c = ctl.SizeController(model, CAP)
    c.limit = 16  # trees were paying
    for _ in range(ctl.WINDOW - 1):
        c.next_limit()
        c.observe(0, 1.0, 1, refused=True)  # the drafter's cost rule took no node under the limit
        assert c.limit == 16
    c.next_limit()
    c.observe(0, 1.0, 1, refused=True)
    assert c.limit == 0 and not c.learns()  # no node paid: plain passes, no drafter work
    # an empty tree for want of anything to draft (a fresh memory) is no verdict on the cost
    c = ctl.SizeController(ctl.CostModel(), CAP)
    for _ in range(ctl.WINDOW):
        c.next_limit()
        c.observe(0, 1.0, 1)
    assert c.limit > 0


def test_the_tree_cost_is_fitted_through_trees_and_a_plain_pass_is_its_own_measure() -> None:
    # a CPU at 2B sizes: one token is a matrix-vector product (1 s); any tree a matrix product (2 s + a bit)
    c = ctl.SizeController(ctl.CostModel(), CAP, gate=False)
    for n in [0, 1, 4, 8, 16] * 4:
        c.next_limit()
        c.observe(n, 1.0 if n == 0 else 2.0 + 0.001 * n, 1)
    assert c.model.one_token_s() == 1.0
    cost = c.cost()
    assert cost.seconds[4] == pytest.approx(2.004, rel=0.01)
    # a tree's next node costs what the trees say (a millisecond), not the step from one token to two:
    # whether to draft at all is the limit's decision, how many nodes the drafter's
    for b in (0, 8):
        assert cost.marginal[b] == pytest.approx(0.001, abs=5e-4)


def test_concurrent_decodes_of_one_key_share_its_cost_model_safely() -> None:
    """Two visitors decoding at once: one writes new sizes while the other refits (a dict must not change
    under its iteration)."""
    import sys
    import threading

    model, errors, done = ctl.CostModel(), [], threading.Event()

    def writer() -> None:
        n = 0
        while not done.is_set():
            n += 1
            model.observe(n, 1e-3 + 1e-6 * n)

    def reader() -> None:
        try:
            for _ in range(300):
                model.stale()
                model.refit()
        except RuntimeError as e:  # "dictionary changed size during iteration"
            errors.append(e)
        finally:
            done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors and done.is_set()
