"""JSON text read strictly: the parse that every uploaded RECAP file goes through, and its error.

``parse_json`` is ``json.loads`` that raises only ``SchemaError`` (never ``RecursionError``,
``JSONDecodeError`` or ``ValueError``) and turns what Python's ``json`` would silently accept
(``NaN``, ``Infinity``, ``1e400`` -> inf, 5000-digit integers) into ``BadNumber`` markers, so
that the typed check of the parsed value (``recap.core.schema``) or a file reader's own checks
(``recap.memory.file``) can name the field that holds them. ``describe`` renders any parsed
value the way a visitor would recognise it in their file, for those messages.

A ``SchemaError``'s text starts with the path of the field it is about, filled in while the
check unwinds: ``steps[3].nodes[7].parent: expected an integer, got the string '0'``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

#: Integers written with more digits than this are refused while parsing (Python would
#: otherwise spend quadratic time on them, or raise past 4300 digits).
MAX_INT_DIGITS = 18


class SchemaError(ValueError):
    """A value that does not fit its field; ``path`` is filled in while unwinding."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str | int] = []  # innermost key first (appended on the way out)

    def __str__(self) -> str:
        where = format_path(reversed(self.path))
        return f"{where}: {self.message}" if where else self.message


def format_path(keys: Any) -> str:
    """``["steps", 3, "nodes"]`` -> ``steps[3].nodes``."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


@dataclass(frozen=True)
class BadNumber:
    """A number JSON can write but a RECAP file never holds, as written: NaN, Infinity, 1e400."""

    text: str


def _parse_int(text: str) -> int | BadNumber:
    return BadNumber(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def _parse_float(text: str) -> float | BadNumber:
    value = float(text)
    return value if math.isfinite(value) else BadNumber(text)


def parse_json(text: str) -> Any:
    """``json.loads`` that never raises anything but ``SchemaError`` and marks bad numbers."""
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=BadNumber)
    except RecursionError:
        raise SchemaError(
            "the JSON is nested too deeply (hundreds of levels); a RECAP file nests a few"
        ) from None
    except json.JSONDecodeError as exc:
        raise SchemaError(
            f"not a JSON document ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    except (ValueError, TypeError) as exc:  # e.g. lone surrogates the decoder refuses
        raise SchemaError(f"not a JSON document ({exc})") from None


def describe(value: Any) -> str:
    """A value as a visitor would recognise it in their file (short)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BadNumber):
        if value.text in ("NaN", "Infinity", "-Infinity"):
            return value.text
        digits = len(value.text.lstrip("-"))
        shown = value.text if digits <= 24 else f"a {digits}-digit number"
        return f"{shown} (too large)"
    if isinstance(value, int):
        return f"the integer {value}" if abs(value) < 10**24 else "an integer too large to use"
    if isinstance(value, float):
        return f"the number {value!r}" if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return f"the string {value[:40]!r}" + ("…" if len(value) > 40 else "")
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} entries"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: JSON's ``"\\ud800"`` escape decodes to a lone
    surrogate, which no UTF-8 response (the app's figures, its API) can carry."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
