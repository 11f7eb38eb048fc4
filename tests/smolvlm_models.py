"""SmolVLM checkpoints laid out as their model cards ship them, with tiny random weights.

``build(name, directory)`` writes one checkpoint directory:

* ``smolvlm-256m-instruct``: HuggingFaceTB/SmolVLM-256M-Instruct, the first release, as
  ``Idefics3ForConditionalGeneration`` (``model_type`` "idefics3"; processor_config.json
  naming ``Idefics3Processor``, preprocessor_config.json naming ``Idefics3ImageProcessor``,
  the template in chat_template.json);
* ``smolvlm2-256m-video-instruct``: HuggingFaceTB/SmolVLM2-256M-Video-Instruct, as
  ``SmolVLMForConditionalGeneration`` (``model_type`` "smolvlm"; ``SmolVLMProcessor`` /
  ``SmolVLMImageProcessor`` with its ``video_sampling`` settings, the tokenizer's
  ``extra_special_tokens``, the template in chat_template.jinja).

Both ship config.json, generation_config.json (BOS ``<|im_start|>``, EOS
``<end_of_utterance>``, pad ``<|im_end|>``), preprocessor_config.json,
processor_config.json (``image_seq_len``), the tokenizer as vocab.json + merges.txt +
tokenizer.json with tokenizer_config.json, special_tokens_map.json and added_tokens.json,
and the chat template as the cards ship it. The files are reconstructed from the public
cards (no hub is reachable here); the geometry is the real one shrunk: SigLIP patches of
16 pixels and a pixel shuffle of 4 (``scale_factor``), so a 128-pixel tile is 8 x 8
patches and ``(128 / 16)**2 / 4**2 = 4`` image tokens (the real 512-pixel tiles give 64);
images are resized to a longest edge of 256 (real: 2048), so a landscape image is 2 x 2
tiles plus the global image.

The tokenizer is a GPT-2 style byte-level BPE like SmolLM2's (digits split one by one,
then byte-level pieces), trained here on a small English text, with SmolVLM's special
tokens in the real order: ``<|endoftext|>`` 0, ``<|im_start|>`` 1, ``<|im_end|>`` 2 in the
base vocabulary, then 128 added tokens after it (``<global-img>``, the 36
``<row_r_col_c>``, ``<fake_token_around_image>``, ``<image>``, 88 reserved tokens,
``<end_of_utterance>``), as the real tokenizer adds them after its 49152 base entries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

IDEFICS3 = "smolvlm-256m-instruct"
SMOLVLM2 = "smolvlm2-256m-video-instruct"
NAMES = (IDEFICS3, SMOLVLM2)

BASE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ROW_COL = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
ADDED = ["<global-img>", *ROW_COL, "<fake_token_around_image>", "<image>",
         *(f"<|reserved_special_token_{i}|>" for i in range(88)), "<end_of_utterance>"]
#: The template SmolVLM-256M-Instruct ships (chat_template.json).
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
#: The template SmolVLM2 ships (chat_template.jinja): string contents and videos too.
SMOLVLM2_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'] is string %}{{': ' + message['content']}}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% elif line['type'] == 'video' %}{{ '<video>' }}{% "
    "endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' "
    "}}{% endif %}"
)
#: What the byte-level BPE is trained on: short English answers about simple pictures.
CORPUS = (
    "The image shows a red circle and a blue square on a white background. There is one green star at the "
    "top "
    "left. What color is the circle? The circle is red. Describe the picture in detail. The picture has two "
    "shapes: a large yellow triangle at the bottom right and a small blue square in the center. How many "
    "shapes are there? There are 3 shapes. Tell me about the image. It is a simple drawing with bright "
    "colors, "
    "where every shape is easy to see. The square is above the circle, and the star is next to them.\n"
    "User: What is in the image?\nAssistant: A red circle, a blue square and a green star.\n"
)

# Shrunk widths (the real 256M text model is 576 wide with 30 layers, the vision tower 768 wide).
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "image_size": 128, "patch_size": 16, "max_image_size": {"longest_edge": 128},
          "size": {"longest_edge": 256}}


def tokenizer_files(directory: Path, smolvlm2: bool) -> dict[str, int]:
    """Write the tokenizer files; returns the ids of the special tokens by string."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=BASE_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    base = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ADDED])
    ids = {t: tok.token_to_id(t) for t in BASE_SPECIALS + ADDED}
    assert ids["<global-img>"] == base and ids["<end_of_utterance>"] == base + len(ADDED) - 1
    tok.save(str(directory / "tokenizer.json"))
    tok.model.save(str(directory))  # vocab.json + merges.txt, as GPT-2 style checkpoints ship them
    added = {t: ids[t] for t in ADDED}
    write(directory, "added_tokens.json", added)
    specials = {"additional_special_tokens": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
                "bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>", "pad_token": "<|im_end|>",
                "unk_token": "<|endoftext|>"}
    write(directory, "special_tokens_map.json", specials)
    config: dict[str, Any] = {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                "special": True,
            }
            for t, i in ids.items()
        },
        **specials, "clean_up_tokenization_spaces": False, "legacy": False, "model_max_length": 8192,
        "processor_class": "SmolVLMProcessor" if smolvlm2 else "Idefics3Processor",
        "tokenizer_class": "GPT2Tokenizer", "truncation_side": "left", "vocab_size": base,
    }
    if smolvlm2:
        config["extra_special_tokens"] = {
            "end_of_utterance_token": "<end_of_utterance>", "fake_image_token": "<fake_token_around_image>",
            "global_image_token": "<global-img>", "image_token": "<image>",
        }
    write(directory, "tokenizer_config.json", config)
    return ids


def write(directory: Path, name: str, data: Any) -> None:
    (directory / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def model_config(smolvlm2: bool, ids: dict[str, int]) -> dict[str, Any]:
    """config.json as the card ships it, widths shrunk (vocabulary and token ids this tokenizer's)."""
    vocab = max(ids.values()) + 1
    text = {"architectures": ["VLlama3ForCausalLM"], **TEXT, "is_llama_config": True,
            "max_position_embeddings": 8192, "model_type": "llama", "neftune_noise_alpha": 0.0,
            "pad_token_id": ids["<|im_end|>"], "pixel_shuffle_factor": 4, "qk_layer_norms": False,
            "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_theta": 100000, "torch_dtype": "bfloat16",
            "use_resampler": False, "vocab_size": vocab}
    vision = {**VISION, "model_type": "smolvlm_vision" if smolvlm2 else "idefics3_vision",
              "tie_word_embeddings": False, "use_base_siglip": False}
    return {
        "architectures": [
            "SmolVLMForConditionalGeneration" if smolvlm2 else "Idefics3ForConditionalGeneration"
        ],
        "image_token_id": ids["<image>"], "model_type": "smolvlm" if smolvlm2 else "idefics3",
        "pad_token_id": 128002, "scale_factor": 4, "text_config": text, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0" if smolvlm2 else "4.46.0",
        "use_cache": True, "vision_config": vision, "vocab_size": vocab,
    }


def preprocessor_config(smolvlm2: bool) -> dict[str, Any]:
    cls = "SmolVLM" if smolvlm2 else "Idefics3"
    data: dict[str, Any] = {
        "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
        "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
        "image_processor_type": f"{cls}ImageProcessor", "image_std": [0.5, 0.5, 0.5],
        "max_image_size": VISION["max_image_size"], "processor_class": f"{cls}Processor", "resample": 1,
        "rescale_factor": 0.00392156862745098, "size": VISION["size"],
    }
    if smolvlm2:
        data["video_sampling"] = {"fps": 1, "max_frames": 64, "video_size": VISION["max_image_size"]}
    return data


def build(name: str, directory: str | Path, seed: int = 0) -> Path:
    """Write the checkpoint ``name`` (one of ``NAMES``) to ``directory``."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    smolvlm2 = name == SMOLVLM2
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ids = tokenizer_files(directory, smolvlm2)
    config_json = model_config(smolvlm2, ids)
    write(directory, "config.json", config_json)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(directory),
                                                    dtype=torch.float32)
    model.save_pretrained(directory)
    # save_pretrained rewrites config.json and generation_config.json in today's layout:
    # write them as shipped.
    write(directory, "config.json", config_json)
    write(directory, "generation_config.json",
          {
              "_from_model_config": True, "bos_token_id": ids["<|im_start|>"],
              "eos_token_id": ids["<end_of_utterance>"], "pad_token_id": ids["<|im_end|>"],
              "transformers_version": config_json["transformers_version"],
          })
    write(directory, "preprocessor_config.json", preprocessor_config(smolvlm2))
    cls = "SmolVLMProcessor" if smolvlm2 else "Idefics3Processor"
    write(directory, "processor_config.json", {"image_seq_len": 4, "processor_class": cls})
    if smolvlm2:
        (directory / "chat_template.jinja").write_text(SMOLVLM2_TEMPLATE, encoding="utf-8")
    else:
        write(directory, "chat_template.json", {"chat_template": IDEFICS3_TEMPLATE})
    return directory


def build_all(root: Path) -> dict[str, Path]:
    return {name: build(name, root / name, seed=i) for i, name in enumerate(NAMES)}
