"""recap.engine.autobudget: the measured verify-cost curve and the budget it picks."""

from __future__ import annotations

import pytest

import recap
from recap.engine import autobudget, controller, costfit


@pytest.fixture
def target(load_tiny):
    autobudget.clear_cache()
    controller.clear()  # each test's decodes start from a cold cost model
    yield load_tiny("qwen2_5_vl")
    autobudget.clear_cache()
    controller.clear()


def test_a_fixed_auto_budget_is_a_valid_int(target) -> None:
    cfg = recap.RecapConfig(budget="auto", cost_aware=False)
    b = autobudget.auto_budget(target, cfg)
    assert isinstance(b, int) and not isinstance(b, bool)
    assert 1 <= b <= recap.RecapConfig.MAX_BUDGET
    recap.RecapConfig(budget=b)  # accepted by the config's own validation
    curve = autobudget.verify_curve(target)
    # the sizes timed: the smallest ones first, at least MIN_SIZES of them, never one out of order
    assert list(curve) == list(autobudget.BUDGETS[: len(curve)]) and len(curve) >= autobudget.MIN_SIZES
    assert all(v > 0 for v in curve.values())


#: "auto" without the size loop: one verify curve measured per key, trees that repeat on one machine.
CURVE = recap.RecapConfig(size_loop=False)


def test_the_curve_mode_sizes_trees_by_measured_cost_up_to_the_ceiling(target) -> None:
    assert recap.RecapConfig().sized_by_loop  # the default is the size loop (below); this is its opt-out
    cfg = CURVE
    assert cfg.budget == "auto" and cfg.cost_aware
    assert autobudget.AUTO_CAP == recap.RecapConfig.MAX_BUDGET
    out = recap.generate(target, None, "describe the image .", method="recap", max_new_tokens=8, trace=True,
                         config=cfg)
    assert out.trace is not None and out.trace.budget == autobudget.AUTO_CAP
    for step in out.trace.steps:  # each step says why its tree has its size
        s = step.sizing
        assert s is not None and s.stop in ("cost", "budget", "exhausted")
        assert s.pass_s > 0 and s.node_s > 0 and s.expected_tokens >= 1.0
        if s.stop == "cost":  # refused: the last node taken paid for itself at the size before
            assert step.tree_size < autobudget.AUTO_CAP
    assert autobudget.describe(target), "the curve the trees grew under is reported"
    back = recap.DecodeTrace.from_json(out.trace.to_json())
    assert [s.sizing for s in back.steps] == [s.sizing for s in out.trace.steps]  # saved with the trace
    fixed = recap.generate(
        target,
        None,
        "describe the image .",
        max_new_tokens=4,
        trace=True,
        config=recap.RecapConfig(budget=8, cost_aware=False),
    )
    assert all(s.sizing is None for s in fixed.trace.steps)
    assert all(
        "sizing" not in s for s in fixed.trace.to_dict()["steps"]
    )  # the document fixed trees always had
    # TR draws static trees: under "auto" it drafts the one measured budget, not the cap
    tr = recap.generate(target, None, "describe the image .", method="tr", max_new_tokens=4, trace=True,
                        config=cfg)
    assert tr.trace.budget == autobudget.auto_budget(target, cfg) < autobudget.AUTO_CAP
    assert all(s.sizing is None for s in tr.trace.steps)


def test_a_budget_cap_bounds_auto_for_every_drafter(target, monkeypatch) -> None:
    """``budget_cap`` (a deployment's ceiling) bounds what "auto" may take: the cost-aware tree's
    cap, and the size a fixed-size drafter picks, which on a flat cost curve is past the ceiling."""
    flat = {b: 1e-3 for b in autobudget.BUDGETS}  # every size costs a one-token pass
    monkeypatch.setattr(autobudget, "measure_verify_curve", lambda *a, **k: dict(flat))
    uncapped = autobudget.auto_budget(target, recap.RecapConfig(cost_aware=False))
    assert uncapped > 16
    capped = recap.RecapConfig(budget_cap=16)
    assert capped.auto_cap == 16 and recap.RecapConfig().auto_cap == recap.RecapConfig.MAX_BUDGET
    assert autobudget.auto_budget(target, capped) == 16
    for method in ("tr", "recap"):
        out = recap.generate(target, None, "describe the image .", method=method, max_new_tokens=6,
                             config=capped, trace=True)
        assert out.trace.budget == 16 and all(st.tree_size <= 16 for st in out.trace.steps), method
    with pytest.raises(ValueError, match="budget_cap bounds budget='auto'"):
        recap.RecapConfig(budget=8, budget_cap=16)
    with pytest.raises(ValueError, match=r"budget_cap must be an integer in \[1, 256\]"):
        recap.RecapConfig(budget_cap=0)


def test_the_measurement_stops_where_bigger_trees_cannot_pay(target, monkeypatch) -> None:
    """A pass that costs STOP_RATIO one-token passes ends the measurement: larger trees are not timed.
    The clock is the test's: each verify of b nodes takes (1 + b) ms of it."""
    import types

    clock = [0.0]
    timed = []
    real = autobudget.verify

    def verify(state, tree):
        nodes = len(tree.tokens) - 1
        timed.append(nodes)
        clock[0] += 1e-3 * (1 + nodes)
        return real(state, tree)

    monkeypatch.setattr(autobudget, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(autobudget, "verify", verify)
    curve = autobudget.measure_verify_curve(target, repeats=1)
    assert list(curve) == list(autobudget.BUDGETS[: autobudget.MIN_SIZES])  # 16 nodes cost 17 passes: stop
    assert curve == {b: pytest.approx(1e-3 * (1 + b)) for b in curve}
    assert max(timed) == autobudget.BUDGETS[autobudget.MIN_SIZES - 1]


def test_curves_are_kept_per_context_bucket(target, monkeypatch) -> None:
    measured = []

    def fake(target, budgets=autobudget.BUDGETS, *, prompt_tokens, **kwargs):
        measured.append(prompt_tokens)
        return {0: 1e-3, 8: 2e-3, 16: 3e-3}

    monkeypatch.setattr(autobudget, "measure_verify_curve", fake)
    assert autobudget.context_bucket(target, None) == autobudget.PROMPT_TOKENS
    assert autobudget.context_bucket(target, 300) == 256 and autobudget.context_bucket(target, 511) == 256
    for n in (300, 400, 511, 600, 40, 64):
        autobudget.pass_cost(target, 16, n)
    assert measured == [256, 512, 64]  # refreshed when the context grows past twice the one measured
    autobudget.prepare(target, 1000)
    assert len(measured) == 3  # 1000 tokens: the 512 bucket, measured already


def test_curve_is_cached_per_model_device_dtype(target, monkeypatch) -> None:
    cfg = recap.RecapConfig(budget="auto", cost_aware=False)
    first = autobudget.auto_budget(target, cfg)

    def boom(*args, **kwargs):
        raise AssertionError("measured twice")

    monkeypatch.setattr(autobudget, "measure_verify_curve", boom)
    assert autobudget.auto_budget(target, cfg) == first
    assert autobudget.resolve_budget(target, cfg) == first
    key = (target.name, str(target.device), str(target.dtype), autobudget.PROMPT_TOKENS)
    assert key in autobudget._CURVES


def test_engine_reports_the_chosen_budget_in_the_trace(target) -> None:
    cfg = recap.RecapConfig(budget="auto", cost_aware=False, size_loop=False)
    out = recap.generate(
        target, None, "describe the image .", method="recap", max_new_tokens=6, config=cfg, trace=True
    )
    assert out.trace is not None and out.trace.budget == autobudget.auto_budget(target, cfg)
    assert all(step.sizing is None and step.tree_size <= out.trace.budget for step in out.trace.steps)


def test_steeper_verify_cost_never_picks_a_bigger_tree() -> None:
    budgets = autobudget.BUDGETS
    base = 0.004
    chosen = []
    for slope in (0.0, 2e-6, 1e-5, 5e-5, 2e-4, 1e-3):
        curve = {b: base + slope * b for b in budgets}
        chosen.append(autobudget.choose_budget(curve, max_depth=8))
    assert chosen == sorted(chosen, reverse=True), chosen
    assert chosen[0] > chosen[-1]
    assert all(1 <= b <= max(budgets) for b in chosen)


def test_costlier_drafting_never_picks_a_bigger_tree() -> None:
    curve = {b: 0.003 + 2e-5 * b for b in autobudget.BUDGETS}
    picks = [autobudget.choose_budget(curve, draft_s_per_node=c) for c in (0.0, 2e-5, 1e-4, 1e-3)]
    assert picks == sorted(picks, reverse=True), picks


def test_prior_is_increasing_and_capped_by_depth() -> None:
    prior = autobudget.AcceptancePrior(((0, 1.0), (8, 3.0), (64, 9.0)))
    values = [prior.mat(b, max_depth=6) for b in range(0, 200, 3)]
    assert values[0] == 1.0
    assert all(a <= b for a, b in zip(values, values[1:]))
    assert max(values) == 7.0
    default = [autobudget.DEFAULT_PRIOR.mat(b, max_depth=8) for b in range(0, 300)]
    assert all(a <= b for a, b in zip(default, default[1:]))
    # between two points the MAT is linear in log(1 + b): log1p(2) / log1p(8) = 1/2, half way from 1 to 3
    assert autobudget.AcceptancePrior(((0, 1.0), (8, 3.0))).mat(2, max_depth=8) == pytest.approx(2.0)
    assert prior.mat(500, max_depth=20) == 9.0  # held flat past the last point, no extrapolated gain
    with pytest.raises(ValueError):
        autobudget.AcceptancePrior(((0, 1.0),))


def test_fit_recovers_a_linear_curve_and_resists_one_noisy_point() -> None:
    curve = {b: 0.003 + 5e-5 * b for b in autobudget.BUDGETS}
    a, c1, c2 = costfit.fit_verify(curve)
    assert (
        a == pytest.approx(0.003, rel=1e-6)
        and c1 == pytest.approx(5e-5, rel=1e-6)
        and c2 == pytest.approx(0, abs=1e-12)
    )
    base = autobudget.choose_budget(curve)
    for b in autobudget.BUDGETS:
        noisy = dict(curve)
        noisy[b] *= 1.15  # one point 15% off, as on a shared CPU
        assert abs(autobudget.choose_budget(noisy) - base) <= max(4, base // 3), (b, base)


def test_the_curve_times_the_engines_own_verify_step_under_the_models_rule(target, monkeypatch) -> None:
    """One prefill and one verify step: the auto budget calls the engine's own (recap.engine.steps), with
    the model's own generation config applied (its processors cost verify time too)."""
    from recap.engine import loop, steps

    assert (
        autobudget.prefill is steps.prefill is loop.prefill
        and autobudget.verify is steps.verify is loop.verify
    )
    calls, prefills = [], []

    def counting(state, tree):
        calls.append(state.rule)
        return steps.verify(state, tree)

    def prefilling(*args, **kwargs):
        prefills.append(args[1]["input_ids"].shape)
        return steps.prefill(*args, **kwargs)

    monkeypatch.setattr(autobudget, "verify", counting)
    monkeypatch.setattr(autobudget, "prefill", prefilling)
    saved = target.model.generation_config
    target.model.generation_config = saved.__class__(**{**saved.to_dict(), "repetition_penalty": 1.05})
    try:
        curve = autobudget.measure_verify_curve(target, budgets=(0, 8), repeats=1)
    finally:
        target.model.generation_config = saved
    assert set(curve) == {0, 8} and all(v > 0 for v in curve.values())
    assert calls and all(rule.repetition_penalty == 1.05 and rule.needs_context for rule in calls)
    assert prefills == [
        (1, autobudget.PROMPT_TOKENS + 1)
    ]  # the prompt and a root, as the engine prefills a request


def test_the_auto_budget_does_not_import_the_engine() -> None:
    """The engine imports the auto budget (for budget="auto"), never the other way round."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(autobudget))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "recap.engine.loop" not in imported and "recap.engine.steps" in imported


def test_the_measurement_prefills_under_the_targets_prefill_lock(target) -> None:
    """The rope delta is state on the shared model: a measurement must not prefill while a decode does."""
    import threading

    done = threading.Event()
    with target.prefill_lock:  # a decode's prefill in progress
        worker = threading.Thread(
            target=lambda: (autobudget.measure_verify_curve(target, (0, 8)), done.set())
        )
        worker.start()
        assert not done.wait(1.0), "the measurement prefilled while the lock was held"
    worker.join(30)
    assert done.is_set()
    assert getattr(target.model.model, "rope_deltas", None) is None  # no per-request state left behind


# --------------------------------------------------------------------------- the closed size loop
LOOP = recap.RecapConfig()  # the default


def test_the_size_loop_measures_nothing_on_a_requests_clock_and_learns_the_cost_per_key(
    target, monkeypatch
) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("a verify curve was measured inside a request")

    monkeypatch.setattr(autobudget, "measure_verify_curve", boom)
    controller.clear()
    memory = recap.TokenMemory.for_target(target)
    out = recap.generate(target, None, "describe the image .", method="recap", max_new_tokens=10, trace=True,
                         config=LOOP, memory=memory)
    assert out.trace is not None and out.trace.budget == autobudget.AUTO_CAP
    steps = out.trace.steps
    assert steps[0].tree_size == 0  # the first pass is plain: what one-token decoding costs here
    assert steps[1].tree_size <= controller.PROBE  # then a cold key starts small
    for step in steps:  # each cost-aware step records the loop's limit and its measured seconds
        s = step.sizing
        assert s is not None and step.tree_size <= s.limit <= autobudget.AUTO_CAP and s.realised_s > 0
        assert s.tokens == len(step.emitted) and ("tokens/s against" in s.summary()) == (s.one_token_s > 0)
    assert steps[-1].sizing.one_token_s > 0
    # TR's static templates follow the same loop: the cap is the budget, each step's size the loop's
    tr = recap.generate(target, None, "describe the image .", method="tr", max_new_tokens=10, trace=True,
                        config=LOOP)
    assert tr.trace.budget == autobudget.AUTO_CAP and all(s.sizing is None for s in tr.trace.steps)
    assert max(s.tree_size for s in tr.trace.steps) < autobudget.AUTO_CAP
    key = autobudget.curve_key(target, autobudget.context_bucket(target, out.trace.prompt_tokens))
    model = controller.cost_model(key)
    assert 0 in model.seen and model.fit is not None  # learnt from the decodes' own passes
    assert key in memory.size_loop_state  # the memory's next request of this key starts where this one ended
    fresh = recap.TokenMemory.for_target(target)
    assert not fresh.size_loop_state and memory.clone().size_loop_state == memory.size_loop_state
    assert not autobudget.describe(target)  # and nothing was measured
    controller.clear()


def test_the_size_loop_keeps_the_output_generates(target) -> None:
    from test_lossless import reference

    controller.clear()
    want = reference(target, None, "describe the image .", 24)
    for method in ("recap", "tr"):
        for _ in range(2):  # a cold key, then a warm one
            got = recap.generate(target, None, "describe the image .", method=method, max_new_tokens=24,
                                 config=LOOP).token_ids
            assert got == want, method
    controller.clear()


def test_the_loops_plain_passes_do_no_drafter_work_and_stay_lossless(target, monkeypatch) -> None:
    from test_lossless import reference

    from recap.drafting.recap_drafter import RecapDrafter

    controller.clear()
    memory = recap.TokenMemory.for_target(target)
    first = recap.generate(target, None, "describe the image .", max_new_tokens=4, memory=memory, trace=True)
    key = autobudget.curve_key(target, autobudget.context_bucket(target, first.trace.prompt_tokens))
    memory.size_loop_state[key] = (0, controller.MAX_WAIT, 0)  # no tree paid here: a long wait ahead
    calls = {"draft": 0, "update": 0}
    for name in calls:
        real = getattr(RecapDrafter, name)

        def counted(self, *args, _real=real, _name=name):
            calls[_name] += 1
            return _real(self, *args)

        monkeypatch.setattr(RecapDrafter, name, counted)
    out = recap.generate(target, None, "describe the image .", max_new_tokens=12, memory=memory, trace=True)
    assert out.token_ids == reference(target, None, "describe the image .", 12)
    assert all(s.tree_size == 0 and s.sizing.limit == 0 for s in out.trace.steps)
    assert calls == {"draft": 0, "update": 1}  # the prefill's rows only: no pass drafted or learnt
    controller.clear()
