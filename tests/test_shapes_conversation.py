"""The shapes model's conversations: training chats render as the chat template renders a
multi-turn conversation, and the conversation evaluation decodes each turn on its history."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from recap.shapes.data import (
    CONVERSATION,
    CONVERSATION_KINDS,
    Example,
    eval_conversation,
    eval_example,
    sample_training_examples,
    training_batch,
)
from recap.shapes.scene import EVAL_SEEDS, KINDS, TRAIN_SEEDS, render_scene

MODEL_DIR = Path(__file__).resolve().parents[1] / "assets" / "shapes-vlm"
TURNS = [
    ("Describe the image.", "There is one object. A large red circle is at the top left."),
    ("What color is the circle?", "The circle is red."),
    ("Where is the red circle?", "The red circle is at the top left."),
]


@pytest.fixture(scope="module")
def processor():
    from recap.models.processors import Qwen2_5_VLImageProcessor

    # the shipped processor: its chat_template.jinja is what the library renders with
    return Qwen2_5_VLImageProcessor.from_pretrained(str(MODEL_DIR))


def library_messages(image, turns, answered: int) -> list[dict]:
    """A conversation as a library caller writes it (transformers' chat messages, the image
    inline in the first user turn): the first ``answered`` turns answered, then the next question."""
    messages: list[dict] = []
    for i, (question, reply) in enumerate(turns[: answered + 1]):
        content = [{"type": "image", "image": image}] if i == 0 else []
        messages.append({"role": "user", "content": content + [{"type": "text", "text": question}]})
        if i < answered:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
    return messages


def three_turn_example(image) -> Example:
    (p, a), *more = TURNS
    return Example(0, "describe", p, a, image, more=tuple(more))


def test_a_three_turn_training_chat_is_the_chat_templates_multi_turn_rendering(processor):
    image, _ = render_scene(EVAL_SEEDS.start)
    batch = training_batch(processor, [three_turn_example(image)])
    whole = library_messages(image, TURNS, answered=2)
    whole.append({"role": "assistant", "content": [{"type": "text", "text": TURNS[2][1]}]})
    text = processor.apply_chat_template(whole, tokenize=False)
    expected = processor(text=[text], images=[image], return_tensors="pt")
    assert batch["input_ids"].tolist() == expected["input_ids"].tolist()
    assert batch["pixel_values"].equal(expected["pixel_values"])


def test_each_answer_follows_exactly_the_prompt_the_library_renders_for_that_turn(processor):
    image, _ = render_scene(EVAL_SEEDS.start)
    batch = training_batch(processor, [three_turn_example(image)])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for t, (_, reply) in enumerate(TURNS):
        prompt = processor.apply_chat_template(library_messages(image, TURNS, t), add_generation_prompt=True,
                                               tokenize=False)  # fmt: skip
        prefix = processor(text=[prompt], images=[image])["input_ids"][0]
        answer = processor.tokenizer(reply, add_special_tokens=False)["input_ids"] + [end]
        assert ids[: len(prefix)] == list(prefix)  # turn t's decode-time prompt
        assert ids[len(prefix) : len(prefix) + len(answer)] == answer
        # the loss covers the answer and its <|im_end|>, and nothing of the prompt before it
        assert labels[len(prefix) : len(prefix) + len(answer)] == answer
        assert labels[len(prefix) - 1] == -100


@pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").exists(), reason="assets/shapes-vlm not built")
def test_each_turns_training_prefix_is_what_recap_prepare_inputs_feeds_for_that_turn(processor):
    import recap

    target = recap.load_target(device="cpu")
    image, _ = render_scene(EVAL_SEEDS.start)
    ids = training_batch(processor, [three_turn_example(image)])["input_ids"][0].tolist()
    for t in range(len(TURNS)):
        fed = recap.prepare_inputs(target, messages=library_messages(image, TURNS, t))["input_ids"][
            0
        ].tolist()
        assert ids[: len(fed)] == fed


def test_conversation_batches_ask_two_to_turns_different_questions_about_one_scene():
    rng = random.Random(0)
    groups = ((CONVERSATION, 1.0, CONVERSATION_KINDS),)
    examples = sample_training_examples(rng, 64, TRAIN_SEEDS, 4, groups)
    sizes = [1 + len(e.more) for e in examples]
    assert min(sizes) == 2 and max(sizes) == 4
    for e in examples:
        asked = dict([(e.prompt, e.answer), *e.more])
        assert len(asked) == 1 + len(e.more)  # no question repeated
        scene_answers = {q.prompt: q.answer for q in render_scene(e.seed)[1].questions()}
        assert all(scene_answers.get(p) == a for p, a in asked.items() if p in scene_answers)
    kinds = {e.kind for e in examples}
    assert {"describe", "detail"} & kinds and {"color", "count"} <= kinds


def test_evaluation_conversations_are_fixed_and_start_with_a_single_question_of_the_evaluation():
    for seed in range(EVAL_SEEDS.start, EVAL_SEEDS.start + 20):
        talk = eval_conversation(seed, 4)
        assert [e.prompt for e in talk] == [e.prompt for e in eval_conversation(seed, 4)]
        assert 2 <= len(talk) <= 4 and len({e.kind for e in talk}) == len(talk)
        assert all(e.kind in KINDS and e.prompt == eval_example(seed, e.kind).prompt for e in talk)


@pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").exists(), reason="assets/shapes-vlm not built")
def test_a_later_turn_is_decoded_after_the_models_own_earlier_answers(processor):
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from recap.shapes.evaluate import MAX_NEW_TOKENS, evaluate_conversations

    torch.set_num_threads(1)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(MODEL_DIR)).eval()
    seed = EVAL_SEEDS.start + 1
    results = evaluate_conversations(model, processor, range(seed, seed + 1), max_turns=3)
    talk = eval_conversation(seed, 3)
    assert sum(n for _, n in results["by_turn"].values()) == len(talk)
    # redo the conversation by hand, one plain generate() per turn on the rendered chat
    said: list[tuple[str, str]] = []
    for e in talk:
        messages = library_messages(e.image, [*said, (e.prompt, "")], answered=len(said))
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=[e.image], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS.get(e.kind, 32))
        said.append((e.prompt, processor.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :],
                                                          skip_special_tokens=True).strip()))  # fmt: skip
    right = [got == e.answer for (_, got), e in zip(said, talk)]
    first = results["first"][talk[0].kind]
    assert (first["correct"], first["total"]) == (int(right[0]), 1)
    later = [results["later"][e.kind] for e in talk[1:]]
    assert sum(c["correct"] for c in later) == sum(right[1:])


def test_the_shipped_model_answers_follow_up_questions(shapes_cpu, processor):
    """The conversation stage (recipe stage 5): with its own earlier answers in the context, the model
    still answers right, descriptions asked as a follow-up included. On these 40 held-out scenes the
    shipped model gets 60 of 69 later turns (13 of 19 descriptions); the stage-4 model before it got
    37 (no description: it stopped after "There are three objects.")."""
    from recap.shapes.evaluate import evaluate_conversations

    seeds = range(EVAL_SEEDS.start, EVAL_SEEDS.start + 40)
    later = evaluate_conversations(shapes_cpu.model, processor, seeds, max_turns=4)["later"]
    right, asked = sum(c["correct"] for c in later.values()), sum(c["total"] for c in later.values())
    described = [later[k] for k in ("describe", "detail")]
    assert asked == 69 and right >= 54, (right, asked)
    assert sum(c["correct"] for c in described) >= 8, described
