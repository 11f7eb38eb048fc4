"""The small Qwen2.5-VL model trained on shape scenes: config and construction."""

from __future__ import annotations

from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from recap.shapes.tokenizer import IM_END, IMAGE_PAD, PAD, VIDEO_PAD, VISION_END, VISION_START

TEXT_HIDDEN = 192
TEXT_HEADS = 6  # head_dim 32 -> mrope_section sums to 16
VISION_HIDDEN = 96
# M-RoPE splits the 16 rotary frequencies of a 32-dim head into (temporal, height, width)
# sections, highest frequencies first; these are the stock theta and the stock proportions
# (Qwen2.5-VL's [16, 24, 24] of 64). Under them the width section rotates by ~0.003 rad per
# position or less, so attention alone cannot tell image columns apart: the image tokens
# carry their own row and column instead, which the auxiliary loss of train.py puts into
# the vision features. (An earlier model used theta 20 and sections [1, 4, 11] to make
# columns visible to attention; at 2,000 steps both settings scored the same.)
ROPE_THETA = 10000.0
MROPE_SECTION = [4, 6, 6]


def build_config(
    tokenizer, layers: int = 4, rope_theta: float = ROPE_THETA, mrope_section: list[int] | None = None
) -> Qwen2_5_VLConfig:
    ids = tokenizer.convert_tokens_to_ids
    eos, pad = ids(IM_END), ids(PAD)
    return Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_HIDDEN,
            intermediate_size=512,
            num_hidden_layers=layers,
            num_attention_heads=TEXT_HEADS,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": rope_theta,
                "mrope_section": list(mrope_section or MROPE_SECTION),
            },
            tie_word_embeddings=True,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=pad,
        ),
        vision_config=dict(
            depth=3,
            hidden_size=VISION_HIDDEN,
            intermediate_size=256,
            num_heads=3,
            out_hidden_size=TEXT_HIDDEN,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[2],
        ),
        image_token_id=ids(IMAGE_PAD),
        video_token_id=ids(VIDEO_PAD),
        vision_start_token_id=ids(VISION_START),
        vision_end_token_id=ids(VISION_END),
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=True,
    )


def build_model(tokenizer, seed: int = 0, **config) -> Qwen2_5_VLForConditionalGeneration:
    import torch

    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(build_config(tokenizer, **config))
    model.generation_config = generation_config(tokenizer)
    return model


def generation_config(tokenizer) -> GenerationConfig:
    return GenerationConfig(
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
        bos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        do_sample=False,
        max_new_tokens=160,
    )
