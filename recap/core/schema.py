"""Typed reading of untrusted JSON into annotated dataclasses (the upload boundary).

A dataclass field's annotation is its schema: ``int``, ``float``, ``str``, ``bool``,
``X | None``, ``list[X]``, ``tuple[X, ...]`` (a JSON list), ``dict[str, X]``, ``Any``
(a small JSON value) or another dataclass, optionally wrapped in
``Annotated[..., marker]`` with the markers below (``Range``, ``MaxLen``, ``OneOf``,
``Matches``, ``VocabId``). ``checker(cls, vocab_size, objects)`` compiles a class's
annotations once into a function that either builds an instance from a JSON object
(``objects=False``: missing optional fields take their defaults, unknown keys are
ignored) or checks an instance built in code (``objects=True``).

Strict by design: no bool where a number goes (JSON ``true`` is not 1), no float where
an integer goes, no string where a number goes, every number finite, every string valid
Unicode and bounded (``MaxLen``, else ``MAX_ANY_CHARS``), every list and object bounded.
The JSON text itself is parsed by ``recap.core.jsontext.parse_json``, which marks the
numbers Python's ``json`` would silently accept (``BadNumber``) so that the check names
the field holding them. A failure raises ``SchemaError`` whose text starts with the
field's path, e.g. ``steps[3].nodes[7].parent: expected an integer, got the string '0'``.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import types
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

from recap.core.jsontext import MAX_INT_DIGITS, BadNumber, SchemaError, describe, is_unicode

#: Largest magnitude of any integer field (int32, like the memory's provenance tensors).
MAX_INT = 2**31 - 1
#: Longest list of a field with no ``MaxLen`` of its own.
MAX_ITEMS = 65_536
#: Free-form values (``Any``): nesting levels, entries per list / object, characters per string.
MAX_ANY_DEPTH = 4
MAX_ANY_ITEMS = 64
MAX_ANY_CHARS = 1024
MAX_NAME_KEY_CHARS = 256


# --------------------------------------------------------------------------- markers


@dataclass(frozen=True)
class Range:
    """Inclusive bounds of a number (None: unbounded); ``tolerance`` absorbs float rounding."""

    lo: float | None = None
    hi: float | None = None
    tolerance: float = 0.0


@dataclass(frozen=True)
class MaxLen:
    """Most characters of a string, or entries of a list / object."""

    n: int


@dataclass(frozen=True)
class OneOf:
    """A string that must be one of these."""

    choices: tuple[str, ...]


@dataclass(frozen=True)
class Matches:
    """A string that ``pattern`` (a regular expression) matches in full; ``rule`` says it in words
    for the error message ("expected {rule}, got ...")."""

    pattern: str
    rule: str


@dataclass(frozen=True)
class VocabId:
    """A token id: 0 <= id < vocab_size (when known), or ``sentinel`` (e.g. -1: "not recorded")."""

    sentinel: int | None = None


# --------------------------------------------------------------------------- checkers


def _key_text(key: Any) -> str:
    return f"{key[:40]!r}" + ("…" if len(key) > 40 else "") if isinstance(key, str) else f"({describe(key)})"

Checker = Callable[[Any], Any]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _bounds_text(rng: Range, kind: str) -> str:
    if rng.lo is not None and rng.hi is not None:
        return f"{kind} from {_num(rng.lo)} to {_num(rng.hi)}"
    if rng.lo is not None:
        return f"{kind} of at least {_num(rng.lo)}"
    return f"{kind} of at most {_num(rng.hi)}"  # type: ignore[arg-type]


def _int_checker(rng: Range | None, token: VocabId | None, vocab_size: int | None) -> Checker:
    if token is not None:
        lo, hi = 0, MAX_INT if vocab_size is None else vocab_size - 1
    else:
        lo = -MAX_INT if rng is None or rng.lo is None else int(rng.lo)
        hi = MAX_INT if rng is None or rng.hi is None else int(rng.hi)
    sentinel = None if token is None else token.sentinel

    def check(v: Any) -> int:
        if type(v) is int and (lo <= v <= hi or v == sentinel):  # the common case, first
            return v
        if type(v) is not int:
            raise SchemaError(f"expected an integer, got {describe(v)}")
        if token is None:
            raise SchemaError(f"expected {_bounds_text(Range(lo, hi), 'an integer')}, got {v}")
        also = "" if sentinel is None else f", or {sentinel}"
        if vocab_size is None:
            raise SchemaError(f"expected a token id (an integer of at least 0{also}), got {v}")
        raise SchemaError(f"token id {v} is outside the vocabulary (0 to {hi}{also})")

    return check


def _float_checker(rng: Range | None) -> Checker:
    # Clamped to the finite floats, so that the fast path also refuses inf (and NaN fails
    # every comparison).
    lo = -sys.float_info.max if rng is None or rng.lo is None else rng.lo - rng.tolerance
    hi = sys.float_info.max if rng is None or rng.hi is None else rng.hi + rng.tolerance

    def check(v: Any) -> float:
        if type(v) is float and lo <= v <= hi:  # the common case, first
            return v
        if type(v) is int and lo <= v <= hi:
            return float(v)
        if type(v) is not float and type(v) is not int:
            kind = "a finite number" if isinstance(v, BadNumber) else "a number"
            raise SchemaError(f"expected {kind}, got {describe(v)}")
        if not math.isfinite(v):
            raise SchemaError(f"expected a finite number, got {describe(v)}")
        raise SchemaError(f"expected {_bounds_text(rng, 'a number')}, got {v!r}")  # type: ignore[arg-type]

    return check


def _str_checker(limit: MaxLen | None, one_of: OneOf | None, matches: Matches | None = None) -> Checker:
    n = MAX_ANY_CHARS if limit is None else limit.n
    choices = None if one_of is None else frozenset(one_of.choices)
    fits = None if matches is None else re.compile(matches.pattern).fullmatch

    def check(v: Any) -> str:
        if (type(v) is str and len(v) <= n and (choices is None or v in choices) and (fits is None or fits(v))
                and is_unicode(v)):  # the common case
            return v
        if type(v) is not str:
            raise SchemaError(f"expected a string, got {describe(v)}")
        if not is_unicode(v):
            raise SchemaError("a string that is not valid Unicode (a lone surrogate escape such as \\ud800)")
        if choices is not None and v not in choices:
            raise SchemaError(f"expected one of {', '.join(map(repr, one_of.choices))}, got {describe(v)}")  # type: ignore[union-attr]
        if fits is not None and not fits(v):
            raise SchemaError(f"expected {matches.rule}, got {describe(v)}")  # type: ignore[union-attr]
        raise SchemaError(f"a string of {len(v)} characters; at most {n} are allowed")

    return check


def _bool(v: Any) -> bool:
    if type(v) is not bool:
        raise SchemaError(f"expected true or false, got {describe(v)}")
    return v


def _any(v: Any, depth: int = 0) -> Any:
    """A small free-form JSON value: scalars, and lists / objects of them a few levels deep."""
    if v is None or type(v) in (bool, str, int, float):
        if type(v) is float and not math.isfinite(v):
            raise SchemaError(f"expected a finite number, got {describe(v)}")
        if type(v) is int and abs(v) > 10**MAX_INT_DIGITS:
            raise SchemaError(f"expected a smaller number, got {describe(v)}")
        if type(v) is str and (len(v) > MAX_ANY_CHARS or not is_unicode(v)):
            _str_checker(MaxLen(MAX_ANY_CHARS), None)(v)  # raises, naming the problem
        return v
    if not isinstance(v, (list, tuple, dict)):
        raise SchemaError(f"expected a JSON value, got {describe(v)}")
    if depth >= MAX_ANY_DEPTH:
        raise SchemaError(f"nested more than {MAX_ANY_DEPTH} levels deep")
    if len(v) > MAX_ANY_ITEMS:
        raise SchemaError(f"{len(v)} entries; at most {MAX_ANY_ITEMS} are allowed")
    items = v.items() if isinstance(v, dict) else enumerate(v)
    for key, item in items:
        if isinstance(v, dict):
            try:
                _str_checker(MaxLen(MAX_NAME_KEY_CHARS), None)(key)
            except SchemaError as exc:  # the bad key itself stays out of the path
                raise SchemaError(f"key {_key_text(key)}: {exc.message}") from None
        try:
            _any(item, depth + 1)
        except SchemaError as exc:
            exc.path.append(key)
            raise
    return v


def _list_checker(item: Checker, limit: MaxLen | None, objects: bool) -> Checker:
    n = MAX_ITEMS if limit is None else limit.n

    def check(v: Any) -> list[Any]:
        if type(v) is not list:
            raise SchemaError(f"expected a list, got {describe(v)}")
        if len(v) > n:
            raise SchemaError(f"{len(v)} entries; at most {n} are allowed")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except SchemaError as exc:
                exc.path.append(i)
                raise
        return v if objects else out

    return check


def _tuple_checker(items: Checker, objects: bool) -> Checker:
    def check(v: Any) -> tuple[Any, ...]:
        if not objects:
            return tuple(items(v))
        if type(v) is not tuple:
            raise SchemaError(f"expected a tuple, got {describe(v)}")
        items(list(v))
        return v

    return check


def _dict_checker(key: Checker, value: Checker, limit: MaxLen | None) -> Checker:
    n = MAX_ANY_ITEMS if limit is None else limit.n

    def check(v: Any) -> dict[Any, Any]:
        if type(v) is not dict:
            raise SchemaError(f"expected an object, got {describe(v)}")
        if len(v) > n:
            raise SchemaError(f"{len(v)} entries; at most {n} are allowed")
        out = {}
        for k, x in v.items():
            try:
                key(k)
            except SchemaError as exc:  # the bad key itself stays out of the path
                raise SchemaError(f"key {_key_text(k)}: {exc.message}") from None
            try:
                out[k] = value(x)
            except SchemaError as exc:
                exc.path.append(k)
                raise
        return out

    return check


def _dataclass_checker(cls: type, vocab_size: int | None, objects: bool) -> Checker:
    hints = get_type_hints(cls, include_extras=True)
    specs = [
        (
            f.name,
            checker(hints[f.name], vocab_size, objects),
            f.default is MISSING and f.default_factory is MISSING,
        )
        for f in fields(cls)
        if f.init
    ]

    def check_object(v: Any) -> Any:
        if not isinstance(v, cls):
            raise SchemaError(f"expected a {cls.__name__}, got {describe(v)}")
        for name, check, _ in specs:
            try:
                check(getattr(v, name))
            except SchemaError as exc:
                exc.path.append(name)
                raise
        return v

    def build(v: Any) -> Any:
        if type(v) is not dict:
            raise SchemaError(f"expected an object, got {describe(v)}")
        kwargs = {}
        for name, check, required in specs:
            if name in v:
                try:
                    kwargs[name] = check(v[name])
                except SchemaError as exc:
                    exc.path.append(name)
                    raise
            elif required:
                raise SchemaError(f"missing field {name!r}")
        return cls(**kwargs)

    return check_object if objects else build


@functools.lru_cache(maxsize=256)
def checker(hint: Any, vocab_size: int | None = None, objects: bool = False) -> Checker:
    """The compiled check of one annotation (cached: a trace has ~40 field kinds)."""
    meta: tuple[Any, ...] = ()
    base = hint
    if get_origin(hint) is Annotated:
        base, *rest = get_args(hint)
        meta = tuple(rest)

    def marker(kind: type) -> Any:
        return next((m for m in meta if isinstance(m, kind)), None)

    origin, args = get_origin(base), get_args(base)
    if base is bool:
        return _bool
    if base is int:
        return _int_checker(marker(Range), marker(VocabId), vocab_size)
    if base is float:
        return _float_checker(marker(Range))
    if base is str:
        return _str_checker(marker(MaxLen), marker(OneOf), marker(Matches))
    if base is Any:
        return _any
    if origin in (Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = checker(next(a for a in args if a is not type(None)), vocab_size, objects)
        return lambda v: None if v is None else inner(v)
    if origin is list:
        return _list_checker(checker(args[0], vocab_size, objects), marker(MaxLen), objects)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: a JSON list
        items = _list_checker(checker(args[0], vocab_size, objects), marker(MaxLen), objects)
        return _tuple_checker(items, objects)
    if origin is dict:
        return _dict_checker(checker(args[0], vocab_size, objects), checker(args[1], vocab_size, objects),
                             marker(MaxLen))
    if is_dataclass(base):
        return _dataclass_checker(base, vocab_size, objects)  # type: ignore[arg-type]
    raise TypeError(f"recap.core.schema has no check for the annotation {hint!r}")  # a programming error
