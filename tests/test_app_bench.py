"""Benchmark tab: visitors choose a run (never a path). (The quick suite itself runs in
tests/test_app_load.py.)"""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest_app import launch_app
from gradio_client import Client
from gradio_client.exceptions import AppError

from app.boundary.errors import UserError
from app.state.settings import load_settings
from app.tabs import bench

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target


def test_shipped_results_load_and_plot():
    data, md = bench.load_results(bench.SHIPPED)
    assert data["lossless"]["ok"] and "| recap |" in md
    fig = bench.results_figure(data)
    names = {t.name for t in fig.data}
    assert {"tr", "recap", "pld"} <= names


def test_a_folder_without_results_or_of_the_wrong_shape_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no results.json"):
        bench.load_results(tmp_path, "mine")
    (tmp_path / "results.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(UserError, match="not a RECAP benchmark result"):
        bench.load_results(tmp_path, "mine")
    (tmp_path / "results.json").write_text(json.dumps({"schema": "recap-bench", "summary": {"recap": 3}}))
    with pytest.raises(UserError, match="malformed summary"):
        bench.load_results(tmp_path, "mine")


@pytest.fixture(scope="module")
def bench_app(model_dir, tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    demo, url = launch_app(model_dir, data_dir=data)
    yield url, data
    demo.close()


def test_visitors_choose_a_run_not_a_path(bench_app, tmp_path):
    url, _ = bench_app
    client = Client(url, verbose=False)
    md, _ = client.predict(bench.SHIPPED_RUN, api_name="/bench_results")
    assert "| recap |" in md and "Lossless check" in md
    for bad in (str(tmp_path), "../../etc", "x" * 5000, str(bench.SHIPPED)):
        with pytest.raises(AppError, match="there is no benchmark run") as err:
            client.predict(bad, api_name="/bench_results")
        assert "choose one of" in str(err.value) and len(str(err.value)) < 400


def test_the_follow_up_suite_has_its_own_button_and_endpoint(bench_app):
    url, _ = bench_app
    endpoints = Client(url, verbose=False).view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/bench_quick", "/bench_followup"} <= set(endpoints)


def test_public_mode_shows_only_the_shipped_run(model_dir, tmp_path):
    settings = dataclasses.replace(load_settings(model_dir), public=True, data_dir=tmp_path)
    assert bench.run_choices(settings) == [bench.SHIPPED_RUN]
    with pytest.raises(UserError):
        bench.run_folder(settings, "quick-20260101-000000")


def _followup_results() -> dict:
    def stats(mat: float) -> dict:
        return {"requests": 2, "mat": mat, "speedup": mat / 2}

    row = {"overall": stats(3.0), "by_position": {"first": stats(2.5), "later": stats(3.2)},
           "by_kind": {"color": stats(2.9)}}
    unscoped = {**row, "by_position": {"first": stats(2.5), "later": stats(2.9)}}
    return {"meta": {"suite": "followup", "kinds": ["color"]},
            "summary": {"hf": row, "recap": row, "recap unscoped": unscoped}}


def test_a_follow_up_run_plots_the_first_and_later_questions_beside_the_kinds():
    fig = bench.results_figure(_followup_results())
    mat = {t.name: t for t in fig.data if t.yaxis == "y2"}
    assert list(mat["recap"].x) == ["overall", "first questions", "later questions", "color"]
    assert list(mat["recap"].y) == [3.0, 2.5, 3.2, 2.9] and mat["recap unscoped"].y[2] == 2.9
    default = {**_followup_results(), "meta": {"suite": "default", "kinds": ["color"]}}
    assert list(bench.results_figure(default).data[0].x) == ["overall", "color"]  # no position columns


def test_follow_up_and_quick_runs_are_listed_together_newest_first(model_dir, tmp_path):
    settings = dataclasses.replace(load_settings(model_dir), data_dir=tmp_path)
    for name in (
        "quick-20260101-000000",
        "followup-20260102-000000",
        "quick-20260103-000000",
        "other-20260104-000000",
    ):
        (settings.bench_dir / name).mkdir(parents=True)
        (settings.bench_dir / name / "results.json").write_text("{}")
    assert bench.saved_runs(settings) == ["quick-20260103-000000", "followup-20260102-000000",
                                              "quick-20260101-000000"]
    fresh = bench.new_run_folder(settings, "followup")
    assert fresh.name.startswith("followup-") and bench._RUN_NAME.match(fresh.name)
    assert (
        bench.run_folder(settings, "followup-20260102-000000")
        == settings.bench_dir / "followup-20260102-000000"
    )
    public = bench.BenchTab(dataclasses.replace(settings, public=True))
    with pytest.raises(Exception, match="the follow-up suite is turned off"):
        public.run_followup(None)  # type: ignore[arg-type]
