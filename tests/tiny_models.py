"""Tiny random-weight VLMs of every supported family, built from configs (no download).

``build(family, directory)`` saves a model + processor with ``save_pretrained`` so the
tests load it back through ``recap.load_target`` like a real checkpoint. The
tokenizer is a word-level one over a small vocabulary whose words repeat a lot, so
random weights still produce repetitive text that drafters can predict.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gemma3_fixture
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
    "<|video_pad|>", "<image>",
]
WORDS = (
    "the a an red blue green yellow circle square star is are there one two three of and on in at top "
    "left right bottom center describe image what color shape . , ? user assistant system tell me about "
    "picture large small many how where"
).split()

QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}"
    "{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} : "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<image> {% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor "
    "%}"
    "{% endif %} <|im_end|> {% endfor %}{% if add_generation_prompt %}assistant : {% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate([*SPECIALS, "[UNK]", ":", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="[UNK]"
    )


def _text_cfg(vocab: int, eos: int, *, mrope: bool = False, model_type: str | None = None) -> dict:
    cfg = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        eos_token_id=eos,
        pad_token_id=0,
        bos_token_id=None,
    )
    if mrope:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 2, 4]}
    if model_type:
        cfg["model_type"] = model_type
    return cfg


def _qwen_ids(tok: PreTrainedTokenizerFast) -> dict[str, int]:
    return {n: tok.convert_tokens_to_ids(t)
            for n, t in [
                ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
            ]}


def _qwen_processor(cls: type, tok: PreTrainedTokenizerFast) -> Any:
    import transformers as tf

    image_proc = tf.Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)
    return cls(image_processor=image_proc, tokenizer=tok, chat_template=QWEN_TEMPLATE)


def _qwen2_vl(tok: PreTrainedTokenizerFast, vocab: int, eos: int) -> tuple[Any, Any]:
    import transformers as tf

    from recap.models.processors import Qwen2VLImageProcessor

    vision = dict(depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    config = tf.Qwen2VLConfig(text_config=_text_cfg(vocab, eos, mrope=True), vision_config=vision,
                              eos_token_id=eos, pad_token_id=0, **_qwen_ids(tok))
    return tf.Qwen2VLForConditionalGeneration(config), _qwen_processor(Qwen2VLImageProcessor, tok)


def _qwen2_5_vl(tok: PreTrainedTokenizerFast, vocab: int, eos: int) -> tuple[Any, Any]:
    import transformers as tf

    from recap.models.processors import Qwen2_5_VLImageProcessor

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                  fullatt_block_indexes=[1])
    config = tf.Qwen2_5_VLConfig(text_config=_text_cfg(vocab, eos, mrope=True), vision_config=vision,
                                 eos_token_id=eos, pad_token_id=0, **_qwen_ids(tok))
    return tf.Qwen2_5_VLForConditionalGeneration(config), _qwen_processor(Qwen2_5_VLImageProcessor, tok)


def _qwen3_vl(tok: PreTrainedTokenizerFast, vocab: int, eos: int, moe: bool = False) -> tuple[Any, Any]:
    """Qwen3-VL: interleaved M-RoPE (sections in the real 24:20:20 proportion), 16-pixel patches,
    DeepStack features from both vision layers into both decoder layers; ``moe``: the MoE
    variant (4 experts, 2 per token), which tests/test_family_qwen3_vl.py builds."""
    import transformers as tf

    from recap.models.processors import Qwen3VLImageProcessor

    text = _text_cfg(vocab, eos, mrope=True)
    text.update(head_dim=16,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                 "mrope_interleaved": True})
    if moe:
        text.update(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
                  deepstack_visual_indexes=[0, 1])
    config_cls = tf.Qwen3VLMoeConfig if moe else tf.Qwen3VLConfig
    config = config_cls(text_config=text, vision_config=vision, eos_token_id=eos, pad_token_id=0,
                        **_qwen_ids(tok))
    image_proc = tf.Qwen2VLImageProcessorPil(patch_size=16, min_pixels=64 * 64, max_pixels=128 * 128,
                                             image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLImageProcessor(image_processor=image_proc, tokenizer=tok, chat_template=QWEN_TEMPLATE)
    model_cls = tf.Qwen3VLMoeForConditionalGeneration if moe else tf.Qwen3VLForConditionalGeneration
    return model_cls(config), processor


def _llava_config(tok: PreTrainedTokenizerFast, vocab: int, eos: int, text_type: str) -> dict[str, Any]:
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=56, patch_size=14, projection_dim=32)
    return dict(vision_config=vision, text_config=_text_cfg(vocab, eos, model_type=text_type),
                image_token_id=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
                vision_feature_layer=-1)


def _llava(tok: PreTrainedTokenizerFast, vocab: int, eos: int) -> tuple[Any, Any]:
    import transformers as tf

    model = tf.LlavaForConditionalGeneration(tf.LlavaConfig(**_llava_config(tok, vocab, eos, "llama")))
    image_proc = tf.CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    processor = tf.LlavaProcessor(image_processor=image_proc, tokenizer=tok, patch_size=14,
                                  vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                  chat_template=LLAVA_TEMPLATE, image_token="<image>")
    return model, processor


def _llava_next(
    tok: PreTrainedTokenizerFast, vocab: int, eos: int, text_type: str = "llama"
) -> tuple[Any, Any]:
    import transformers as tf

    pinpoints = [[56, 56], [56, 112], [112, 56]]
    config = tf.LlavaNextConfig(**_llava_config(tok, vocab, eos, text_type), image_grid_pinpoints=pinpoints)
    model = tf.LlavaNextForConditionalGeneration(config)
    image_proc = tf.LlavaNextImageProcessorPil(
        size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56}, image_grid_pinpoints=pinpoints
    )
    processor = tf.LlavaNextProcessor(image_processor=image_proc, tokenizer=tok, patch_size=14,
                                      vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                      chat_template=LLAVA_TEMPLATE, image_token="<image>")
    return model, processor


#: One builder per tiny model: (tokenizer, vocabulary size, EOS id) -> (model, processor).
BUILDERS: dict[str, Callable[[PreTrainedTokenizerFast, int, int], tuple[Any, Any]]] = {
    "qwen2_vl": _qwen2_vl,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen3_vl": _qwen3_vl,
    "llava": _llava,
    "llava_next": _llava_next,
    "llava_next_qwen2": partial(_llava_next, text_type="qwen2"),  # LLaVA-NeXT over a Qwen2 decoder
    "gemma3": gemma3_fixture.tiny,  # its own Gemma-format tokenizer; a 4-token sliding window
}
FAMILIES = tuple(BUILDERS)


def build(family: str, directory: str | Path, seed: int = 0) -> Path:
    """Build a tiny random model of ``family`` (a key of ``BUILDERS``) and save it (with its
    processor) to ``directory``."""
    directory = Path(directory)
    tok = tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    model, processor = BUILDERS[family](tok, len(tok), eos)
    model.generation_config.eos_token_id = (
        processor.tokenizer.eos_token_id
    )  # a family's own tokenizer (Gemma 3's)
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = None
    model.eval()
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory
