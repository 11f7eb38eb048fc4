"""Token texts: an exact spelling per output token, and a visible label per token.

A token's text has two jobs that one string cannot do at once. Take "中" (U+4E2D), which a
SentencePiece tokenizer with byte fallback writes as three tokens ``<0xE4> <0xB8> <0xAD>``:
the output text holds one character, yet a tree node showing the first token must show
*something*. So a ``TokenTexts`` gives two views:

**Label** (``label(token)``): the token on its own as it reads inside a text, for tree
nodes, memory rows and aliasing views. The leading space is kept (``" world"`` for both
SentencePiece ``▁world`` and byte-level ``Ġworld``), special tokens read as their name
(``"</s>"``, ``"<|im_end|>"``), and bytes that are not a whole character are shown as
``<0xE4>`` (byte-fallback pieces by their own name, byte-level pieces byte by byte:
``" <0xF0><0x9F><0x98>"`` is the first half of an emoji); an id past the tokenizer's
vocabulary (the padding rows of a model's embedding) reads ``[151700]`` and spells ``""``.

**Spelling** (``spell(ids)``): what each output token adds to the output text, so that
``"".join(spell(ids))`` *is* the text (``Generation.text``, ``DecodeTrace.text``):

* a text token adds its label, except the first one, which adds what the tokenizer's
  decoder makes of it at the start of a text (SentencePiece strips that leading space);
* a byte token (``<0xNN>``, or any byte-level piece) adds the characters its bytes
  complete: the pieces of "中" spell ``"", "", "中"``; bytes that never form a character
  spell U+FFFD (Python's UTF-8 "replace" rule, unfinished ones at the end included);
* a special token the decode skips (EOS) adds ``""``.

This equals ``tokenizer.decode(ids, skip_special_tokens=True)`` for byte-level BPE (Qwen) and
for SentencePiece (LLaVA) whenever the output's bytes are valid UTF-8 (tested with Chinese
and emoji on the real tokenizers). On invalid bytes the two differ on purpose: SentencePiece's
byte-fallback decoder turns a whole run of byte tokens into U+FFFD when any of it is invalid,
so a later byte would rewrite characters already shown; the spelling replaces only the
invalid bytes and never changes text it has spelled.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import Any

REPLACEMENT = "\ufffd"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character a byte-level piece uses -> its byte."""
    bytes_ = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
              *range(ord("®"), ord("ÿ") + 1)]
    chars = bytes_[:]
    extra = 0
    for b in range(256):
        if b not in bytes_:
            bytes_.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(bytes_, chars)}


#: Read-only table (never mutated): byte-level piece character -> byte.
BYTE_OF_CHAR: dict[str, int] = _byte_level_alphabet()


def render_bytes(raw: bytes) -> str:
    """Bytes as text: whole UTF-8 characters as themselves, any other byte as ``<0xNN>``."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        for width in (1, 2, 3, 4):
            try:
                out.append(raw[i : i + width].decode("utf-8"))
            except UnicodeDecodeError:
                continue
            i += width
            break
        else:
            out.append(f"<0x{raw[i]:02X}>")
            i += 1
    return "".join(out)


class TokenTexts:
    """Labels and spellings of one tokenizer's tokens (memoised per token; see the module doc).

    The memo dicts are pure caches of functions of the tokenizer, so sharing one
    ``TokenTexts`` between concurrent requests is safe.
    """

    def __init__(self, tokenizer: Any) -> None:
        from tokenizers import decoders

        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.byte_level = isinstance(getattr(backend, "decoder", None), decoders.ByteLevel)
        self.added = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {}) or {}}
        self._labels: dict[int, str] = {}
        self._kinds: dict[int, tuple[str, bytes | str]] = {}
        # A SentencePiece decoder strips one leading space of a text: its byte piece for a space
        # decodes to "" alone. Byte-level BPE keeps it.
        space = tokenizer.convert_tokens_to_ids("<0x20>") if not self.byte_level else None
        unk = getattr(tokenizer, "unk_token_id", None)
        self.strips_leading_space = (
            isinstance(space, int) and space != unk and self._decode([space], False) == ""
        )

    def _decode(self, ids: list[int], skip: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip)

    def _mid_text(self, token: int) -> str:
        """The token's text inside a text: the second of two copies (a SentencePiece decoder
        strips the leading space of a text's first token only)."""
        single = self._decode([token], False)
        double = self._decode([token, token], False)
        return double[len(single) :] if len(double) > len(single) and double.startswith(single) else single

    def _bytes(self, token: int) -> bytes | None:
        """The raw bytes of a byte token (``<0xNN>``, any byte-level piece); None for text tokens."""
        if token in self.added:
            return None
        piece = self.tokenizer.convert_ids_to_tokens(token)
        if not isinstance(piece, str):
            return None
        match = _BYTE_PIECE.fullmatch(piece)
        if match:
            return bytes([int(match.group(1), 16)])
        if self.byte_level and piece and all(c in BYTE_OF_CHAR for c in piece):
            return bytes(BYTE_OF_CHAR[c] for c in piece)
        return None

    def _kind(self, token: int) -> tuple[str, bytes | str]:
        """("skip", "") | ("bytes", raw) | ("text", mid-text form), memoised."""
        kind = self._kinds.get(token)
        if kind is None:
            raw = self._bytes(token)
            if raw is not None:
                kind = ("bytes", raw)
            elif self._decode([token], True) == "" and self._decode([token], False) != "":
                kind = ("skip", "")
            else:
                kind = ("text", self._mid_text(token))
            self._kinds[token] = kind
        return kind

    def label(self, token: int) -> str:
        """The visible label of one token."""
        text = self._labels.get(token)
        if text is None:
            text = self._mid_text(token)
            if text == "" and self.tokenizer.convert_ids_to_tokens(token) is None:
                text = f"[{token}]"  # an id past the tokenizer's vocabulary (padding rows of the embedding)
            elif REPLACEMENT in text:
                raw = self._bytes(token)
                piece = self.tokenizer.convert_ids_to_tokens(token)
                if raw is not None and isinstance(piece, str) and _BYTE_PIECE.fullmatch(piece):
                    text = piece
                elif raw is not None:
                    text = render_bytes(raw)
            self._labels[token] = text
        return text

    def spell(self, ids: Sequence[int]) -> list[str]:
        """What every token of ``ids`` adds to the output text; the join is the text."""
        speller = Speller(self)
        speller.extend(ids)
        return speller.texts

    def text(self, ids: Sequence[int]) -> str:
        """The output text of ``ids``: the join of their spellings."""
        return "".join(self.spell(ids))


class Speller:
    """``TokenTexts.spell`` grown token by token, for an output that grows (the engine's trace).

    After ``extend(a)`` then ``extend(b)``, ``texts`` equals ``spell(a + b)`` and ``text`` its
    join, at the cost of the new tokens only. Every token's spelling is settled once the next
    token is read, except one tail: bytes still unfinished at the end, which ``spell`` closes
    on the last token (U+FFFD). That close is all that is redone: the last token's settled
    spelling is kept apart and its close recomputed on each ``extend``.
    """

    def __init__(self, texts: TokenTexts) -> None:
        self._texts = texts
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")  # holds a character's unfinished bytes
        self._at_start = True  # no token has produced text yet: SentencePiece strips this one's space
        self._last = ""  # the last token's spelling before the close
        self._settled = ""  # the join of every spelling before the close
        self.texts: list[str] = []
        self.text = ""

    def extend(self, ids: Sequence[int]) -> None:
        """Spell ``ids`` after the tokens already spelled."""
        if not len(ids):
            return
        texts = self.texts
        if texts:
            texts[-1] = self._last  # reopen the last token: more bytes may finish its character
        new = [self._next(int(token)) for token in ids]
        texts.extend(new)
        self._last = new[-1]
        self._settled += "".join(new)
        close = self._close()
        texts[-1] = self._last + close
        self.text = self._settled + close

    def _next(self, token: int) -> str:
        """What ``token`` adds after the tokens read so far (the end's close aside)."""
        kind, value = self._texts._kind(token)
        if kind == "skip":
            return ""
        utf8 = self._utf8
        if kind == "bytes":
            assert isinstance(value, bytes)
            text = utf8.decode(value)
            if self._at_start and text.startswith(" ") and self._texts.strips_leading_space:
                text = text[1:]  # as the decoder does to a text's first space
        else:
            # A text token ends any unfinished character before it (one U+FFFD for it).
            flushed = utf8.decode(b"", final=True)
            utf8.reset()
            text = flushed + (self._texts._decode([token], True) if self._at_start else str(value))
        self._at_start = False
        return text

    def _close(self) -> str:
        """The bytes still unfinished at the end, as ``decode(b"", final=True)`` would spell them,
        without ending the decoder (the next token may finish them)."""
        pending = self._utf8.getstate()[0]
        return codecs.utf_8_decode(pending, "replace", True)[0] if pending else ""
