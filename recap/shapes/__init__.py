"""Synthetic shape scenes and a small Qwen2.5-VL trained on them (assets/shapes-vlm).

- ``render_scene(seed) -> (PIL image, Scene)``; ``render_scene_from(scene) -> image``;
  ``Scene.questions() -> list[Question]`` (``kind``, ``prompt``, ``answer``).
- ``build_tokenizer()``, ``build_processor()``: the word-level tokenizer and the
  ``recap.models.processors.Qwen2_5_VLImageProcessor`` shipped with the model.
- ``python -m recap.shapes.train`` / ``python -m recap.shapes.evaluate``.
"""

from recap.shapes.scene import (
    COLORS,
    EVAL_SEEDS,
    IMAGE_SIZE,
    KINDS,
    POSITIONS,
    SHAPES,
    SIZES,
    TRAIN_SEEDS,
    Obj,
    Question,
    Scene,
    blank_image,
    random_scene,
    render_scene,
    render_scene_from,
)
from recap.shapes.tokenizer import CHAT_TEMPLATE, build_processor, build_tokenizer, chat_messages

__all__ = [
    "CHAT_TEMPLATE",
    "COLORS",
    "EVAL_SEEDS",
    "IMAGE_SIZE",
    "KINDS",
    "POSITIONS",
    "SHAPES",
    "SIZES",
    "TRAIN_SEEDS",
    "Obj",
    "Question",
    "Scene",
    "blank_image",
    "build_processor",
    "build_tokenizer",
    "chat_messages",
    "random_scene",
    "render_scene",
    "render_scene_from",
]
