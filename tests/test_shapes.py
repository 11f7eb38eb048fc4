"""Shape scenes, their questions, the tokenizer, and the shipped shapes VLM."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recap.shapes import (
    COLORS,
    EVAL_SEEDS,
    IMAGE_SIZE,
    TRAIN_SEEDS,
    Obj,
    Scene,
    blank_image,
    build_processor,
    build_tokenizer,
    chat_messages,
    render_scene,
    render_scene_from,
)
from recap.shapes.scene import NUMBERS, PLURALS, SHAPES, position_phrase

MODEL_DIR = Path(__file__).resolve().parents[1] / "assets" / "shapes-vlm"
seeds = st.integers(min_value=0, max_value=2_000_000)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_seed_ranges_disjoint():
    assert TRAIN_SEEDS.stop <= EVAL_SEEDS.start


@settings(max_examples=30, deadline=None)
@given(seeds)
def test_scene_deterministic(seed):
    img1, s1 = render_scene(seed)
    img2, s2 = render_scene(seed)
    assert s1 == s2
    assert img1.tobytes() == img2.tobytes()
    assert img1.size == (IMAGE_SIZE, IMAGE_SIZE) and IMAGE_SIZE % 28 == 0
    assert 1 <= len(s1.objects) <= 5
    assert len({o.cell for o in s1.objects}) == len(s1.objects)
    assert render_scene_from(s1).tobytes() == img1.tobytes()
    assert s1.questions() == s2.questions()


def test_objects_are_drawn_in_their_cells():
    img, scene = render_scene(EVAL_SEEDS.start + 3)
    cell = IMAGE_SIZE // 3
    occupied = {o.cell for o in scene.objects}
    for c in range(9):
        px = img.getpixel((int((c % 3 + 0.5) * cell), int((c // 3 + 0.5) * cell)))
        assert (px != (255, 255, 255)) == (c in occupied)
    assert set(blank_image().getdata()) == {(255, 255, 255)}


@settings(max_examples=60, deadline=None)
@given(seeds)
def test_answers_match_scene(seed):
    _, scene = render_scene(seed)
    objs = scene.objects
    qs = scene.questions()
    kinds = {q.kind for q in qs}
    assert {"describe", "detail", "color", "size", "count", "list"} <= kinds
    for q in qs:
        if q.kind == "describe":
            sentences = q.answer.split(". ")
            assert len(sentences) == len(objs) + 1
            n = NUMBERS[len(objs)]
            assert sentences[0].startswith(f"There {'is' if len(objs) == 1 else 'are'} {n} object")
            for o, s in zip(objs, sentences[1:]):
                assert s.rstrip(".") == f"A {o.size} {o.color} {o.shape} is {position_phrase(o.cell)}"
        elif q.kind == "detail":
            assert q.answer.startswith(scene.describe())
            assert q.answer.count(". ") + 1 == 2 * len(objs)
        elif q.kind in ("color", "size"):
            m = re.fullmatch(rf"What {q.kind} is the (\w+)( (?:at|on|in) the [\w ]+)?\?", q.prompt)
            shape, where = m.group(1), (m.group(2) or "").strip()
            matches = [
                o for o in objs if o.shape == shape and (not where or position_phrase(o.cell) == where)
            ]
            assert len(matches) == 1, f"{q.kind} questions must be unambiguous"
            value = matches[0].color if q.kind == "color" else matches[0].size
            assert q.answer == f"The {shape}{' ' + where if where else ''} is {value}."
        elif q.kind == "count":
            m = re.fullmatch(r"How many (\w+)(?: objects)? are there\?", q.prompt)
            word = m.group(1)
            if word == "objects":
                n = len(objs)
            elif word in COLORS:
                n = sum(o.color == word for o in objs)
            else:
                n = sum(o.shape + "s" == word for o in objs)
            assert q.answer.split()[2] == NUMBERS[n]
        elif q.kind == "where":
            m = re.fullmatch(r"Where is the (\w+) (\w+)\?", q.prompt)
            matches = [o for o in objs if (o.color, o.shape) == m.groups()]
            assert len(matches) == 1
            assert q.answer == f"The {m.group(1)} {m.group(2)} is {position_phrase(matches[0].cell)}."
        elif q.kind == "list":
            shapes = re.findall(r"\ba (\w+)", q.answer)
            assert shapes == [o.shape for o in sorted(objs, key=lambda o: (o.col, o.row))]


def test_detail_is_long_for_many_objects(tok):
    lengths = [
        len(tok(s.detail()).input_ids)
        for s in (render_scene(i)[1] for i in range(300))
        if len(s.objects) >= 4
    ]
    assert sum(lengths) / len(lengths) >= 60


def test_constructed_scene():
    a = Scene((Obj("star", "red", "large", 4), Obj("circle", "blue", "small", 0)))
    assert [o.cell for o in a.objects] == [0, 4]  # reading order
    assert a.describe() == ("There are two objects. A small blue circle is at the top left. A large "
                            "red star is in the center.")
    with pytest.raises(ValueError):
        Scene((Obj("star", "red", "large", 4), Obj("circle", "blue", "small", 4)))


def test_tokenizer_roundtrip(tok):
    assert len(tok) <= 300
    for seed in list(range(200)) + list(range(EVAL_SEEDS.start, EVAL_SEEDS.start + 100)):
        for q in render_scene(seed)[1].questions():
            for text in (q.prompt, q.answer):
                ids = tok(text).input_ids
                assert tok.unk_token_id not in ids, text
                assert tok.decode(ids) == text


@pytest.mark.parametrize("shape", SHAPES)
def test_split_plurals_makes_a_shape_plural_the_shape_token_plus_s(shape):
    # Count questions name shapes in the plural; split, the plural carries the same token as
    # the singular that every other question uses.
    tok = build_tokenizer()  # the shipped vocabulary
    assert tok.tokenize(f"How many {PLURALS[shape]} are there?")[2:4] == [shape, "##s"]
    assert tok.convert_tokens_to_ids(PLURALS[shape]) == tok.unk_token_id
    text = f"There are two {PLURALS[shape]}."
    assert tok.decode(tok(text).input_ids) == text
    assert build_tokenizer(split_plurals=False).tokenize(PLURALS[shape]) == [PLURALS[shape]]  # whole plurals


def test_special_tokens(tok):
    for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
              "<|image_pad|>", "<|video_pad|>"):  # fmt: skip
        assert tok.convert_tokens_to_ids(t) != tok.unk_token_id
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_processor_image_and_text_only():
    proc = build_processor()
    img, _ = render_scene(1)
    text = proc.apply_chat_template(chat_messages("Describe the image."), add_generation_prompt=True,
                                    tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")
    out = proc(text=[text], images=[img], return_tensors="pt")
    assert set(out) >= {"input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw"}
    assert out["image_grid_thw"].tolist() == [[1, IMAGE_SIZE // 14, IMAGE_SIZE // 14]]
    n_image = (out["input_ids"] == proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum().item()
    assert n_image == (IMAGE_SIZE // 28) ** 2
    big = img.resize((640, 480))
    grid = proc(text=[text], images=[big], return_tensors="pt")["image_grid_thw"][0]
    assert grid[1] * grid[2] // 4 <= 16  # large uploads are bounded
    t2 = proc.apply_chat_template(chat_messages("How many objects are there?", with_image=False),
                                  add_generation_prompt=True, tokenize=False)  # fmt: skip
    assert proc.tokenizer.unk_token_id not in proc(text=[t2], return_tensors="pt")["input_ids"][0]


def test_shipped_model_answers(shapes_cpu):
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from recap.models.processors import Qwen2_5_VLImageProcessor
    from recap.shapes.data import eval_example
    from recap.shapes.evaluate import answer

    proc = Qwen2_5_VLImageProcessor.from_pretrained(str(MODEL_DIR))
    model = shapes_cpu.model  # the session's load of assets/shapes-vlm (conftest), fp32, eval mode
    assert type(model) is Qwen2_5_VLForConditionalGeneration and not model.training
    assert sum(p.numel() for p in model.parameters()) <= 8_000_000
    picks = [(0, "color"), (0, "size"), (4, "count"), (0, "where"), (0, "list"), (2, "describe"),
             (1, "detail")]
    cases = [eval_example(EVAL_SEEDS.start + i, k) for i, k in picks]
    # plain single-request generate, as a user would call it
    for ex in cases:
        text = proc.apply_chat_template(chat_messages(ex.prompt), add_generation_prompt=True, tokenize=False)
        inputs = proc(text=[text], images=[ex.image], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=136)
        got = proc.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        assert got.strip() == ex.answer, (ex.prompt, got)
    # batched (left-padded) generate agrees
    assert answer(model, proc, cases, 136) == [ex.answer for ex in cases]
