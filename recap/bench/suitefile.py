"""Suite files: conversations in MMSpec's JSON-lines layout, the images beside the file.

One JSON object per line::

    {"id": "scene-1", "image": "scene-1.png", "turns": ["Describe the image.", "What color is the star?"],
     "category": "multi-turn"}

``id`` names the conversation (unique in the file); ``image`` is a file name (or a list of
them), relative to the suite file's folder and inside it (no absolute paths, no ``..``);
``turns`` are the user turns, asked in order, each decoded with the earlier turns and the
reference's answers in its context; ``category`` groups the rows of the per-category table
(optional, default "all"). ``answers`` (a list beside ``turns``) and other keys are kept out
of the decode: the benchmark checks losslessness and speed, not accuracy. A single-question
sample is a conversation of one turn. ``read_suite`` turns a file into the benchmark's
``Request`` list, one per turn; any problem is a ``ValueError`` naming the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recap.bench.suite import Request
from recap.core.limits import MAX_PROMPT_CHARS

#: Most turns per conversation and lines per file a suite file may hold.
MAX_TURNS = 16
MAX_LINES = 10_000


def is_suite_file(name: str) -> bool:
    """Whether ``name`` names a suite file (a ``.jsonl`` path that exists)."""
    path = Path(name)
    return path.suffix == ".jsonl" and path.is_file()


def read_suite(name: str | Path) -> list[Request]:
    """The requests of a suite file, one per turn, conversation after conversation."""
    path = Path(name)
    folder = path.resolve().parent
    out: list[Request] = []
    ids: set[str] = set()
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) > MAX_LINES:
        raise ValueError(f"{path.name}: {len(lines)} lines; a suite file holds at most {MAX_LINES}")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON: {exc}") from exc
        if not isinstance(sample, dict):
            raise ValueError(f"{where}: a sample is a JSON object with id, image, turns and category")
        cid = _text(sample, "id", where)
        if cid in ids:
            raise ValueError(f"{where}: id {cid!r} is used twice")
        ids.add(cid)
        images = _images(sample.get("image"), folder, where)
        turns = sample.get("turns")
        if not isinstance(turns, list) or not turns or len(turns) > MAX_TURNS:
            raise ValueError(f"{where}: turns must be a list of 1 to {MAX_TURNS} questions")
        answers = sample.get("answers") if isinstance(sample.get("answers"), list) else []
        category = sample.get("category", "all")
        if not isinstance(category, str) or not category:
            raise ValueError(f"{where}: category must be a non-empty string")
        for t, turn in enumerate(turns):
            if not isinstance(turn, str) or not turn.strip() or len(turn) > MAX_PROMPT_CHARS:
                raise ValueError(f"{where}: turn {t + 1} must be a non-empty string of at most "
                                 f"{MAX_PROMPT_CHARS} characters")
            answer = answers[t] if t < len(answers) and isinstance(answers[t], str) else ""
            out.append(Request(len(out), number, category, turn, answer, t, conversation=cid,
                               category=category, image_files=tuple(str(p) for p in images)))
    if not out:
        raise ValueError(f"{path.name}: the suite file holds no sample")
    return out


def _text(sample: dict[str, Any], key: str, where: str) -> str:
    value = sample.get(key)
    if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) == "":
        raise ValueError(f"{where}: {key} must be a non-empty string")
    return str(value)


def _images(value: Any, folder: Path, where: str) -> list[Path]:
    """The sample's image files: names inside the suite's folder (none: a text-only conversation)."""
    if value is None:
        return []
    names = value if isinstance(value, list) else [value]
    out: list[Path] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: image must be a file name or a list of them")
        path = (folder / name).resolve()
        if Path(name).is_absolute() or folder not in path.parents:
            raise ValueError(f"{where}: image {name!r} must be a file beside the suite file "
                             "(inside its folder)")
        if not path.is_file():
            raise ValueError(f"{where}: image file {name!r} not found beside the suite file")
        out.append(path)
    return out
