"""Same seed, same tokens on the real-file fixtures (their real vocabularies, templates and shipped
generation configs) and on the embedded shapes model, whose trained trees accept long paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_models import NAMES
from test_lossless import make_image
from test_sampling import HEADLINE, assert_same_seed_same_tokens

from recap.models.inputs import load_image
from recap.models.target import DEFAULT_MODEL_DIR

PROMPT = "Describe the image in detail."


@pytest.mark.parametrize("name", NAMES)
def test_every_method_gives_generates_tokens_on_the_real_files(load_real, name: str) -> None:
    """The shipped config's processors (Qwen2.5-VL: repetition_penalty 1.05) under the caller's warpers.
    The Qwen files ship ``top_k: 1``, under which a temperature alone still yields the argmax (as in
    generate()): their rows set ``top_k`` 0."""
    target = load_real(name)
    fields = HEADLINE if NAMES.index(name) % 2 else {"do_sample": True, "temperature": 1.0, "top_k": 0}
    assert_same_seed_same_tokens(target, make_image(1), PROMPT, 12, fields, (3,), name)


def test_the_shapes_model_samples_exactly_and_still_accepts_long_paths(shapes_target) -> None:
    target = shapes_target
    image = load_image(Path(DEFAULT_MODEL_DIR).parent / "examples" / "scene_1000505.png")
    longest = assert_same_seed_same_tokens(target, image, PROMPT, 48, HEADLINE, (0, 1, 2), "shapes-vlm")
    assert longest >= 4, "the shapes model's warm trees should accept several drafted tokens in one pass"
    hot = {"do_sample": True, "temperature": 1.0}
    assert_same_seed_same_tokens(target, image, PROMPT, 48, hot, (5,), "shapes-vlm, temperature 1")
