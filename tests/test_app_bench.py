"""Benchmark tab: visitors choose a run (never a path). (The quick suite itself runs in tests/test_app_load.py.)"""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest_app import launch_app
from gradio_client import Client
from gradio_client.exceptions import AppError

from app import bench_tab
from app.services import UserError
from app.settings import load_settings

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target


def test_shipped_results_load_and_plot():
    data, md = bench_tab.load_results(bench_tab.SHIPPED)
    assert data["lossless"]["ok"] and "| recap |" in md
    fig = bench_tab.results_figure(data)
    names = {t.name for t in fig.data}
    assert {"tr", "recap", "pld"} <= names


def test_a_folder_without_results_or_of_the_wrong_shape_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no results.json"):
        bench_tab.load_results(tmp_path, "mine")
    (tmp_path / "results.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(UserError, match="not a RECAP benchmark result"):
        bench_tab.load_results(tmp_path, "mine")
    (tmp_path / "results.json").write_text(json.dumps({"schema": "recap-bench", "summary": {"recap": 3}}))
    with pytest.raises(UserError, match="malformed summary"):
        bench_tab.load_results(tmp_path, "mine")


@pytest.fixture(scope="module")
def bench_app(model_dir, tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    demo, url = launch_app(model_dir, data_dir=data)
    yield url, data
    demo.close()


def test_visitors_choose_a_run_not_a_path(bench_app, tmp_path):
    url, _ = bench_app
    client = Client(url, verbose=False)
    md, _ = client.predict(bench_tab.SHIPPED_RUN, api_name="/bench_results")
    assert "| recap |" in md and "Lossless check" in md
    for bad in (str(tmp_path), "../../etc", "x" * 5000, str(bench_tab.SHIPPED)):
        with pytest.raises(AppError, match="there is no benchmark run") as err:
            client.predict(bad, api_name="/bench_results")
        assert "choose one of" in str(err.value) and len(str(err.value)) < 400


def test_public_mode_shows_only_the_shipped_run(model_dir, tmp_path):
    settings = dataclasses.replace(load_settings(model_dir), public=True, data_dir=tmp_path)
    assert bench_tab.run_choices(settings) == [bench_tab.SHIPPED_RUN]
    with pytest.raises(UserError):
        bench_tab.run_folder(settings, "quick-20260101-000000")
