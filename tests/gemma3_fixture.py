"""A tiny random-weight Gemma 3 checkpoint, laid out as google/gemma-3-4b-it ships its files.

No Gemma file is available offline (no hub, no vendored copy), so everything non-weight is
written here in the real files' format, with the values the model card's files hold where
they matter and a small vocabulary:

* ``tokenizer.json``: a Gemma-style tokenizer built with the ``tokenizers`` library: BPE over
  ``▁``-joined text (the normalizer turns spaces into ``▁``, no dummy prefix), byte fallback
  (``<0x00>`` .. ``<0xFF>``), the decoder ``▁ -> " "``, ByteFallback, Fuse, as transformers'
  ``GemmaTokenizer`` builds it. Gemma's control tokens keep Gemma's first ids (``<pad>`` 0,
  ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, ``<mask>`` 4) and names (``<start_of_turn>``,
  ``<end_of_turn>``, ``<start_of_image>``, ``<end_of_image>``); ``<image_soft_token>`` is the
  last entry, as 262144 is in the real vocabulary, and ``vocab_size`` leaves padding rows
  after it (262208 in the real config). The real checkpoint also ships the SentencePiece
  ``tokenizer.model``; it is not written here (building one needs the ``sentencepiece``
  package, which is not installed), and transformers reads ``tokenizer.json`` first.
* ``tokenizer_config.json`` (``GemmaTokenizer``, ``add_bos_token``, the image tokens as
  ``extra_special_tokens``), ``special_tokens_map.json``, ``added_tokens.json``;
* ``chat_template.json``: Gemma 3's template verbatim (``{{ bos_token }}``, ``<start_of_turn>``
  turns, the assistant as ``model``, an image as ``<start_of_image>``, texts trimmed);
* ``preprocessor_config.json`` naming ``Gemma3ImageProcessor`` (a class that needs torchvision:
  the family builds the PIL one), ``processor_config.json`` with ``image_seq_length``;
* ``generation_config.json`` as shipped: ``do_sample: true, top_k: 64, top_p: 0.95``,
  ``cache_implementation: "hybrid"``, EOS ``[<eos>, <end_of_turn>]``;
* ``config.json`` in the 4b-it layout (``sliding_window``, ``rope_scaling`` linear 8 for the
  global layers, the legacy ``sliding_window_pattern``), shrunk: a few layers, a few-token
  sliding window (``SLIDING_WINDOW``) that every prompt outgrows, 56-pixel images pooled to
  ``MM_TOKENS`` soft tokens.

``checkpoint(directory)`` writes that directory; ``tiny(...)`` is the ``tests/tiny_models.py``
builder (the same tokenizer, model and processor, saved by ``save_pretrained``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch

SLIDING_WINDOW = 4  # tokens: shorter than any prompt (a text-only turn is ~12 tokens), and than deep trees
MM_TOKENS = 4  # soft tokens per image: 56 / 14 = 4 x 4 patches pooled 2 x 2
IMAGE_SIZE = 56
#: Gemma's control tokens, Gemma's first ids first (pad 0, eos 1, bos 2, unk 3, mask 4).
LOW_SPECIALS = [
    "<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]", "<start_of_turn>", "<end_of_turn>",
]
IMAGE_SPECIALS = ["<start_of_image>", "<end_of_image>"]
IMAGE_TOKEN = "<image_soft_token>"
PADDING_ROWS = 24  # embedding rows past the tokenizer's vocabulary (the real config has 63)
WORDS = (
    "the a an red blue green yellow circle square star is are there one two three of and on in at top left "
    "right "
    "bottom center describe image what color shape tell me about picture large small many how where this it "
    "user model Describe What Tell The It This There"
).split()
CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,?!:;'\"()-<>/|_[]*#&"

#: google/gemma-3-4b-it's chat template (chat_template.json), verbatim.
CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    '    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n'
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    '        {%- set role = "model" -%}\n'
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)


def _corpus() -> list[str]:
    """Lines of the fixture's words (seeded), the text the BPE merges are learned from."""
    g = torch.Generator().manual_seed(0)
    picks = torch.randint(0, len(WORDS), (400, 8), generator=g).tolist()
    return [" ".join(WORDS[i] for i in row) for row in picks] + ["user\nmodel\n", *WORDS]


@functools.lru_cache(maxsize=1)
def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Specials (Gemma's ids), the 256 byte pieces, then BPE pieces learned over ``_corpus`` with
    SentencePiece's word boundaries (``▁`` starts a word), the image tokens last."""
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers.models import BPE

    learner = Tokenizer(BPE(unk_token="<unk>"))
    learner.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    learner.train_from_iterator(_corpus(),
                                trainers.BpeTrainer(vocab_size=420, show_progress=False,
                                                    initial_alphabet=[*CHARS, "▁", "\n"],
                                                    special_tokens=["<unk>"]))
    learned = json.loads(learner.to_str())["model"]
    vocab: dict[str, int] = {}
    pieces = sorted(learned["vocab"], key=learned["vocab"].get)
    for token in [*LOW_SPECIALS, *(f"<0x{b:02X}>" for b in range(256)), *pieces]:
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    vocab.setdefault("\n\n",
                     len(vocab))  # one token in Gemma's vocabulary: the processor wraps each image in it
    merges.append(("\n", "\n"))
    for token in [*IMAGE_SPECIALS, IMAGE_TOKEN]:
        vocab[token] = len(vocab)
    return vocab, merges  # type: ignore[return-value]


def tokenizer_json() -> str:
    """The Gemma-style ``tokenizer.json`` (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = _vocab_and_merges()
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", vocab["<bos>"])])
    tok.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t in [*LOW_SPECIALS, *IMAGE_SPECIALS, IMAGE_TOKEN]]
    )
    return tok.to_str()


def token_ids() -> dict[str, int]:
    """The control tokens' ids."""
    vocab, _ = _vocab_and_merges()
    return {t: vocab[t] for t in [*LOW_SPECIALS, *IMAGE_SPECIALS, IMAGE_TOKEN]}


def vocab_size() -> int:
    """The model's embedding rows: the tokenizer's vocabulary plus padding rows."""
    return len(_vocab_and_merges()[0]) + PADDING_ROWS


def tokenizer_files() -> dict[str, Any]:
    """tokenizer_config.json, special_tokens_map.json and added_tokens.json as Gemma 3 ships them."""
    ids = token_ids()
    added = {str(i): {
                 "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True,
             }
             for t, i in ids.items()}
    image_tokens = {
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": IMAGE_TOKEN,
    }
    config = {
        "add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added, "bos_token": "<bos>",
        "clean_up_tokenization_spaces": False, "eos_token": "<eos>", "extra_special_tokens": image_tokens,
        **image_tokens, "model_max_length": 1000000000000000019884624838656, "pad_token": "<pad>",
        "padding_side": "left", "processor_class": "Gemma3Processor", "sp_model_kwargs": None,
        "spaces_between_special_tokens": False, "tokenizer_class": "GemmaTokenizer", "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    special_map = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                   **image_tokens}
    return {"tokenizer_config.json": config, "special_tokens_map.json": special_map,
            "added_tokens.json": {IMAGE_TOKEN: ids[IMAGE_TOKEN]}}


PREPROCESSOR = {
    "do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True,
    "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor",
    "image_seq_length": MM_TOKENS, "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": None,
    "pan_and_scan_min_crop_size": None, "pan_and_scan_min_ratio_to_activate": None,
    "processor_class": "Gemma3Processor", "resample": 2, "rescale_factor": 0.00392156862745098,
    "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
}


def generation_config() -> dict[str, Any]:
    """gemma-3-4b-it's generation_config.json (it samples: top_k 64, top_p 0.95)."""
    ids = token_ids()
    return {"bos_token_id": ids["<bos>"], "cache_implementation": "hybrid", "do_sample": True,
            "eos_token_id": [ids["<eos>"], ids["<end_of_turn>"]], "pad_token_id": ids["<pad>"], "top_k": 64,
            "top_p": 0.95, "transformers_version": "4.50.0.dev0"}


def config_json(sliding_window: int = SLIDING_WINDOW, layers: int = 3, pattern: int = 3) -> dict[str, Any]:
    """config.json in gemma-3-4b-it's layout, shrunk (``pattern``: every pattern-th layer is global)."""
    ids = token_ids()
    return {
        "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": ids["<start_of_image>"],
        "eoi_token_index": ids["<end_of_image>"], "eos_token_id": [ids["<eos>"], ids["<end_of_turn>"]],
        "image_token_index": ids[IMAGE_TOKEN], "initializer_range": 0.02, "mm_tokens_per_image": MM_TOKENS,
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 64, "intermediate_size": 128, "model_type": "gemma3_text",
            "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "query_pre_attn_scalar": 16, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": sliding_window, "sliding_window_pattern": pattern, "vocab_size": vocab_size(),
            "max_position_embeddings": 1024,
        },
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {
            "hidden_size": 32, "image_size": IMAGE_SIZE, "intermediate_size": 64,
            "model_type": "siglip_vision_model", "num_attention_heads": 2, "num_hidden_layers": 2,
            "patch_size": 14, "vision_use_head": False,
        },
    }


def randomize(model: Any, seed: int) -> Any:
    """Seeded weights with the image projection switched on (transformers initialises it to zeros,
    which would make every image look the same to the decoder)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        proj = model.model.multi_modal_projector.mm_input_projection_weight
        proj.normal_(0.0, 1.0)
    return model.eval()


def write(directory: Path, name: str, data: Any) -> None:
    (directory / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def checkpoint(
    directory: str | Path, *, sliding_window: int = SLIDING_WINDOW, seed: int = 0, **config: Any
) -> Path:
    """Write the model-card layout (module docstring) with random weights to ``directory``."""
    from transformers import AutoConfig, Gemma3ForConditionalGeneration

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    shipped = config_json(sliding_window, **config)
    write(directory, "config.json", shipped)
    torch.manual_seed(seed)
    model = randomize(Gemma3ForConditionalGeneration(AutoConfig.from_pretrained(directory)), seed)
    model.save_pretrained(directory)  # rewrites config.json / generation_config.json in today's layout
    files: dict[str, Any] = {
        "config.json": shipped, "generation_config.json": generation_config(),
        "preprocessor_config.json": PREPROCESSOR,
        "processor_config.json": {"image_seq_length": MM_TOKENS, "processor_class": "Gemma3Processor"},
        "chat_template.json": {"chat_template": CHAT_TEMPLATE}, **tokenizer_files(),
    }
    for name, data in files.items():
        write(directory, name, data)
    (directory / "tokenizer.json").write_text(tokenizer_json(), encoding="utf-8")
    return directory


def processor() -> Any:
    """The Gemma 3 processor over the fixture tokenizer, built in memory (``Gemma3ImageProcessorPil``)."""
    import tempfile

    import transformers as tf

    with tempfile.TemporaryDirectory() as tmp:
        for name, data in tokenizer_files().items():
            write(Path(tmp), name, data)
        (Path(tmp) / "tokenizer.json").write_text(tokenizer_json(), encoding="utf-8")
        tok = tf.AutoTokenizer.from_pretrained(tmp)
    settings = {k: v for k, v in PREPROCESSOR.items() if k not in ("image_processor_type", "processor_class")}
    image_proc = tf.Gemma3ImageProcessorPil.from_dict(settings)
    return tf.Gemma3Processor(image_processor=image_proc, tokenizer=tok, chat_template=CHAT_TEMPLATE,
                              image_seq_length=MM_TOKENS)


def tiny(tok: Any, vocab: int, eos: int) -> tuple[Any, Any]:
    """The ``tests/tiny_models.py`` builder: Gemma 3 brings its own tokenizer (the shared word-level
    one lacks Gemma's control tokens), so ``tok``, ``vocab`` and ``eos`` are not used."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    del tok, vocab, eos
    shipped = config_json()
    config = Gemma3Config(
        **{k: v for k, v in shipped.items() if k not in ("architectures", "transformers_version")}
    )
    model = randomize(Gemma3ForConditionalGeneration(config), 0)
    return model, processor()
