"""The How it works sampling section's shipped data (assets/sampling-curve.json): consistent, current, drawn.

The file is written by scripts/sampling_curve.py; here a few of its recorded runs and its
worked example are decoded afresh (they must not have gone stale), its points are checked
against its runs, and the page's figure and example text are checked against the file.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest_app import REPO, SHAPES

from app.presenters.sampling_curve import CURVE_FILE, curve_figure, example_markdown, load_curve

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target

spec = importlib.util.spec_from_file_location("sampling_curve_script", REPO / "scripts" / "sampling_curve.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


@pytest.fixture(scope="module")
def data() -> dict:
    loaded = load_curve()
    assert loaded is not None, f"{CURVE_FILE} is missing or malformed: python scripts/sampling_curve.py"
    return loaded


@pytest.fixture(scope="module")
def shapes(model_dir, target):
    if model_dir != str(SHAPES):
        pytest.skip("the curve is of the embedded shapes model")
    return target


def test_each_point_is_its_runs_tokens_over_their_steps(data):
    assert set(data["tokens_per_step"]) == {"recap", "tr"} and data["temperatures"] == list(
        script.TEMPERATURES
    )
    for method, values in data["tokens_per_step"].items():
        for t, value in zip(data["temperatures"], values):
            runs = [r for r in data["runs"] if r["method"] == method and r["temperature"] == t]
            assert len(runs) == len(data["seeds"]) * len(data["examples"])
            assert value == round(sum(r["tokens"] for r in runs) / sum(r["steps"] for r in runs), 4)
    # what the section says: acceptance holds at low temperatures, then falls towards one token per step
    for values in data["tokens_per_step"].values():
        assert values[-1] < values[0] / 2 and values[-1] > 1


@pytest.mark.parametrize(("method", "temperature", "seed"), [("recap", 3.0, 1), ("tr", 5.0, 2)])
def test_a_recorded_run_decodes_the_same_afresh(data, shapes, method, temperature, seed):
    (first,) = [r for r in data["runs"] if (r["method"], r["temperature"], r["seed"], r["example"]) ==
                (method, temperature, seed, 0)]
    (gen,) = script.decode_series(shapes, method, temperature, seed, script.examples()[:1])
    assert (len(gen.token_ids), gen.decode_steps) == (first["tokens"], first["steps"])


def test_the_worked_example_decodes_the_same_afresh_and_is_shown(data, shapes):
    gens = script.decode_series(
        shapes, "recap", script.EXAMPLE_TEMPERATURE, data["seeds"][0], script.examples(), trace=True
    )
    fresh, shipped = script.worked_example(gens), data["example"]
    # the probabilities to 1e-4: their last recorded digit moves with the number of CPU threads
    assert [c.pop("accept_prob") for c in fresh["children"]] == pytest.approx(
        [c["accept_prob"] for c in shipped["children"]], abs=1e-4)
    assert fresh == {**shipped, "children": [{k: v for k, v in c.items() if k != "accept_prob"}
                                             for c in shipped["children"]]}
    text = example_markdown(data)
    for child in data["example"]["children"]:
        assert f"**{child['accept_prob']:.2f}**" in text
    assert "bonus" in text or "went on" in text


def test_the_figure_draws_the_files_points(data):
    fig = curve_figure(data)
    lines = {tr.name: list(tr.y) for tr in fig.data}
    assert lines == {
        "RECAP": data["tokens_per_step"]["recap"],
        "Token Recycling": data["tokens_per_step"]["tr"],
    }
    assert list(fig.data[0].x) == data["temperatures"]


def test_a_missing_or_foreign_file_says_so(tmp_path):
    assert load_curve(tmp_path / "none.json") is None
    (tmp_path / "foreign.json").write_text(json.dumps({"format": "other"}))
    assert load_curve(tmp_path / "foreign.json") is None
    assert "missing" in curve_figure(None).layout.annotations[0].text and example_markdown(None) == ""
