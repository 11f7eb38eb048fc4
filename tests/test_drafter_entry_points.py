"""A drafter from another installed package: the entry point group ``recap.drafters``.

``tests/fixtures/drafter_plugin`` is such a package (``recap-echo-plugin``: one module, one
entry point, no call to ``register``). Built and installed here into a folder on PYTHONPATH,
it is then a method of the command line and the benchmark (it decodes there, token for token
what ``generate()`` gives, with drafted tokens accepted) and of the app in a new process. A
broken plugin is refused naming its entry point and distribution; the rules are checked one
by one on entry points made here, in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import recap.methods
from recap.core.errors import PluginError
from recap.methods import ENTRY_POINT_GROUP, Method, register_entry_points

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_SRC = ROOT / "tests" / "fixtures" / "drafter_plugin"
HERE = __name__  # this module, as an entry point names it: "test_drafter_entry_points"


def pip_install(src: Path, target: Path) -> None:
    """Build ``src`` with this environment's setuptools and install it into ``target`` (no index)."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
           "--disable-pip-version-check", "--target", str(target), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def run_recap(args: list[str], pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(ROOT)])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding recap-echo-plugin as pip installs it (module and dist-info with its entry point)."""
    work = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(PLUGIN_SRC, work / "src")  # the build writes into its source folder
    pip_install(src, work / "site")
    assert (work / "site" / "recap_echo_plugin.py").is_file()
    return work / "site"


def test_an_installed_drafter_is_seen_by_the_registry_the_benchmark_and_the_app(plugin_dir, tmp_path) -> None:
    code = (
        "import json, recap.methods\n"
        "from recap.bench import all_methods\n"
        "from app.state.settings import app_methods\n"
        "m = recap.methods.get_method('mine')\n"
        "print(json.dumps({'label': m.label, 'module': m.factory.__module__,\n"
        "                  'names': list(recap.methods.method_names()), 'bench': list(all_methods()),\n"
        "                  'app': [a.name for a in app_methods()]}))\n"
    )
    out = run_recap(["-c", code], plugin_dir, tmp_path)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["label"] == "Echo (from another package)" and seen["module"] == "recap_echo_plugin"
    assert seen["names"] == [*recap.methods.METHODS, "mine"]  # after the built-ins
    assert "mine" in seen["bench"] and "mine" in seen["app"]


def test_an_installed_drafter_runs_in_python_m_recap_bench(plugin_dir, tmp_path) -> None:
    out_dir = tmp_path / "bench"
    out = run_recap(["-m", "recap", "bench", "--methods", "mine", "--suite", "quick", "--limit", "2",
                     "--repeats", "1", "--max-new-tokens", "24", "--no-progress", "--out", str(out_dir)],
                    plugin_dir, ROOT)
    assert out.returncode == 0, out.stderr
    results = json.loads((out_dir / "results.json").read_text())
    assert [a["name"] for a in results["arms"]] == ["hf", "mine"]
    assert results["lossless"]["ok"], results["lossless"]["mismatches"]  # token for token generate()'s
    assert results["summary"]["mine"]["overall"]["mat"] > 1.0, "none of its drafted tokens was accepted"
    assert "Echo (from another package)" in (out_dir / "results.md").read_text()


def test_a_broken_installed_plugin_is_refused_naming_its_entry_point(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "recap-broken-plugin"\nversion = "0.2.0"\n'
        "[tool.setuptools]\npy-modules = []\n"
        f'[project.entry-points."{ENTRY_POINT_GROUP}"]\nbroken = "recap.core.config:RecapConfig"\n'
    )
    pip_install(src, tmp_path / "site")
    out = run_recap(["-m", "recap", "bench", "--methods", "recap"], tmp_path / "site", ROOT)
    assert out.returncode == 2, out.stderr
    assert "argument --methods: drafter plugin 'broken = recap.core.config:RecapConfig'" in out.stderr
    assert "from recap-broken-plugin 0.2.0" in out.stderr and "not a recap.methods.Method" in out.stderr
    assert "Traceback" not in out.stderr


# --------------------------------------------------------------------------- the rules, one by one

def make_nothing(setup: object) -> None:
    raise AssertionError("never built: these tests only register")


GOOD = Method("plugged", "Plugged", "#123456", False, make_nothing)
OTHER = Method("other", "Other", "#123456", False, make_nothing)
BAD_COLOUR = Method("plugged", "Plugged", "blue", False, make_nothing)
BUILTIN_NAME = Method("recap", "Another RECAP", "#123456", False, make_nothing)
NOT_A_METHOD = 42


def ep(name: str, attr: str) -> EntryPoint:
    return EntryPoint(name, attr if ":" in attr else f"{HERE}:{attr}", ENTRY_POINT_GROUP)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    before = recap.methods.method_names()
    yield
    for name in set(recap.methods.method_names()) - set(before):
        recap.methods.unregister(name)
    assert recap.methods.method_names() == before


def test_a_plugin_entry_point_registers_its_method(clean_registry) -> None:
    assert register_entry_points([ep("plugged", "GOOD")]) == (GOOD,)
    assert recap.methods.get_method("plugged") is GOOD and recap.methods.registered()[-1] is GOOD
    assert register_entry_points([ep("plugged", "GOOD")]) == ()  # already in: a module that registered itself


@pytest.mark.parametrize(("entry", "says"), [
    (ep("plugged", "no_such_module_for_recap:METHOD"), "cannot be loaded: ModuleNotFoundError"),
    (ep("plugged", "MISSING"), "cannot be loaded: AttributeError"),
    (ep("plugged", "NOT_A_METHOD"), "names an object of type int, not a recap.methods.Method"),
    (ep("plugged", "OTHER"), "names the method 'other': the entry point must be named as its method"),
    (ep("plugged", "BAD_COLOUR"), "needs a colour"),
    (ep("recap", "BUILTIN_NAME"), "already registered"),
])
def test_a_bad_plugin_is_a_plugin_error_naming_the_entry_point(entry: EntryPoint, says: str,
                                                                 clean_registry) -> None:
    with pytest.raises(PluginError, match=says) as raised:
        register_entry_points([entry])
    named = f"drafter plugin '{entry.name} = {entry.value}' (entry point group recap.drafters"
    assert named in str(raised.value)
    assert isinstance(raised.value, ValueError)  # the command line reports it like an unknown method


def test_plugins_register_all_or_none(clean_registry) -> None:
    with pytest.raises(PluginError, match="another plugin already names a method 'plugged'"):
        register_entry_points([ep("plugged", "GOOD"), ep("plugged", "GOOD")])
    with pytest.raises(PluginError, match="NOT_A_METHOD"):
        register_entry_points([ep("plugged", "GOOD"), ep("other", "NOT_A_METHOD")])
    assert "plugged" not in recap.methods.method_names()
