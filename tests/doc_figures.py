"""Figures in the docs tied to the result files they quote (used by tests/test_doc_numbers.py).

A figure quoted from a benchmark carries its source right after it, as an HTML comment that
renders as nothing:

    1.56x<!-- figure: docs/bench/results.json {summary.recap.overall.speedup:.2f}x -->

The first word is the result file (JSON, gzipped or not, relative to the repository root; left
out, it is the file of the marker before), the rest a template: literal text and
``{expression:format}`` fields. An expression is a path (keys joined by dots; in a list, a
number indexes it and any other key picks the item whose ``method`` or ``name`` is that key;
``#`` is the length of a list), a number, or such operands joined by `` / ``, `` * ``, `` - ``,
`` + `` (left to right). The template, filled in, must be exactly the text in front of the
marker (closing ``**``, `` ` `` and ``)`` between them are allowed).

A table gets one marker, on the line(s) before it:

    <!-- table: docs/bench/results.json summary.{row}.overall
         | {mat:.2f} | {tokens_per_s:.1f} | {speedup:.2f}x | | {lossless}/{requests} -->

After the source, the path of a row's node, ``{row}`` standing for the row's first cell (its
markdown and any " (...)" removed); then one template per further column, relative to that
node (a path starting with ``/`` starts at the file's root; a template starting with ``@FILE``
reads that file instead; ``{row}`` inside a path is the row's key too); an empty template
leaves the column unchecked. A cell whose value is missing from the source must read "–", and
only then.

A figure that is no measurement (a target, the paper's figure) is marked
``<!-- not measured: why -->`` right after it.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

FIGURE = re.compile(r"<!--\s*figure:\s*(.*?)\s*-->", re.S)
TABLE = re.compile(r"<!--\s*table:\s*(\S+)\s+(.*?)\s*-->[ \t]*\n", re.S)
NOT_MEASURED = re.compile(r"<!--\s*not measured:\s*(.*?)\s*-->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
FIELD = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
#: What must have a source in the main docs: a speedup ("1.56x") or a MAT value ("MAT 3.28",
#: "MAT (tokens per pass) 3.28"), and in a table any cell that is a decimal figure.
SPEEDUP = re.compile(r"(?<![\w.])\d+\.\d+x(?!\w)")
MAT_VALUE = re.compile(r"\bMATs?\b[^.;:\d|\n]{0,40}?(?<![\w.])(\d+\.\d+)")
FIGURE_CELL = re.compile(r"^[*\s]*[\d.,]*\d\.\d[\d.,]*\s*(x|%|s|MB)?[*\s]*(\([^a-z]*\))?[*\s]*$")
CLOSERS = "*`) "
DASH = "–"


class Missing(LookupError):
    """A path that the result file does not hold."""


@dataclass(frozen=True)
class Problem:
    doc: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


@cache
def load(source: str) -> Any:
    path = ROOT / source
    if not path.is_file():
        raise Missing(f"no result file {source}")
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw.decode("utf-8"))


def resolve(node: Any, path: str) -> Any:
    for key in path.split("."):
        if key == "#" and isinstance(node, (list, dict)):
            node = len(node)
        elif isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, list):
            hits = [x for x in node if isinstance(x, dict) and key in (x.get("method"), x.get("name"))]
            if len(hits) != 1:
                raise Missing(f"{path}: no single item {key!r}")
            node = hits[0]
        else:
            raise Missing(f"{path}: no key {key!r}")
    if node is None:
        raise Missing(f"{path} is null")
    return node


def evaluate(expression: str, root: Any, node: Any) -> Any:
    tokens = expression.split()
    ops = {"/": lambda a, b: a / b, "*": lambda a, b: a * b, "-": lambda a, b: a - b, "+": lambda a, b: a + b}

    def operand(token: str) -> Any:
        if re.fullmatch(r"-?\d+(\.\d+)?", token):
            return float(token)
        return resolve(root, token[1:]) if token.startswith("/") else resolve(node, token)

    value = operand(tokens[0])
    for op, token in zip(tokens[1::2], tokens[2::2]):
        if op not in ops:
            raise ValueError(f"unknown operator {op!r} in {expression!r}")
        value = ops[op](value, operand(token))
    return value


def fill(template: str, root: Any, node: Any) -> str:
    """The template with each field replaced by its formatted value (``Missing`` if one is absent)."""
    return FIELD.sub(lambda m: format(evaluate(m[1], root, node), m[2] or ""), template)


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def row_key(cell: str) -> str:
    cell = re.sub(r"[*`]", "", cell).strip()
    return re.sub(r"\s+\(.*\)$", "", cell).strip()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def check(doc: str, text: str) -> tuple[list[Problem], list[tuple[int, int]]]:
    """Every marked figure against its source; the problems and the spans they vouch for."""
    problems: list[Problem] = []
    spans: list[tuple[int, int]] = []
    last = ""
    for m in sorted([*FIGURE.finditer(text), *TABLE.finditer(text)], key=lambda m: m.start()):
        if m.re is TABLE:
            last = m[1]
            continue
        source, template = (last, m[1]) if m[1].startswith("{") else m[1].split(None, 1)
        last = source
        if not source:
            problems.append(Problem(doc, line_of(text, m.start()), "a marker with no file, none before it"))
            continue
        try:
            expected = fill(template, load(source), load(source))
        except (Missing, ValueError, ZeroDivisionError) as exc:
            problems.append(Problem(doc, line_of(text, m.start()), f"{source}: {exc}"))
            continue
        before = text[: m.start()]
        if not before.endswith(expected):
            before = before.rstrip(CLOSERS)
        start = len(before) - len(expected)
        glued = start > 0 and (before[start - 1].isdigit() or before[start - 1] == ".")
        if not before.endswith(expected) or glued:
            quoted = text[max(0, m.start() - len(expected) - 8): m.start()].split("\n")[-1]
            problems.append(Problem(doc, line_of(text, m.start()),
                                    f"quotes ...{quoted!r}, {source} gives {expected!r}"))
            continue
        spans.append((start, len(before)))
    for m in TABLE.finditer(text):
        found, covered = check_table(doc, text, m)
        problems += found
        spans += covered
    return problems, spans


def check_table(doc: str, text: str, m: re.Match) -> tuple[list[Problem], list[tuple[int, int]]]:
    source, spec = m[1], m[2]
    row_path, *templates = [part.strip() for part in spec.split("|")]
    problems: list[Problem] = []
    spans: list[tuple[int, int]] = []
    pos = m.end()
    while text.startswith("\n", pos):
        pos += 1
    lines = []
    while pos < len(text) and text.startswith("|", pos):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        lines.append((pos, text[pos:end]))
        pos = end + 1
    if len(lines) < 3:
        return [Problem(doc, line_of(text, m.start()), "a table marker with no table under it")], []
    for start, line in lines[2:]:
        bars = [i for i, c in enumerate(line) if c == "|"]
        row = [line[a + 1: b] for a, b in zip(bars, bars[1:])]
        key = row_key(row[0])
        for i, template in enumerate(templates, 1):
            if not template or i >= len(row):
                continue
            file = source
            if template.startswith("@"):
                file, _, template = template[1:].partition(" ")
            template = template.replace("{row}", key)
            try:
                root = load(file)
                expected = fill(template, root, resolve(root, row_path.replace("{row}", key)))
            except Missing:
                expected = DASH
            except (ValueError, ZeroDivisionError) as exc:
                problems.append(Problem(doc, line_of(text, start), f"{key}, column {i + 1}: {exc}"))
                continue
            if row[i].replace("**", "").strip() != expected:
                problems.append(Problem(doc, line_of(text, start),
                                        f"row {key!r}, column {i + 1} reads {row[i].strip()!r}, "
                                        f"{file} gives {expected!r}"))
            else:
                spans.append((start + bars[i] + 1, start + bars[i + 1]))
    return problems, spans


def unsourced(doc: str, text: str, vouched: list[tuple[int, int]]) -> list[Problem]:
    """Speedups, MAT values and table figures in the text that no marker vouches for."""
    chars = list(text)
    for start, end in vouched:
        chars[start:end] = " " * (end - start)
    for m in NOT_MEASURED.finditer(text):
        lead = text[: m.start()].rstrip(CLOSERS)
        word = re.search(r"[\d.]+x?$", lead)
        if word:
            chars[word.start(): len(lead)] = " " * (len(lead) - word.start())
    for pattern in (COMMENT, FENCE):
        for m in pattern.finditer(text):
            chars[m.start(): m.end()] = [c if c == "\n" else " " for c in text[m.start(): m.end()]]
    rest = "".join(chars)
    problems = [Problem(doc, line_of(rest, m.start()), f"{m[0]!r} has no source marker")
                for m in SPEEDUP.finditer(rest)]
    problems += [Problem(doc, line_of(rest, m.start(1)), f"MAT {m[1]!r} has no source marker")
                 for m in MAT_VALUE.finditer(rest)]
    for n, line in enumerate(rest.split("\n"), 1):
        if line.lstrip().startswith("|") and not set(line.strip()) <= set("|-: "):
            problems += [Problem(doc, n, f"table figure {c!r} has no source marker")
                         for c in cells(line)[1:] if c and FIGURE_CELL.match(c)]
    return sorted(set(problems), key=lambda p: p.line)
