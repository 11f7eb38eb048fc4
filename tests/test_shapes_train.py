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
    [
        ("--short-mix", "color"),
        ("--short-mix", "colour=1"),
        ("--group-mix", "describe=1,short=1"),
        ("--group-mix", "describe=-1,detail=0,short=0"),
    ],
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
    assert not train.is_complete(
        base_args(out, "--steps", "1", "--batch-size", "2", "--warmup", "1", "--lr", "1e-4")
    )
    assert train.is_complete(
        base_args(out, "--steps", "1", "--batch-size", "2", "--warmup", "1", "--threads", "1")
    )


def test_a_conversation_share_adds_the_conversation_group(tmp_path: Path) -> None:
    args = base_args(tmp_path / "m", "--group-mix", "describe=1,detail=1,short=1,conversation=2")
    groups = train.batch_groups(args)
    assert [(name, share) for name, share, _ in groups] == [
        ("describe", 1.0),
        ("detail", 1.0),
        ("short", 1.0),
        ("conversation", 2.0),
    ]
    assert set(groups[-1][2]) == {"describe", "detail", "color", "size", "count", "where", "list"}
    assert [name for name, _, _ in train.batch_groups(base_args(tmp_path / "m"))] == [
        "describe",
        "detail",
        "short",
    ]


def test_the_conversation_stage_continues_the_stage_before_it_at_a_lower_learning_rate(
    tmp_path: Path,
) -> None:
    stages = train.stage_args(base_args(tmp_path / "m"))
    assert "conversation=" in stages[-1].group_mix and "conversation" not in stages[-2].group_mix
    assert stages[-1].lr <= stages[-2].lr and stages[-1].init == stages[-2].out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--from-stage", "2"], "--init"),
        (["--init", "x"], "--init"),
        (["--from-stage", "9", "--init", "x"], "1 to"),
    ],
)
def test_from_stage_needs_init_and_a_stage_of_the_recipe(tmp_path: Path, capsys, extra, message) -> None:
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path / "m"), *extra])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.slow  # trains three tiny stages
def test_a_recipe_run_from_a_later_stage_continues_init_and_keeps_its_stage_curves(tmp_path: Path) -> None:
    base = base_args(tmp_path / "m", "--steps", "1", "--batch-size", "2", "--warmup", "1")
    recipe = ({}, {"steps": 1, "lr": 1e-4, "seed": 5}, {"steps": 1, "lr": 5e-5, "seed": 6})
    train.run_recipe(base, recipe[:2])  # m-stage1, then m: the model that the next run continues
    later = base_args(
        tmp_path / "n", "--steps", "1", "--batch-size", "2", "--warmup", "1", "--init", str(tmp_path / "m")
    )
    train.run_recipe(later, recipe, first=3)
    final = json.loads((tmp_path / "n" / "training_args.json").read_text())
    assert final["init"] == str(tmp_path / "m") and final["seed"] == 6
    assert not (tmp_path / "n-stage1").exists() and not (tmp_path / "n-stage2").exists()
    for i, src in ((1, tmp_path / "m" / "stages" / "stage1"), (2, tmp_path / "m")):
        copied = tmp_path / "n" / "stages" / f"stage{i}" / "training_args.json"
        assert copied.read_text() == (src / "training_args.json").read_text()
