"""Token texts on the real tokenizers: labels read as text, spellings join to the output exactly.

Qwen2's byte-level BPE (``Ġ`` for a space, bytes as characters) and LLaVA's SentencePiece
(``▁`` for a space, ``<0xNN>`` byte fallback), with Chinese and emoji.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_models import LLAVA, llava_tokenizer_files, qwen_tokenizer_files

from recap.models.tokens import TokenTexts, render_bytes

KINDS = ("qwen2-bpe", "llava-sentencepiece")
ALPHABET = st.sampled_from(
    ["a", "b", "the", " ", "  ", "\n", ".", ",", "中", "文", "字", "😊", "🎉", "é", "ß", "→", "<", ">"]
)
TEXTS = st.lists(ALPHABET, min_size=1, max_size=24).map("".join)
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


_TOKENIZERS: dict[str, TokenTexts] = {}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TokenTexts]:
    """The two real tokenizers, built once per session (tests/test_hot_path.py imports this fixture)."""
    from transformers import AutoTokenizer

    if not _TOKENIZERS:
        qwen, llava = tmp_path_factory.mktemp("qwen-tok"), tmp_path_factory.mktemp("llava-tok")
        qwen_tokenizer_files(qwen, None)
        llava_tokenizer_files(llava)
        _TOKENIZERS.update({
                               KINDS[0]: TokenTexts(AutoTokenizer.from_pretrained(qwen)),
                               KINDS[1]: TokenTexts(AutoTokenizer.from_pretrained(llava)),
                           })
    return _TOKENIZERS


def encode(texts: TokenTexts, text: str) -> list[int]:
    return texts.tokenizer(text, add_special_tokens=False)["input_ids"]


def decode(texts: TokenTexts, ids: list[int]) -> str:
    return texts.tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("kind", KINDS)
def test_labels_keep_the_leading_space_and_show_no_space_marker(tokenizers, kind: str) -> None:
    texts = tokenizers[kind]
    [world] = encode(texts, "Hello world")[-1:]
    assert texts.label(world) == " world"
    labels = [texts.label(t) for t in encode(texts, "The cat sat on the mat, and 中文 too.")]
    assert not any("▁" in s or "Ġ" in s for s in labels), labels
    assert " cat" in labels and " sat" in labels


def test_sentencepiece_byte_fallback_pieces_are_labelled_by_their_bytes(tokenizers) -> None:
    texts = tokenizers[KINDS[1]]
    ids = encode(texts, "x😊")[-4:]
    assert [texts.label(t) for t in ids] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x8A>"]
    assert texts.spell(ids) == ["", "", "", "😊"]  # the token completing the character spells it


def test_byte_level_partial_characters_are_labelled_byte_by_byte(tokenizers) -> None:
    texts = tokenizers[KINDS[0]]
    ids = encode(texts, "x 😊")[1:]
    assert [texts.label(t) for t in ids] == [" <0xF0><0x9F><0x98>", "<0x8A>"]
    assert texts.spell(ids) == [" ", "😊"]  # the space is whole at once; the emoji when its last byte comes


def test_ids_past_the_vocabulary_are_labelled_by_number_and_spell_nothing(tokenizers) -> None:
    texts = tokenizers[KINDS[0]]  # Qwen2.5-VL's embedding has 152064 rows, its tokenizer 151657 tokens
    assert texts.label(151700) == "[151700]"
    ids = [*encode(texts, "Hi"), 151700, *encode(texts, " there")]
    assert "".join(texts.spell(ids)) == "Hi there" == decode(texts, ids)


def test_render_bytes_shows_whole_characters_and_stray_bytes() -> None:
    assert render_bytes(" 中".encode()) == " 中"
    assert render_bytes(b"a\xe4\xb8") == "a<0xE4><0xB8>"


@pytest.mark.parametrize(("kind", "eos"), [(KINDS[0], "<|im_end|>"), (KINDS[1], "</s>")])
def test_special_tokens_are_labelled_by_name_and_spell_nothing(tokenizers, kind: str, eos: str) -> None:
    texts = tokenizers[kind]
    eos_id = texts.tokenizer.convert_tokens_to_ids(eos)
    assert texts.label(eos_id) == eos
    ids = [*encode(texts, "Hi there"), eos_id]
    assert texts.spell(ids)[-1] == ""


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(text=TEXTS)
def test_spellings_join_to_the_decoded_text(tokenizers, kind: str, text: str) -> None:
    texts = tokenizers[kind]
    eos = texts.tokenizer.eos_token_id
    ids = [*encode(texts, text), eos]
    spelled = texts.spell(ids)
    assert len(spelled) == len(ids)
    assert "".join(spelled) == decode(texts, ids) == texts.text(ids)
    if kind == KINDS[0]:
        assert "".join(spelled) == text  # byte-level BPE is lossless


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(text=TEXTS, data=st.data())
def test_a_spelling_never_changes_once_a_later_token_is_spelled(
    tokenizers, kind: str, text: str, data
) -> None:
    """What the app has shown of a stream stays true as the stream grows."""
    texts = tokenizers[kind]
    ids = encode(texts, text)
    k = data.draw(st.integers(1, len(ids)))
    assert texts.spell(ids[:k])[: k - 1] == texts.spell(ids)[: k - 1]


@SETTINGS
@given(ids=st.lists(st.integers(0, 151642), min_size=1, max_size=16))
def test_any_byte_level_output_spells_its_decode(tokenizers, ids: list[int]) -> None:
    texts = tokenizers[KINDS[0]]
    assert "".join(texts.spell(ids)) == decode(texts, ids)


@SETTINGS
@given(ids=st.lists(st.integers(3, 400), min_size=1, max_size=16))
def test_sentencepiece_output_spells_its_decode_where_its_bytes_are_valid(tokenizers, ids: list[int]) -> None:
    """Ids 3-258 are byte pieces: runs of them are often invalid UTF-8. Where they are, the decoder
    turns the whole run into U+FFFD and the spelling replaces only the invalid bytes."""
    texts = tokenizers[KINDS[1]]
    spelled, decoded = "".join(texts.spell(ids)), decode(texts, ids)
    if "\ufffd" not in decoded:
        assert spelled == decoded
    else:
        assert spelled.count("\ufffd") <= decoded.count("\ufffd")


def test_an_unfinished_character_at_the_end_spells_one_replacement(tokenizers) -> None:
    texts = tokenizers[KINDS[1]]
    ids = encode(texts, "x😊")[-4:]
    assert texts.spell(ids[:2]) == ["", "\ufffd"]


def test_engine_traces_spell_the_output_and_label_nodes_as_text(load_real) -> None:
    from test_lossless import make_image

    import recap

    target = load_real(LLAVA)
    out = recap.generate(target, make_image(3), "Describe the picture.", method="recap", max_new_tokens=24,
                         trace=True)
    trace = out.trace
    assert "".join(trace.token_texts) == trace.text == out.text
    assert (trace.text == target.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            or "\ufffd" in trace.text)
    labels = [node.text for step in trace.steps for node in step.nodes]
    assert labels and not any("▁" in s for s in labels)
    assert any(s.startswith(" ") and s.strip() for s in labels), "no label kept its leading space"
    assert all(node.text == target.token_text(node.token) for step in trace.steps for node in step.nodes)
