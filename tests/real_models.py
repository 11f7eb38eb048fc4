"""Checkpoints laid out exactly as real ones ship, with tiny random weights.

``build_all(root)`` writes four checkpoint directories from the real non-weight files in
``tests/fixtures/realfiles`` (see its README): the real tokenizer, chat template,
processor / preprocessor config and generation config, and the real model config with
layers and widths shrunk (``vocab_size`` and every special / image token id kept).

* ``qwen2-vl-2b-instruct``: Qwen/Qwen2-VL-2B-Instruct as shipped (legacy flat config.json,
  template in tokenizer_config.json and chat_template.json, vocab.json + merges.txt +
  tokenizer.json, no processor_config.json).
* ``llava-1.5-7b-hf``: llava-hf/llava-1.5-7b-hf as shipped (336-pixel CLIP geometry kept).
* ``qwen2.5-vl-7b-instruct``: Qwen/Qwen2.5-VL-7B-Instruct's files as its model card ships
  them: preprocessor_config.json naming ``Qwen2_5_VLImageProcessor`` / ``Qwen2_5_VLProcessor``,
  generation_config.json with ``repetition_penalty: 1.05`` and two EOS ids; Qwen2 tokenizer
  and the Qwen2-VL chat template.
* ``llava-v1.6-mistral-7b-hf``: a LLaVA-NeXT (Mistral) snapshot saved before processors had a
  processor_config.json: none here, the chat template in tokenizer_config.json (LLaVA
  tokenizer files; vision geometry shrunk to 56-pixel tiles so tests stay fast).

The weights are random (seeded). The Qwen2.5-VL head leans towards repeating the input
token, so that its shipped ``repetition_penalty: 1.05`` changes greedy output within a few
tokens, as on the real model (a test checks that it does); Qwen2-VL-2B's text layers are
scaled up so that its tied embeddings do not make it repeat one token forever. The embeddings of
the 151k / 32k vocabularies stay small because the hidden size is 32.
"""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path
from typing import Any

import torch

FILES = Path(__file__).resolve().parent / "fixtures" / "realfiles"
QWEN2_VL = "qwen2-vl-2b-instruct"
LLAVA = "llava-1.5-7b-hf"
QWEN2_5_VL = "qwen2.5-vl-7b-instruct"
LLAVA_NEXT = "llava-v1.6-mistral-7b-hf"
NAMES = (QWEN2_VL, LLAVA, QWEN2_5_VL, LLAVA_NEXT)

#: The Qwen2.5-VL-7B-Instruct files as its README describes them (../shared/realfiles/README.md).
QWEN2_5_VL_GENERATION = {
    "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
    "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1,
    "transformers_version": "4.49.0",
}
QWEN2_5_VL_CONFIG = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
    "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944,
    "max_position_embeddings": 128000, "max_window_layers": 28, "model_type": "qwen2_5_vl",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.41.2", "use_cache": True,
    "use_sliding_window": False,
    "vision_config": {
        "depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
        "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
        "spatial_patch_size": 14, "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2, "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 152064,
}
#: llava-hf/llava-v1.6-mistral-7b-hf's config.json, geometry shrunk (56-pixel tiles).
LLAVA_NEXT_CONFIG = {
    "architectures": ["LlavaNextForConditionalGeneration"], "ignore_index": -100,
    "image_grid_pinpoints": [[56, 112], [112, 56], [112, 112]], "image_token_index": 32000,
    "model_type": "llava_next", "projector_hidden_act": "gelu",
    "text_config": {
        "_name_or_path": "mistralai/Mistral-7B-Instruct-v0.2", "architectures": ["MistralForCausalLM"],
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
        "torch_dtype": "bfloat16", "vocab_size": 32064,
    },
    "torch_dtype": "float16", "transformers_version": "4.39.0.dev0", "use_image_newline_parameter": True,
    "vision_config": {
        "hidden_size": 1024, "image_size": 56, "intermediate_size": 4096, "model_type": "clip_vision_model",
        "num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768,
        "vocab_size": 32000,
    },
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064,
}
LLAVA_NEXT_PREPROCESSOR = {
    "aspect_ratio_setting": "anyres", "crop_size": {"height": 56, "width": 56}, "do_center_crop": True,
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_grid_pinpoints": [[56, 112], [112, 56], [112, 112]],
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "LlavaNextImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711], "processor_class": "LlavaNextProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 56},
}
#: The [INST] template of the LLaVA-NeXT Mistral checkpoints, kept in tokenizer_config.json.
LLAVA_NEXT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + "
    "message['content'][0]['text']"
    " + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' %}{{ '[INST] ' }}{% for content in "
    "message['content'] "
    "| selectattr('type', 'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}{% for content in "
    "message['content'] | "
    "selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}{{' [/INST]' }}{% elif "
    "message['role'] "
    "== 'assistant' %}{{ message['content'][0]['text'] + '</s>'}}{% endif %}{% endfor %}"
)

# Shrunk widths: enough to run, small enough that a 152k-row embedding is ~5M numbers.
QWEN_TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "max_window_layers": 2}
QWEN_MROPE = {"type": "mrope", "mrope_section": [2, 2, 4]}  # head_dim 16: sections sum to 8
LLAMA_TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1}
CLIP_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
               "projection_dim": 32}


def read(rel: str) -> Any:
    return json.loads((FILES / rel).read_text(encoding="utf-8"))


def write(directory: Path, name: str, data: Any) -> None:
    (directory / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def unpack(rel: str, dest: Path) -> None:
    """Copy a fixture file, decompressing ``.xz`` (the big tokenizer files are kept compressed)."""
    src = FILES / rel
    if src.suffix == ".xz":
        dest.write_bytes(lzma.decompress(src.read_bytes()))
    else:
        shutil.copyfile(src, dest)


def _save_weights(
    directory: Path, config_json: dict[str, Any], seed: int, head_leans_to_repeat: float = 0.0,
    layer_scale: float = 1.0,
) -> None:
    """Random weights for ``config_json`` (written first, as shipped), saved next to it.

    The model is built from the config exactly as ``from_pretrained`` reads it; its own
    ``save_pretrained`` would rewrite config.json / generation_config.json in today's layout,
    so the shipped files are written back afterwards.
    """
    from transformers import AutoConfig, AutoModelForImageTextToText

    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix == ".json"}
    write(directory, "config.json", config_json)
    config = AutoConfig.from_pretrained(directory)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    if head_leans_to_repeat:
        # An untied output head that partly copies the input embeddings: the model tends to
        # repeat tokens, with margins small enough that a repetition penalty changes its choice.
        with torch.no_grad():
            head = model.get_output_embeddings().weight
            head.copy_(
                torch.randn_like(head) * 0.02 + head_leans_to_repeat * model.get_input_embeddings().weight
            )
    if layer_scale != 1.0:
        # Tied embeddings make a random model repeat its last input token forever; stronger
        # text layers give varied (still repetitive) output that exercises multi-token acceptance.
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if param.dim() == 2 and "language_model.layers" in pname:
                    param.mul_(layer_scale)
    model.save_pretrained(directory)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    write(directory, "config.json", config_json)


def qwen_tokenizer_files(directory: Path, qwen2_tokenizer_json: Path | None) -> Path:
    """vocab.json + merges.txt (+ tokenizer.json built from them once) and the Qwen2-VL tokenizer config."""
    unpack("qwen2-bpe/vocab.json.xz", directory / "vocab.json")
    unpack("qwen2-bpe/merges.txt.xz", directory / "merges.txt")
    unpack(f"{QWEN2_VL}/tokenizer_config.json", directory / "tokenizer_config.json")
    unpack(f"{QWEN2_VL}/chat_template.json", directory / "chat_template.json")
    if qwen2_tokenizer_json is None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(directory)  # Qwen2Tokenizer from vocab.json + merges.txt
        tok.backend_tokenizer.save(str(directory / "tokenizer.json"))
        return directory / "tokenizer.json"
    shutil.copyfile(qwen2_tokenizer_json, directory / "tokenizer.json")
    return qwen2_tokenizer_json


def llava_tokenizer_files(directory: Path) -> None:
    for name in ("added_tokens.json", "special_tokens_map.json", "tokenizer_config.json"):
        unpack(f"{LLAVA}/{name}", directory / name)
    unpack(f"{LLAVA}/tokenizer.json.xz", directory / "tokenizer.json")
    unpack(f"{LLAVA}/tokenizer.model.xz", directory / "tokenizer.model")


def build_qwen2_vl(directory: Path, tokenizer_json: Path | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    qwen_tokenizer_files(directory, tokenizer_json)
    unpack(f"{QWEN2_VL}/preprocessor_config.json", directory / "preprocessor_config.json")
    unpack(f"{QWEN2_VL}/generation_config.json", directory / "generation_config.json")
    config = read(f"{QWEN2_VL}/config.json")
    config.update(QWEN_TEXT, rope_scaling=QWEN_MROPE)
    config["vision_config"].update(depth=2, embed_dim=32, hidden_size=32, mlp_ratio=2, num_heads=2)
    _save_weights(directory, config, seed=0, layer_scale=5.0)
    return directory


def build_qwen2_5_vl(directory: Path, tokenizer_json: Path | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    qwen_tokenizer_files(directory, tokenizer_json)
    preprocessor = read(f"{QWEN2_VL}/preprocessor_config.json")
    preprocessor.update(image_processor_type="Qwen2_5_VLImageProcessor",
                        processor_class="Qwen2_5_VLProcessor")
    write(directory, "preprocessor_config.json", preprocessor)
    write(directory, "generation_config.json", QWEN2_5_VL_GENERATION)
    config = json.loads(json.dumps(QWEN2_5_VL_CONFIG))
    config.update(QWEN_TEXT, rope_scaling=QWEN_MROPE)
    config["vision_config"].update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                   out_hidden_size=32, fullatt_block_indexes=[1])
    _save_weights(directory, config, seed=1, head_leans_to_repeat=0.4)
    return directory


def build_llava(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    llava_tokenizer_files(directory)
    for name in (
        "chat_template.jinja", "chat_template.json", "preprocessor_config.json", "processor_config.json",
        "generation_config.json",
    ):
        unpack(f"{LLAVA}/{name}", directory / name)
    config = read(f"{LLAVA}/config.json")
    config["text_config"].update(LLAMA_TEXT)
    config["vision_config"].update(CLIP_VISION)
    _save_weights(directory, config, seed=2)
    return directory


def build_llava_next(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    llava_tokenizer_files(directory)
    tok_config = read(f"{LLAVA}/tokenizer_config.json")
    tok_config.update(chat_template=LLAVA_NEXT_TEMPLATE, processor_class="LlavaNextProcessor")
    write(directory, "tokenizer_config.json", tok_config)
    write(directory, "preprocessor_config.json", LLAVA_NEXT_PREPROCESSOR)
    unpack(f"{LLAVA}/generation_config.json", directory / "generation_config.json")
    config = json.loads(json.dumps(LLAVA_NEXT_CONFIG))
    config["text_config"].update(LLAMA_TEXT)
    config["vision_config"].update(CLIP_VISION)
    _save_weights(directory, config, seed=3)
    return directory


def build_all(root: Path) -> dict[str, Path]:
    """All four checkpoints under ``root`` (the Qwen2 tokenizer.json is built once)."""
    root.mkdir(parents=True, exist_ok=True)
    dirs = {QWEN2_VL: build_qwen2_vl(root / QWEN2_VL)}
    tokenizer_json = dirs[QWEN2_VL] / "tokenizer.json"
    dirs[QWEN2_5_VL] = build_qwen2_5_vl(root / QWEN2_5_VL, tokenizer_json)
    dirs[LLAVA] = build_llava(root / LLAVA)
    dirs[LLAVA_NEXT] = build_llava_next(root / LLAVA_NEXT)
    return dirs
