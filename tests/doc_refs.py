"""What the docs name, checked against the code as it is (tests/test_docs.py).

Each ``check_*`` function takes one document (its name and text) and returns the problems
it finds as ``"doc:line: message"`` strings: a module, function or attribute (``recap.x.y``,
``RecapConfig(field=...)``), a repository path (``app/x.py``, ``docs/bench/``), a Markdown
link or anchor, a file outside the repository (``DESIGN.md``, ``../shared/...``), a
command-line option (``python -m recap bench --xyz``, checked with the real argparse parser;
scripts' and modules' options against their ``add_argument`` calls) or an app API endpoint
(``/run``, against the ``api_name=`` the app's handlers declare, read from the source
without launching the app) or a ``RECAP_*`` environment variable that nothing reads.
What these are checked against is read from the code in tests/doc_code.py.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

from doc_code import (
    OPTION_RE,
    ROOT,
    all_options,
    api_names,
    declared_options,
    derived_env_vars,
    recap_parser,
    repo_basenames,
    resolve,
    source_text,
    subcommand_options,
)

#: Routes Gradio itself serves beside the app's own endpoints.
GRADIO_ROUTES = {"config", "info", "upload"}
#: Top-level files a doc may name without a folder.
TOP_FILES = r"app\.py|README\.md|CONTRIBUTING\.md|pyproject\.toml|requirements(?:-dev)?\.txt|\.gitattributes"
PATH_RE = re.compile(
    r"(?<![\w./-])((?:recap|app|tests|scripts|docs|assets)/[\w./*<>-]*|(?:" + TOP_FILES + r")(?![\w.-]))"
)
DOTTED_RE = re.compile(r"(?<![\w./-])recap(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT_RE = re.compile(r"^\s*from\s+(recap(?:\.\w+)*)\s+import\s+([\w, ]+)", re.M)
BARE_MD_RE = re.compile(r"(?<![\w./-])([\w-]+\.md)(?![\w.-])")
OUTSIDE_RE = re.compile(r"(?<![\w.])(?:\.\./[\w./-]+|/work/[\w./-]+)")
VAGUE_ISSUE_RE = re.compile(r"\bthe [a-z-]+ issue\b", re.I)
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE_RE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN_RE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
ENDPOINT_SPAN_RE = re.compile(r"^/([A-Za-z_]\w*)$")
API_NAME_RE = re.compile(r"api_name\s*=\s*[\"']/?(\w+)[\"']")
CONFIG_CALL_RE = re.compile(r"\bRecapConfig\(([^()]*)\)")
ENV_RE = re.compile(r"\bRECAP_[A-Z0-9_]*[A-Z0-9]\b")


def docstring_of(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def split_fences(text: str) -> tuple[str, list[tuple[int, str]]]:
    """(the text with fenced blocks blanked, same offsets; [(first line, block text)])."""
    blocks = [(line_of(text, m.start(1)), m.group(1)) for m in FENCE_RE.finditer(text)]
    prose = FENCE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return prose, blocks


def code_spans(text: str) -> list[tuple[int, str]]:
    """Inline code spans of the prose (a span may wrap onto the next line) and code-block lines
    (backslash continuations joined), each with its line number."""
    prose, blocks = split_fences(text)
    spans = [(line_of(prose, m.start()), m.group(1).replace("\n", " ")) for m in SPAN_RE.finditer(prose)]
    for first, block in blocks:
        logical, start = "", first
        for i, line in enumerate(block.split("\n")):
            if not logical:
                start = first + i
            if line.rstrip().endswith("\\"):
                logical += line.rstrip()[:-1] + " "
                continue
            spans.append((start, logical + line))
            logical = ""
    return spans


# -- the checks --------------------------------------------------------------------------------


def check_names(doc: str, text: str) -> list[str]:
    """``recap.x.y`` (and ``from recap.x import y``), ``Export.attr`` and ``RecapConfig(field=...)``."""
    problems = []
    refs = [(line_of(text, m.start()), m.group(0)) for m in DOTTED_RE.finditer(text)]
    for m in FROM_IMPORT_RE.finditer(text):
        refs += [
            (line_of(text, m.start()), f"{m.group(1)}.{n.strip()}")
            for n in m.group(2).split(",")
            if n.strip()
        ]
    import recap

    exports = "|".join(sorted(recap.__all__, key=len, reverse=True))
    for line, span in code_spans(text):
        refs += [
            (line, f"recap.{m.group(1)}")
            # not after "/": `app/state/decoding.py` is a path, not the export `decoding`'s attribute
            for m in re.finditer(rf"(?<![\w./])((?:{exports})\.[A-Za-z_]\w*)", span)
        ]
        for call in CONFIG_CALL_RE.finditer(span):
            fields = {f.name for f in dataclasses.fields(recap.RecapConfig)}
            for key in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*=(?!=)", call.group(1)):
                if key not in fields:
                    problems.append(f"{doc}:{line}: RecapConfig has no field {key!r}")
    from recap.methods import ENTRY_POINT_GROUP

    for line, ref in refs:
        if ref == ENTRY_POINT_GROUP:  # "recap.drafters": an entry point group, not a module
            continue
        missing = resolve(ref)
        if missing:
            problems.append(f"{doc}:{line}: `{ref}`: {missing}")
    return problems


def check_paths(doc: str, text: str, doc_dir: Path) -> list[str]:
    """Repository paths, bare ``*.md`` names, files outside the repository, links and anchors."""
    problems = []
    for m in PATH_RE.finditer(text):
        path = m.group(1).rstrip(".,:;")
        pattern = re.sub(r"<[^>]*>", "*", path)
        exists = any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / path).exists()
        if not exists:
            problems.append(f"{doc}:{line_of(text, m.start())}: no file or folder {path} in the repository")
    for m in BARE_MD_RE.finditer(text):
        if m.group(1) not in repo_basenames():
            problems.append(f"{doc}:{line_of(text, m.start())}: {m.group(1)} is not a file of the repository")
    for m in OUTSIDE_RE.finditer(text):
        problems.append(f"{doc}:{line_of(text, m.start())}: {m.group(0)} is outside the repository")
    for m in VAGUE_ISSUE_RE.finditer(text):
        problems.append(f"{doc}:{line_of(text, m.start())}: {m.group(0)!r}: name an issue by its number")
    for m in LINK_RE.finditer(text):
        problems += check_link(doc, line_of(text, m.start()), m.group(1), doc_dir)
    return problems


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors: the heading lower-cased, punctuation dropped, spaces as hyphens."""
    prose, _ = split_fences(text)
    heads = re.findall(r"^#+\s+(.*?)\s*#*$", prose, re.M)
    return {re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", h.lower())) for h in heads}


def check_link(doc: str, line: int, target: str, doc_dir: Path) -> list[str]:
    if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
        return []
    path_part, _, anchor = target.partition("#")
    path = (doc_dir / path_part).resolve() if path_part else ROOT / doc
    if ROOT not in path.parents and path != ROOT:
        return [f"{doc}:{line}: link {target} leaves the repository"]
    if not path.exists():
        return [f"{doc}:{line}: link {target}: no such file"]
    if anchor and path.suffix == ".md" and anchor not in heading_anchors(path.read_text()):
        return [f"{doc}:{line}: link {target}: no heading with anchor #{anchor}"]
    return []


def check_commands(doc: str, text: str) -> list[str]:
    """Options of ``python -m recap ...``, ``python -m recap.x``, ``python scripts/x.py`` and
    ``bash scripts/x.sh`` commands, and options named alone (``--limit N``)."""
    problems = []
    for line, span in code_spans(text):
        command, _, comment = span.partition(" #")
        words = command.split()
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
            words.pop(0)
        options = OPTION_RE.findall(span)
        where = f"{doc}:{line}"
        if not words:
            continue
        if words[0].startswith("--"):
            problems += [
                f"{where}: {o} is no option of any command here" for o in options if o not in all_options()
            ]
            continue
        tool = words[1:] if words[0] in ("python", "python3") else words
        if tool[:2] == ["-m", "recap"] or is_console_command(words):
            args = tool[2:] if tool[:2] == ["-m", "recap"] else words[1:]
            problems += check_recap_command(where, args, options)
        elif tool[:1] == ["-m"] and len(tool) > 1 and tool[1].startswith("recap."):
            spec = importlib.util.find_spec(tool[1])
            if spec is None or spec.origin is None:
                problems.append(f"{where}: no module {tool[1]}")
                continue
            origin = Path(spec.origin)
            main = origin.with_name("__main__.py") if origin.name == "__init__.py" else origin
            declared = declared_options(main)
            problems += [f"{where}: {tool[1]} has no option {o}" for o in options if o not in declared]
        elif (
            words[0] in ("python", "python3", "bash")
            and len(words) > 1
            and re.match(r"^scripts/[\w.-]+$", words[1])
        ):
            script = ROOT / words[1]
            if not script.is_file():
                continue  # check_paths reports it
            declared = declared_options(script)
            problems += [f"{where}: {words[1]} has no option {o}" for o in options if o not in declared]
    return problems


def is_console_command(words: list[str]) -> bool:
    """``recap bench ...`` (the console script), not a row named ``recap unscoped``."""
    return (
        len(words) > 1 and words[0] == "recap" and (words[1] in {"generate", "bench"} or words[1][:1] == "-")
    )


def check_recap_command(where: str, args: list[str], options: list[str]) -> list[str]:
    """``python -m recap SUB ...``: options against the subcommand's parser, then the whole
    command parsed by it (values, method and suite names) unless it holds a placeholder."""
    if not args or args[0].startswith("-"):
        declared = {o for a in recap_parser()._actions for o in a.option_strings}
        return [f"{where}: python -m recap has no option {o}" for o in options if o not in declared]
    declared = subcommand_options(args[0])
    if declared is None:
        return [f"{where}: python -m recap has no command {args[0]!r}"]
    problems = [f"{where}: python -m recap {args[0]} has no option {o}" for o in options if o not in declared]
    line = " ".join(args).split(" #")[0]
    if problems or re.search(r"[<>|]|\.\.\.", line):
        return problems
    try:
        argv = shlex.split(line)
    except ValueError:
        return problems
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            recap_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            message = err.getvalue().strip().splitlines()[-1:] or ["rejected"]
            problems.append(f"{where}: `python -m recap {line}` is rejected: {message[0]}")
    return problems


def check_endpoints(doc: str, text: str) -> list[str]:
    """``/name`` spans and ``api_name="/name"`` against the app's declared endpoints."""
    problems = []
    names = api_names() | GRADIO_ROUTES
    refs = [
        (line, m.group(1)) for line, span in code_spans(text) if (m := ENDPOINT_SPAN_RE.match(span.strip()))
    ]
    refs += [(line_of(text, m.start()), m.group(1)) for m in API_NAME_RE.finditer(text)]
    for line, name in refs:
        if name not in names:
            problems.append(f"{doc}:{line}: the app declares no endpoint /{name}")
    return problems


def check_env_vars(doc: str, text: str) -> list[str]:
    """``RECAP_*`` variables: each is read somewhere in the code, the scripts or the tests."""
    return [
        f"{doc}:{line_of(text, m.start())}: nothing reads {m.group(0)}"
        for m in ENV_RE.finditer(text)
        if m.group(0) not in derived_env_vars() and not re.search(rf"\b{m.group(0)}\b", source_text())
    ]


def check_document(doc: str, text: str, doc_dir: Path) -> list[str]:
    return (
        check_names(doc, text)
        + check_paths(doc, text, doc_dir)
        + check_commands(doc, text)
        + check_endpoints(doc, text)
        + check_env_vars(doc, text)
    )
