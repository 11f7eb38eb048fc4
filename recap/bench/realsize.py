"""Random-weight checkpoints at full real sizes, and the benchmark's photograph-like image.

``build_checkpoint(name, directory)`` writes a checkpoint directory that ``load_target`` reads
like any other: the real model config at its full widths and depths, the real tokenizer,
processor and generation files, and random (seeded) bf16 weights (``load_target`` casts them
to the dtype asked for; bf16 on disk halves the file: 4.4 GB for Qwen2-VL-2B).

* ``qwen2-vl-2b``: Qwen/Qwen2-VL-2B-Instruct from its shipped files, kept in the repository
  under ``tests/fixtures/realfiles/qwen2-vl-2b-instruct`` (config, generation config,
  preprocessor config, tokenizer config with the chat template) and the Qwen2 byte-level BPE
  (``tests/fixtures/realfiles/qwen2-bpe``, 151,643 entries); 2.2 B parameters.
* ``smolvlm-256m``: HuggingFaceTB/SmolVLM-256M-Instruct (``Idefics3ForConditionalGeneration``)
  at its published sizes: text 576 wide, 30 layers, 9 heads (3 KV), MLP 1536, vocabulary
  49,280; SigLIP vision tower 768 wide, 12 layers, 512-pixel tiles of 16-pixel patches, pixel
  shuffle 4 (64 image tokens per tile), images resized to a longest edge of 2048 (a 500 x 375
  photograph: 4 x 3 tiles and the global image, 13 tiles). The tokenizer is byte-level with
  no merges (every byte one token) padded to the real base vocabulary of 49,152 entries, then
  SmolVLM's 128 added tokens at their real ids: the vocabulary (and so the output head) has
  the real size, a prompt's text is a few dozen tokens longer than with the real merges.

``photo_image()`` is the input image: 500 x 375, made procedurally here (a sky gradient, hills,
a lake, trees, a sun and sensor noise), so that no third-party photograph ships with the project.
"""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFilter

#: The real files kept in the repository (a checkout: ``recap/`` next to ``tests/``).
REALFILES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "realfiles"
QWEN2_VL_2B = "qwen2-vl-2b"
SMOLVLM_256M = "smolvlm-256m"
REAL_SIZES = (QWEN2_VL_2B, SMOLVLM_256M)
PROMPT = "Describe this image in detail, including the colours, the objects and where they are."

SMOL_BASE_VOCAB = 49152
SMOL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SMOL_ADDED = [
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
    "<fake_token_around_image>",
    "<image>",
    *(f"<|reserved_special_token_{i}|>" for i in range(88)),
    "<end_of_utterance>",
]
#: The chat template SmolVLM-256M-Instruct ships (chat_template.json).
SMOL_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
#: SmolVLM-256M-Instruct's published sizes.
SMOL_TEXT = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rope_theta": 100000,
    "rms_norm_eps": 1e-05,
    "model_type": "llama",
    "architectures": ["VLlama3ForCausalLM"],
    "tie_word_embeddings": False,
}
SMOL_VISION = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "image_size": 512,
    "patch_size": 16,
    "model_type": "idefics3_vision",
    "tie_word_embeddings": False,
}


def _write(directory: Path, name: str, data: Any) -> None:
    (directory / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _unpack(rel: str, dest: Path) -> None:
    src = REALFILES / rel
    if not src.is_file():
        raise FileNotFoundError(
            f"{src} is missing: the real-size benchmark runs from a checkout of the repository"
        )
    if src.suffix == ".xz":
        dest.write_bytes(lzma.decompress(src.read_bytes()))
    else:
        shutil.copyfile(src, dest)


def _save_random_weights(directory: Path, config_json: dict[str, Any], seed: int) -> int:
    """Seeded random bf16 weights for ``config_json``; the shipped json files are written back
    afterwards (``save_pretrained`` rewrites them in today's layout). Returns the parameter count."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix == ".json"}
    _write(directory, "config.json", config_json)
    config = AutoConfig.from_pretrained(directory)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(directory)
    del model
    for name, data in files.items():
        (directory / name).write_bytes(data)
    _write(directory, "config.json", config_json)
    return n


def _qwen2_vl_2b(directory: Path) -> None:
    real = "qwen2-vl-2b-instruct"
    _unpack("qwen2-bpe/vocab.json.xz", directory / "vocab.json")
    _unpack("qwen2-bpe/merges.txt.xz", directory / "merges.txt")
    for name in (
        "tokenizer_config.json",
        "chat_template.json",
        "preprocessor_config.json",
        "generation_config.json",
    ):
        _unpack(f"{real}/{name}", directory / name)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)  # Qwen2Tokenizer from vocab.json + merges.txt
    tok.backend_tokenizer.save(str(directory / "tokenizer.json"))
    _save_random_weights(directory, json.loads((REALFILES / real / "config.json").read_text()), seed=0)


def _smol_tokenizer(directory: Path) -> dict[str, int]:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SMOL_SPECIALS + alphabet)}
    for i in range(len(vocab), SMOL_BASE_VOCAB):  # unreachable entries: the real base vocabulary's size
        vocab[f"<|pad_{i}|>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SMOL_SPECIALS + SMOL_ADDED]
    )
    ids = {t: tok.token_to_id(t) for t in SMOL_SPECIALS + SMOL_ADDED}
    if ids["<global-img>"] != SMOL_BASE_VOCAB:
        raise RuntimeError(f"SmolVLM's added tokens start at {SMOL_BASE_VOCAB}, got {ids['<global-img>']}")
    tok.save(str(directory / "tokenizer.json"))
    specials = {
        "additional_special_tokens": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
        "bos_token": "<|im_start|>",
        "eos_token": "<end_of_utterance>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
    }
    _write(directory, "special_tokens_map.json", specials)
    _write(
        directory,
        "tokenizer_config.json",
        {
            "added_tokens_decoder": {
                str(i): {
                    "content": t,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                }
                for t, i in ids.items()
            },
            **specials,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 8192,
            "processor_class": "Idefics3Processor",
            "tokenizer_class": "GPT2Tokenizer",
        },
    )
    return ids


def _smolvlm_256m(directory: Path) -> None:
    ids = _smol_tokenizer(directory)
    vocab = SMOL_BASE_VOCAB + len(SMOL_ADDED)
    _write(
        directory,
        "generation_config.json",
        {
            "_from_model_config": True,
            "bos_token_id": ids["<|im_start|>"],
            "eos_token_id": ids["<end_of_utterance>"],
            "pad_token_id": ids["<|im_end|>"],
            "transformers_version": "4.46.0",
        },
    )
    _write(
        directory,
        "preprocessor_config.json",
        {
            "do_convert_rgb": True,
            "do_image_splitting": True,
            "do_normalize": True,
            "do_pad": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_processor_type": "Idefics3ImageProcessor",
            "image_std": [0.5, 0.5, 0.5],
            "max_image_size": {"longest_edge": 512},
            "processor_class": "Idefics3Processor",
            "resample": 1,
            "rescale_factor": 0.00392156862745098,
            "size": {"longest_edge": 2048},
        },
    )
    _write(directory, "processor_config.json", {"image_seq_len": 64, "processor_class": "Idefics3Processor"})
    _write(directory, "chat_template.json", {"chat_template": SMOL_TEMPLATE})
    text = {**SMOL_TEXT, "pad_token_id": ids["<|im_end|>"], "vocab_size": vocab}
    config = {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "image_token_id": ids["<image>"],
        "model_type": "idefics3",
        "scale_factor": 4,
        "text_config": text,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
        "use_cache": True,
        "vision_config": SMOL_VISION,
        "vocab_size": vocab,
    }
    _save_random_weights(directory, config, seed=1)


def build_checkpoint(name: str, directory: str | Path) -> Path:
    """Write the real-size checkpoint ``name`` (one of ``REAL_SIZES``) into ``directory`` once:
    a directory that already holds a complete one (``.complete``) is reused."""
    if name not in REAL_SIZES:
        raise ValueError(f"unknown real size {name!r}; choose from {', '.join(REAL_SIZES)}")
    directory = Path(directory)
    if (directory / ".complete").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    (_qwen2_vl_2b if name == QWEN2_VL_2B else _smolvlm_256m)(directory)
    (directory / ".complete").write_text(name + "\n")
    return directory


def photo_image(width: int = 500, height: int = 375, seed: int = 0) -> Image.Image:
    """A photograph-like RGB image made here: sky gradient, sun, hills, a lake, trees, noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.zeros((height, width, 3), dtype=np.float32)
    t = (y / height)[..., None]
    img[:] = (1 - t) * np.array([70, 120, 200]) + t * np.array([200, 220, 240])  # sky, darker at the top
    sun = np.exp(-((x - 0.75 * width) ** 2 + (y - 0.2 * height) ** 2) / (2 * (0.05 * width) ** 2))
    img += sun[..., None] * np.array([255, 230, 150]) * 0.9
    for k, (base, amp, colour) in enumerate(((0.55, 0.08, (90, 120, 80)), (0.65, 0.06, (60, 100, 50)))):
        ridge = height * (
            base + amp * np.sin(x / width * (3 + 2 * k) * np.pi + k) + 0.02 * rng.standard_normal()
        )
        img[y > ridge] = colour
    lake = (y > 0.78 * height) & (np.abs(x - 0.4 * width) < 0.3 * width * (1 - (y / height - 0.78) * 2))
    img[lake] = img[lake] * 0.3 + np.array([40, 80, 140]) * 0.7
    for _ in range(14):  # trees: dark trunks and round crowns
        cx, cy, r = rng.uniform(0, width), rng.uniform(0.62, 0.8) * height, rng.uniform(8, 20)
        img[(np.abs(x - cx) < r / 5) & (y > cy) & (y < cy + 2 * r)] = (70, 50, 30)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = np.array((30, 80, 30)) + rng.uniform(-15, 15, 3)
    img += rng.normal(0, 6, img.shape)  # sensor noise
    out = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    return out.filter(ImageFilter.GaussianBlur(0.8))
