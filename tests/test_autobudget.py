"""recap.engine.autobudget: the measured verify-cost curve and the budget it picks."""

from __future__ import annotations

import time

import pytest

import recap
from recap.engine import autobudget


@pytest.fixture
def target(load_tiny):
    autobudget.clear_cache()
    yield load_tiny("qwen2_5_vl")
    autobudget.clear_cache()


def test_auto_budget_is_a_valid_int_and_cheap(target) -> None:
    cfg = recap.RecapConfig(budget="auto")
    t0 = time.perf_counter()
    b = autobudget.auto_budget(target, cfg)
    assert time.perf_counter() - t0 < 5.0  # well under a second on a real CPU; slack for a loaded CI box
    assert isinstance(b, int) and not isinstance(b, bool)
    assert 1 <= b <= recap.RecapConfig.MAX_BUDGET
    recap.RecapConfig(budget=b)  # accepted by the config's own validation
    curve = autobudget.verify_curve(target)
    assert set(curve) == set(autobudget.BUDGETS)
    assert all(v > 0 for v in curve.values())


def test_curve_is_cached_per_model_device_dtype(target, monkeypatch) -> None:
    cfg = recap.RecapConfig(budget="auto")
    first = autobudget.auto_budget(target, cfg)

    def boom(*args, **kwargs):
        raise AssertionError("measured twice")

    monkeypatch.setattr(autobudget, "measure_verify_curve", boom)
    assert autobudget.auto_budget(target, cfg) == first
    assert autobudget.resolve_budget(target, cfg) == first
    assert (target.name, str(target.device), str(target.dtype)) in autobudget._CURVES


def test_engine_reports_the_chosen_budget_in_the_trace(target) -> None:
    cfg = recap.RecapConfig(budget="auto")
    out = recap.generate(target, None, "describe the image .", method="recap", max_new_tokens=6, config=cfg, trace=True)
    assert out.trace is not None and out.trace.budget == autobudget.auto_budget(target, cfg)


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
    assert autobudget.DEFAULT_PRIOR.mat(8, 8) == pytest.approx(dict(autobudget.SHAPES_MAT_CURVE)[8])
    with pytest.raises(ValueError):
        autobudget.AcceptancePrior(((0, 1.0),))


def test_fit_recovers_a_linear_curve_and_resists_one_noisy_point() -> None:
    curve = {b: 0.003 + 5e-5 * b for b in autobudget.BUDGETS}
    a, c1, c2 = autobudget.fit_verify(curve)
    assert a == pytest.approx(0.003, rel=1e-6) and c1 == pytest.approx(5e-5, rel=1e-6) and c2 == pytest.approx(0, abs=1e-12)
    base = autobudget.choose_budget(curve)
    for b in autobudget.BUDGETS:
        noisy = dict(curve)
        noisy[b] *= 1.15  # one point 15% off, as on a shared CPU
        assert abs(autobudget.choose_budget(noisy) - base) <= max(4, base // 3), (b, base)


def test_the_curve_times_the_engines_own_verify_step_under_the_models_rule(target, monkeypatch) -> None:
    """One prefill and one verify step: the auto budget calls the engine's own (recap.engine.steps), with
    the model's own generation config applied (its processors cost verify time too)."""
    from recap.engine import loop, steps

    assert autobudget.prefill is steps.prefill is loop.prefill and autobudget.verify is steps.verify is loop.verify
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
    assert prefills == [(1, autobudget.PROMPT_TOKENS + 1)]  # the prompt and a root, as the engine prefills a request


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
        worker = threading.Thread(target=lambda: (autobudget.measure_verify_curve(target, (0, 8)), done.set()))
        worker.start()
        assert not done.wait(1.0), "the measurement prefilled while the lock was held"
    worker.join(30)
    assert done.is_set()
    assert getattr(target.model.model, "rope_deltas", None) is None  # no per-request state left behind
