"""Benchmark tab: shows a results folder, and runs the quick suite through the API."""

from __future__ import annotations

import json

import pytest
from gradio_client import Client

from app import bench_tab
from app.services import UserError

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url


def test_shipped_results_load_and_plot():
    data, md = bench_tab.load_results(str(bench_tab.SHIPPED))
    assert data["lossless"]["ok"] and "| recap |" in md
    fig = bench_tab.results_figure(data)
    names = {t.name for t in fig.data}
    assert {"tr", "recap", "pld"} <= names


def test_a_folder_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no results.json"):
        bench_tab.load_results(str(tmp_path))
    (tmp_path / "results.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(UserError, match="not a RECAP benchmark result"):
        bench_tab.load_results(str(tmp_path))


def test_show_endpoint(app_url, tmp_path):
    client = Client(app_url, verbose=False)
    md, _ = client.predict(str(bench_tab.SHIPPED), api_name="/bench_results")
    assert "| recap |" in md and "Lossless check" in md
    md, _ = client.predict(str(tmp_path), api_name="/bench_results")
    assert md.startswith("⚠️") and "no results.json" in md


def test_quick_suite_runs_from_the_app_and_is_lossless(app_url, tmp_path):
    client = Client(app_url, verbose=False)
    out = tmp_path / "quick"
    md, _, folder = client.predict(str(out), api_name="/bench_quick")
    assert folder == str(out) and (out / "results.json").is_file()
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["suite"] == "quick" and data["lossless"]["ok"]
    assert "| recap |" in md and "LOSSLESS CHECK FAILED" not in md
