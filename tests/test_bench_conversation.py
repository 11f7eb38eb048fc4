"""Conversation benchmarks: suite files in MMSpec's layout and the follow-up suite as conversations.

tests/fixtures/convsuite holds a suite file made from shapes scenes (``scripts/make_convsuite.py``):
every method side by side on each turn, decoded with the history, lossless against generate() on
the rendered conversation, with per-turn and per-category rows. No timing assertions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import recap
from recap import bench
from recap.__main__ import main as cli_main
from recap.bench.suite import FOLLOWUP_QUESTIONS, FOLLOWUP_REVISITS, SUITES, build_suite
from recap.bench.suitefile import read_suite

SUITE = Path(__file__).resolve().parent / "fixtures" / "convsuite" / "suite.jsonl"


@pytest.fixture(scope="module")
def shapes() -> recap.Target:
    return recap.load_target()


@pytest.fixture(scope="module")
def results(shapes: recap.Target) -> dict:
    return bench.bench(shapes, suite=str(SUITE), repeats=1, max_new_tokens=40, progress=False, warmup=False)


def test_a_suite_file_reads_as_one_request_per_turn() -> None:
    requests = read_suite(SUITE)
    lines = [json.loads(line) for line in SUITE.read_text().splitlines()]
    assert [r.prompt for r in requests] == [t for line in lines for t in line["turns"]]
    assert [r.conversation for r in requests] == [line["id"] for line in lines for _ in line["turns"]]
    assert [r.position for r in requests] == [t for line in lines for t in range(len(line["turns"]))]
    assert {r.category for r in requests} == {"multi-turn", "single"}
    from PIL import ImageChops

    from recap.shapes.scene import render_scene

    for r in requests:  # the images beside the file, opened from there: shapes scenes, no third-party image
        assert [Path(p).name for p in r.image_files] == [
            next(x["image"] for x in lines if x["id"] == r.conversation)
        ]
        scene = render_scene(int(r.conversation.split("-")[1]))[0].convert("RGB")
        assert ImageChops.difference(r.images()[0], scene).getbbox() is None


def test_every_method_side_by_side_on_every_turn_lossless(results: dict) -> None:
    assert results["lossless"]["ok"], results["lossless"]["mismatches"]
    names = [a["name"] for a in results["arms"] if not a["skipped"]]
    assert set(recap.METHODS) <= set(names) and names[0] == "hf"
    turns = len(read_suite(SUITE))
    assert results["lossless"]["checked"] == turns * (len(names) - 1)
    assert results["meta"]["suite"] == "suite.jsonl" and results["meta"]["conversations"] == 3


def test_per_turn_and_per_category_rows(results: dict) -> None:
    recap_row = results["summary"]["recap"]
    assert set(recap_row["by_turn"]) == {"1", "2", "3"}
    assert recap_row["by_turn"]["1"]["requests"] == 3 and recap_row["by_turn"]["3"]["requests"] == 2
    assert set(recap_row["by_category"]) == {"multi-turn", "single"}
    assert recap_row["by_category"]["single"]["later"] == {"requests": 0}
    first, later = recap_row["by_position"]["first"], recap_row["by_position"]["later"]
    assert first["requests"] + later["requests"] == recap_row["overall"]["requests"]
    md = bench.render_markdown(results)
    assert "## Conversations" in md and "| MAT turn 1 | MAT turn 2 | MAT turn 3 |" in md
    assert "multi-turn: MAT first / later" in md


def test_the_cli_takes_a_suite_file(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    rc = cli_main(
        [
            "bench",
            "--suite",
            str(SUITE),
            "--limit",
            "3",
            "--max-new-tokens",
            "12",
            "--repeats",
            "1",
            "--methods",
            "tr",
            "recap",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert [r["position"] for r in data["requests"]] == [0, 1, 2]
    with pytest.raises(SystemExit):
        cli_main(["bench", "--suite", str(tmp_path / "missing.jsonl")])
    assert "suite file not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"id": "a", "image": "/etc/passwd", "turns": ["hi"]}', "must be a file beside the suite file"),
        ('{"id": "a", "image": "../x.png", "turns": ["hi"]}', "must be a file beside the suite file"),
        ('{"id": "a", "image": "nope.png", "turns": ["hi"]}', "image file 'nope.png' not found"),
        ('{"id": "a", "image": "s.png", "turns": []}', "turns must be a list of 1 to 16 questions"),
        ('{"id": "a", "image": "s.png", "turns": ["  "]}', "turn 1 must be a non-empty string"),
        ('{"image": "s.png", "turns": ["hi"]}', "id must be a non-empty string"),
        ("not json", "not JSON"),
        (
            '{"id": "a", "image": "s.png", "turns": ["hi"]}\n{"id": "a", "image": "s.png", "turns": ["hi"]}',
            "line 2: id 'a' is used twice",
        ),
    ],
)
def test_bad_suite_files_are_refused_naming_the_line(tmp_path: Path, line: str, match: str) -> None:
    from recap.shapes.scene import render_scene

    render_scene(1_000_000)[0].save(tmp_path / "s.png")
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=match):
        read_suite(path)


def test_the_followup_suite_is_conversations_with_revisits() -> None:
    requests = build_suite("followup")
    first, n = SUITES["followup"]
    talks = [r for r in requests if r.category == "conversation"]
    assert len(talks) == n * FOLLOWUP_QUESTIONS["followup"]
    for r in talks:  # one conversation per scene, its turns in order
        assert r.conversation == f"scene-{r.seed}"
        assert r.position == [x.index for x in talks if x.seed == r.seed].index(r.index)
    revisits = [r for r in requests if r.category == "revisit"]
    assert len(revisits) == FOLLOWUP_REVISITS["followup"]
    for r in revisits:  # a new conversation on a scene already talked about, a question not yet asked
        assert r.position == 0 and r.conversation == f"scene-{r.seed}-again"
        assert r.kind not in {x.kind for x in talks if x.seed == r.seed}
        assert max(x.index for x in talks if x.seed == r.seed) < r.index
    assert [r.index for r in requests] == list(range(len(requests)))
