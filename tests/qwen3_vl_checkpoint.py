"""A Qwen3-VL checkpoint laid out as Qwen/Qwen3-VL-4B-Instruct ships, on tiny random weights.

``build(directory)`` writes ``tests/fixtures/realfiles/qwen3-vl-4b-instruct``'s files as they
are (its README says where each comes from), the real Qwen2 byte-level BPE (``vocab.json`` +
``merges.txt``, and the ``tokenizer.json`` built from them), and ``config.json`` with layers and
widths shrunk: the vocabulary, every token id, the 16-pixel patches, the interleaved M-RoPE and
three DeepStack layers (one into each decoder layer) kept. Used by tests/test_family_qwen3_vl.py
and tests/test_app_qwen3_vl.py.
"""

from __future__ import annotations

from pathlib import Path

from real_models import _save_weights, read, unpack

NAME = "qwen3-vl-4b-instruct"


def build(directory: Path) -> Path:
    """The checkpoint directory: shipped files as they are, config.json shrunk, random weights."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("chat_template.json", "generation_config.json", "preprocessor_config.json",
                 "video_preprocessor_config.json", "tokenizer_config.json"):
        unpack(f"{NAME}/{name}", directory / name)
    unpack("qwen2-bpe/vocab.json.xz", directory / "vocab.json")
    unpack("qwen2-bpe/merges.txt.xz", directory / "merges.txt")
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(directory).backend_tokenizer.save(str(directory / "tokenizer.json"))
    config = read(f"{NAME}/config.json")
    config["text_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    config["text_config"]["rope_scaling"]["mrope_section"] = [
        4, 2, 2,
    ]  # head_dim 16: 8 frequencies, 24:20:20-like
    config["vision_config"].update(depth=3, hidden_size=32, intermediate_size=64, num_heads=2,
                                   out_hidden_size=32,
                                   deepstack_visual_indexes=[0, 1, 2])  # one feature into each decoder layer
    # Tied embeddings make a random model repeat one token; strong text layers give varied output.
    _save_weights(directory, config, seed=7, layer_scale=10.0)
    return directory
