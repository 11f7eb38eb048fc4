"""What the docs are checked against: names, options, endpoints, files, read from the code (doc_refs.py)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", "app-data", "bench-results"}
OPTION_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@functools.cache
def resolve(dotted: str) -> str | None:
    """None when ``dotted`` (``recap.a.b.C.attr``) exists, else what is missing."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            obj: Any = importlib.import_module(name)
            break
    else:
        return f"no module {parts[0]}"
    for j in range(i, len(parts)):
        owner, attr = obj, parts[j]
        if hasattr(owner, attr):
            obj = getattr(owner, attr)
        elif j == len(parts) - 1 and inspect.isclass(owner) and attr in instance_attributes(owner):
            return None
        else:
            kind = "module" if inspect.ismodule(owner) else "object"
            return f"{kind} {'.'.join(parts[:j])} has no attribute {attr!r}"
    return None


def instance_attributes(cls: type) -> set[str]:
    """Attributes a class's instances get: dataclass fields, annotations, ``self.x =`` in its methods."""
    names: set[str] = set()
    for klass in inspect.getmro(cls):
        names |= set(getattr(klass, "__annotations__", {}))
        names |= set(getattr(klass, "__slots__", ()))
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names |= set(re.findall(r"\bself\.([A-Za-z_]\w*)\s*(?::[^=\n]+)?=(?!=)", source))
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return names


def python_files(*folders: str) -> list[Path]:
    out: list[Path] = []
    for folder in folders:
        base = ROOT / folder
        if base.is_file():
            out.append(base)
            continue
        out += [p for p in base.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return sorted(out)


def declared_options(path: Path, follow: bool = True) -> set[str]:
    """The ``--options`` a script or module declares (``add_argument("--x", ...)``; a shell
    script: every ``--x`` in it). A script that declares none and hands over to a ``recap``
    module (``from recap.bench.realrun import main``) has that module's options."""
    text = path.read_text()
    if path.suffix != ".py":
        return set(OPTION_RE.findall(text))
    found, imported = set(), []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found |= {
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recap"):
            imported.append(node.module)
    if not found and follow:
        for module in imported:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.origin and spec.origin.endswith(".py"):
                found |= declared_options(Path(spec.origin), follow=False)
    return found


@functools.cache
def all_options() -> frozenset[str]:
    files = python_files("recap", "scripts", "app") + sorted((ROOT / "scripts").glob("*.sh"))
    return frozenset(o for p in files for o in declared_options(p))


@functools.cache
def api_names() -> frozenset[str]:
    """``api_name=`` values of the app's event handlers, read from the source."""
    names = set()
    for path in python_files("app", "app.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "api_name"
                and isinstance(node.value, ast.Constant)
            ):
                names.add(str(node.value.value).lstrip("/"))
    return frozenset(names)


@functools.cache
def recap_parser() -> argparse.ArgumentParser:
    from recap.__main__ import build_parser

    return build_parser()


def subcommand_options(sub: str) -> set[str] | None:
    parser = recap_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and sub in action.choices:
            return {o for a in action.choices[sub]._actions for o in a.option_strings}
    return None


@functools.cache
def repo_basenames() -> frozenset[str]:
    return frozenset(
        p.name for p in ROOT.rglob("*") if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts)
    )


@functools.cache
def source_text() -> str:
    files = python_files("recap", "app", "scripts", "tests", "app.py") + sorted(
        (ROOT / "scripts").glob("*.sh")
    )
    checker = ("doc_refs.py", "doc_code.py", "test_docs.py")  # they name variables, they read none
    return "\n".join(p.read_text() for p in files if p.name not in checker)


@functools.cache
def derived_env_vars() -> frozenset[str]:
    """``RECAP_<FIELD>`` read by name from a dataclass's fields (``f"RECAP_{f.name.upper()}"``): the
    fields of the dataclasses of every module that builds such a name."""
    names = set()
    for path in python_files("recap", "app", "app.py"):
        text = path.read_text()
        if 'f"RECAP_{' not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                names |= {
                    f"RECAP_{a.target.id.upper()}"
                    for a in node.body
                    if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
                }
    return frozenset(names)
