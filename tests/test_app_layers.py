"""The app's layers import in one direction (read from the source, nothing imported).

    app.ui -> app.tabs -> app.widgets -> app.presenters -> app.state -> app.boundary

A module may import its own layer and the layers below it, never one above. Presenters and
state (and the boundary's errors, validation and job gate) import no Gradio, not even through
another app module; presenters read traces (``recap.trace``), never the engine's internals.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "app"
#: Top first: a module may import only its own layer and those after it.
LAYERS = ("app.ui", "app.tabs", "app.widgets", "app.presenters", "app.state", "app.boundary")
#: What presenters may read of the library: traces, where the shipped files are, and the pure mask
#: function the engine's own attention mask is built from (the mask view draws exactly that mask, from
#: the trace's parents).
PRESENTER_READS = ("recap.trace", "recap.core.assets", "recap.verification.treemask")
NO_GRADIO = (
    "app.presenters",
    "app.state",
    "app.boundary.errors",
    "app.boundary.validation",
    "app.boundary.jobs",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: list[str] | None = None) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (lazy imports in functions count); the
    app's own imports are relative (``from ..state.session import Session``: the package installs as
    ``recap_studio``), resolved here to their ``app.`` names."""
    found: set[str] = set()
    if package is None:  # the package ``path`` is in, as app.x.y
        package = module_name(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            if module == "app" or node.level:  # ``from .. import x``: x may be a module
                found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(p): imports(p) for p in sorted(APP.rglob("*.py"))}


def layer(module: str) -> int | None:
    for rank, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            return rank
    return None


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def absolute_app_imports(path: Path) -> list[str]:
    """``from app... import`` / ``import app...`` statements of ``path`` (the app must not use them)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        out += [n for n in names if n == "app" or n.startswith("app.")]
    return out


def test_the_app_imports_itself_relatively_so_it_installs_under_another_name():
    absolute = {p.name: found for p in APP.rglob("*.py") if (found := absolute_app_imports(p))}
    assert not absolute, f"absolute app imports (the wheel installs app/ as recap_studio): {absolute}"
    assert "app.state.session" in MODULES["app.ui"]  # the relative ones are read


def test_every_module_is_in_a_layer():
    loose = [m for m in MODULES if m != "app" and layer(m) is None]
    assert not loose, f"app modules outside the layers {LAYERS}: {loose}"
    assert {m.split(".")[1] for m in MODULES if m.count(".") >= 1} >= {
        "tabs",
        "widgets",
        "presenters",
        "state",
        "boundary",
    }


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "app"))
def test_imports_go_down(module: str):
    """No module imports a layer above its own."""
    rank = layer(module)
    assert rank is not None
    upward = sorted(i for i in MODULES[module] if (r := layer(i)) is not None and r < rank)
    assert not upward, f"{module} ({LAYERS[rank]}) imports a layer above it: {upward}"


def closure(module: str) -> set[str]:
    """``module`` and every app module it reaches through imports."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen or m not in MODULES:
            continue
        seen.add(m)
        todo.extend(i for i in MODULES[m] if i.startswith("app"))
    return seen


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, NO_GRADIO)))
def test_no_gradio_below_the_widgets(module: str):
    """Presenters and state work without Gradio: neither they nor any app module they import pulls it in."""
    users = sorted(
        m for m in closure(module) if any(i == "gradio" or i.startswith("gradio.") for i in MODULES[m])
    )
    assert not users, f"{module} reaches Gradio through {users}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, ("app.presenters",))))
def test_presenters_read_traces_not_the_engine(module: str):
    engine = sorted(i for i in MODULES[module] if within(i, ("recap",)) and not within(i, PRESENTER_READS))
    assert not engine, f"{module} imports the library beyond its traces: {engine}"


def test_the_layer_check_sees_an_upward_import(tmp_path: Path):
    """The check itself: a state module importing a tab is caught (the parser reads lazy imports too)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from ..tabs.compare import CompareTab\n    return CompareTab\n")
    found = imports(bad, package=["app", "state"])  # as app/state/bad.py
    assert "app.tabs.compare" in found
    assert absolute_app_imports(bad) == []
    bad.write_text("from app.tabs import compare\n")
    assert absolute_app_imports(bad) == ["app.tabs"]
    assert layer("app.tabs.compare") < layer("app.state.session")


def test_no_reexport_hub():
    """Callers import a name from its home module: no module of the app re-exports others' names."""
    hubs = []
    for path in APP.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
               for n in tree.body) and module_name(path) != "app":
            hubs.append(module_name(path))
    assert not hubs, f"re-export lists in {hubs}"
