"""The shipped warm memory (assets/warm-memory): training scenes only, and it drafts from step 1."""

from __future__ import annotations

import json

import pytest
from accepted import TREES
from conftest_app import EXAMPLES, REPO

import recap
from recap.models.inputs import image_key, load_image
from recap.shapes import EVAL_SEEDS, TRAIN_SEEDS
from recap.shapes.examples import PAIR_A, PAIR_B
from recap.shapes.scene import render_scene_from
from recap.shapes.warm_memory import load_warm, training_plan

WARM = REPO / "assets" / "warm-memory"


def examples() -> list[dict]:
    return json.loads((EXAMPLES / "examples.json").read_text())


def test_the_shipped_memory_loads_with_its_provenance():
    warm = load_warm(WARM)
    assert warm.requests and len(warm.requests) == len(warm.memory.requests)
    assert warm.memory.filled > 0
    for r in warm.requests:
        assert warm.thumbnail_path(r.request) is not None
        assert warm.memory.requests[r.request].prompt == r.prompt
    size = sum(p.stat().st_size for p in WARM.rglob("*") if p.is_file())
    assert size < 1_000_000


def test_provenance_lists_only_training_seeds_never_evaluation_or_examples():
    warm = load_warm(WARM)
    seeds = {r.seed for r in warm.requests}
    assert all(s in TRAIN_SEEDS and s not in EVAL_SEEDS for s in seeds)
    example_seeds = {e["seed"] for e in examples() if "seed" in e}
    assert example_seeds and example_seeds.isdisjoint(seeds)
    # no example image (the gallery and the constructed pair) wrote a row
    keys = {r.image_key for r in warm.requests}
    shipped = {image_key(load_image(str(EXAMPLES / e["file"]))) for e in examples()}
    shipped |= {image_key(render_scene_from(PAIR_A)), image_key(render_scene_from(PAIR_B))}
    assert keys.isdisjoint(shipped)


def test_the_plan_refuses_evaluation_seeds():
    with pytest.raises(ValueError, match="not a training seed"):
        training_plan(2, first_seed=EVAL_SEEDS.start)


def test_a_first_decode_of_the_default_example_drafts_a_tree_at_step_1(shapes_cpu):
    """On the embedded model the memory was written by (the session's load, conftest)."""
    target = shapes_cpu
    warm = load_warm(WARM)
    assert warm.memory.vocab_size == target.vocab_size
    first = examples()[0]
    image, prompt = str(EXAMPLES / first["file"]), first["prompt"]
    # TREES: trees that do not depend on the size loop's timings (the default's loop may shrink them)
    cold = recap.generate(target, image, prompt, method="recap", max_new_tokens=64, trace=True,
                          config=TREES).trace
    warm_run = recap.generate(target, image, prompt, method="recap", max_new_tokens=64, memory=warm.memory,
                              trace=True, config=TREES).trace
    assert len(cold.steps[0].nodes) == 1  # an empty memory drafts nothing at step 1
    assert len(warm_run.steps[0].nodes) > 1
    assert warm_run.token_ids == cold.token_ids  # lossless either way
    assert warm_run.mat > cold.mat
