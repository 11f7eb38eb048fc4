"""Part 2 endpoints over HTTP: /compare, /guided_demo, /memory_view."""

from __future__ import annotations

import json

import pytest
from conftest_app import example
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import recap
from app.presenters.text import md_text
from app.state import aliasing
from app.state.settings import Limits

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url


@pytest.fixture()
def client(app_url: str) -> Client:
    return Client(app_url, verbose=False)


def test_compare_outputs_identical_and_numbers_consistent(client, target):
    image, prompt = example()
    out = json.loads(client.predict(handle_file(image), prompt, 32, api_name="/compare"))
    assert out["identical"] is True
    ref = recap.generate(target, image, prompt, method="ar", max_new_tokens=32)
    assert set(out["methods"]) == {"recap", "tr", "pld", "ar"}
    for method, v in out["methods"].items():
        assert v["token_ids"] == ref.token_ids, method
        assert v["tokens"] == len(ref.token_ids)
        assert sum(v["accepted_lengths"]) == v["tokens"] and len(v["accepted_lengths"]) == v["steps"]
        assert v["tokens_per_step"] == pytest.approx(v["tokens"] / v["steps"], abs=1e-3)
        assert v["seconds"] > 0 and v["speedup"] > 0
    assert out["methods"]["ar"]["steps"] == out["methods"]["ar"]["tokens"]
    # under the app's "auto": the size loop sizes RECAP's trees and Token Recycling's templates alike,
    # below the deployment's ceiling (their budget)
    ceiling = Limits().max_budget
    for name in ("recap", "tr"):
        run = out["methods"][name]
        assert run["budget"] == ceiling and max(run["drafted"]) <= ceiling, name
    assert out["methods"]["ar"]["speedup"] == pytest.approx(1.0)


def test_compare_bad_input(client):
    image, _ = example()
    with pytest.raises(AppError, match="prompt is empty"):
        client.predict(handle_file(image), "", 8, api_name="/compare")


def test_guided_demo(client, target):
    outputs = client.predict(api_name="/guided_demo")
    md, _run, other_only, summary_md, table, data = outputs
    assert "Guided demo done" in md and other_only is False
    assert data["identical"] is True
    image_b, prompt_b = example("B")
    ref_b = recap.generate(target, image_b, prompt_b, method="ar", max_new_tokens=160)
    for method in ("tr", "recap"):
        runs = data["runs"][method]
        assert (runs["A"]["request"], runs["B"]["request"]) == (0, 1)  # one memory across both images
        assert runs["B"]["token_ids"] == ref_b.token_ids
        counts = data["aliasing_from_A"][method]
        assert counts["aliasing states"] == sum(counts[v] for v in aliasing.VERDICTS)
        assert counts["M1 from another image"] == counts["aliasing states"]  # A's rows, used on image B
    assert data["aliasing_from_A"]["tr"][aliasing.FIXED] == 0  # TR has no contextual memory to fix anything
    assert data["aliasing_on_B"]["tr"][aliasing.FIXED] == 0
    # the point of the demo: on B, RECAP's request-local memories fix states where its 1-token memory misleads
    assert data["aliasing_on_B"]["recap"][aliasing.FIXED] >= 1
    assert (
        data["aliasing_on_B"]["recap"]["aliasing states"]
        >= data["aliasing_from_A"]["recap"]["aliasing states"]
    )
    rows = table["data"] if isinstance(table, dict) and "data" in table else table["value"]["data"]
    assert len(rows) == data["aliasing_on_B"]["recap"]["aliasing states"]
    assert "showing" in summary_md


def test_memory_view(client):
    image, prompt = example()
    client.predict(handle_file(image), prompt, "recap", 16, api_name="/decode")
    stats, rows, detail_md, detail = client.predict("recap", 8, "", api_name="/memory_view")
    assert "rows filled" in stats
    data = rows["value"]["data"] if "value" in rows else rows["data"]
    assert data
    token_text = data[0][1]
    stats, rows, detail_md, detail = client.predict("recap", 8, str(data[0][0]), api_name="/memory_view")
    # token texts are shown as text, escaped
    assert "Row of" in detail_md and md_text(token_text) in detail_md
    detail_rows = detail["value"]["data"] if "value" in detail else detail["data"]
    assert len(detail_rows) == 8
