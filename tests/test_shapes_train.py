"""The shapes model's training command: the staged recipe, resuming, and option errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recap.shapes import train


def base_args(out: Path, *extra: str):
    return train.parser().parse_args(["--out", str(out), *extra])


def test_recipe_stages_chain_each_from_the_previous_and_end_in_out(tmp_path: Path) -> None:
    stages = train.stage_args(base_args(tmp_path / "m"))
    assert [s.out.name for s in stages] == [f"m-stage{i}" for i in range(1, len(stages))] + ["m"]
    assert [s.init for s in stages] == [None] + [s.out for s in stages[:-1]]


def test_recipe_stage_one_is_the_command_defaults_and_later_stages_change_them(tmp_path: Path) -> None:
    defaults = base_args(tmp_path / "m")
    stages = train.stage_args(defaults)
    assert stages[0].lr == defaults.lr and stages[0].steps == defaults.steps
    assert stages[1].lr < defaults.lr and stages[1].seed != defaults.seed


def test_a_recipe_option_without_single_stage_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path / "m"), "--lr", "1e-3"])
    assert "--single-stage" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "option, value",
    [("--short-mix", "color"), ("--short-mix", "colour=1"), ("--group-mix", "describe=1,short=1"), ("--group-mix", "describe=-1,detail=0,short=0")],
)
def test_a_malformed_mix_is_a_clear_error(tmp_path: Path, capsys, option: str, value: str) -> None:
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path / "m"), "--single-stage", option, value])
    assert option in capsys.readouterr().err


@pytest.mark.slow  # trains every stage of a tiny recipe
def test_a_tiny_recipe_trains_every_stage_then_a_rerun_skips_them(tmp_path: Path, capsys) -> None:
    out = tmp_path / "m"
    base = base_args(out, "--steps", "2", "--batch-size", "2", "--warmup", "1")
    recipe = ({}, {"steps": 1, "lr": 1e-4, "seed": 5})
    train.run_recipe(base, recipe)

    final = json.loads((out / "training_args.json").read_text())
    assert final["init"] == str(tmp_path / "m-stage1") and final["lr"] == 1e-4 and final["steps"] == 1
    assert len(json.loads((out / "training_curve.json").read_text())["step"]) == 1
    stage1 = out / "stages" / "stage1"
    assert len(json.loads((stage1 / "training_curve.json").read_text())["step"]) == 2
    assert (stage1 / "training_curve.png").exists() and (out / "model.safetensors").exists()

    before = (out / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    train.run_recipe(base, recipe)
    assert capsys.readouterr().out.count("skipping") == 2
    assert (out / "model.safetensors").stat().st_mtime_ns == before


def test_a_stage_with_other_settings_is_not_taken_as_finished(tmp_path: Path) -> None:
    out = tmp_path / "m"
    base = base_args(out, "--steps", "1", "--batch-size", "2", "--warmup", "1", "--single-stage")
    train.train(base)
    assert train.is_complete(base)
    assert not train.is_complete(base_args(out, "--steps", "1", "--batch-size", "2", "--warmup", "1", "--lr", "1e-4"))
    assert train.is_complete(base_args(out, "--steps", "1", "--batch-size", "2", "--warmup", "1", "--threads", "1"))
