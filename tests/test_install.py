"""A package that installs: the wheel built from this tree works outside a checkout.

The wheel is built from a copy of what the build reads (no ``build/`` or ``*.egg-info`` left
in the tree) and installed into a fresh virtual environment that sees the packages of the
environment the tests run in (``see_this_environment``: a virtual environment, a conda one or
the system's), so torch, transformers and gradio come from here and nothing is downloaded
(``--no-deps --no-build-isolation --no-index``). ``--system-site-packages`` would not do: it
shows the *base* interpreter's packages, which inside a virtual environment are not the ones
the README's command installed. From another folder,
with no PYTHONPATH, the installed ``recap`` then loads the embedded model, decodes the first
example as the shipped example run did, finds what the app's first page opens on, and the
``recap`` console script answers ``--help``.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from recap.core.assets import ASSETS

ROOT = Path(__file__).resolve().parent.parent
#: What ``pip install .`` reads: the packaging files, the readme (the metadata's long description),
#: the licence, the two packages, the assets mapped into ``recap/assets`` and the shipped benchmark results.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "recap", "app", "assets", "docs/bench")


def this_environments_site_dirs() -> list[str]:
    """The folders this interpreter imports installed packages from, in its own order."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return dirs


def see_this_environment(venv_python: Path) -> None:
    """Let the new environment import this one's packages, after its own.

    A ``.pth`` line that starts with ``import`` is executed at start-up: ``site.addsitedir``
    appends each folder and reads the ``.pth`` files inside it (editable installs, setuptools'
    shims), so the new environment sees exactly what this one sees, behind what is installed
    in it.
    """
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = run([str(venv_python), "-c", where]).stdout.strip()
    calls = "; ".join(f"site.addsitedir({d!r})" for d in this_environments_site_dirs())
    (Path(purelib) / "_recap_test_outer_env.pth").write_text(f"import site; {calls}\n")


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel, the virtual environment it is installed in, and an empty folder to run from."""
    work = tmp_path_factory.mktemp("install")
    src = work / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(work / "dist"),
         str(src)])
    (wheel,) = (work / "dist").glob("recap_studio-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    see_this_environment(python)
    run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index",
         str(wheel)])
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    return {"wheel": wheel, "venv": venv, "python": python, "elsewhere": elsewhere}


def outside_env(built: dict[str, Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RECAP_DATA_DIR"] = str(built["elsewhere"] / "app-data")  # never site-packages
    return env


def test_the_wheel_carries_every_asset_and_the_console_script(built) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = wheel.read(entry_points).decode()
    shipped = {f"recap/assets/{p.relative_to(ASSETS).as_posix()}" for p in ASSETS.rglob("*") if p.is_file()}
    assert {"recap/assets/shapes-vlm/model.safetensors", "recap/assets/warm-memory/memory.safetensors",
            "recap/assets/examples/examples.json", "recap/assets/example-run/trace.json.gz"} <= shipped
    assert shipped <= names, sorted(shipped - names)
    assert "recap/__main__.py" in names and "recap_studio/ui.py" in names  # the app, under its own name
    assert not any(n.startswith(("tests/", "scripts/", "app/")) for n in names)  # no top-level `app`
    assert {"recap/assets/bench/results.json", "recap/assets/bench/results.md"} <= names  # Benchmark tab
    assert "[console_scripts]\nrecap = recap.__main__:main" in scripts
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)


def test_load_target_decodes_from_another_folder_and_the_app_finds_its_first_page(built) -> None:
    code = (
        "import json, recap\n"
        "from recap.core.assets import EXAMPLES\n"
        "from recap.shapes.example_run import EXAMPLE_RUN_DIR, first_example, read_example\n"
        "target = recap.load_target()\n"
        "example = first_example()\n"
        "out = recap.generate(target, EXAMPLES / example['file'], example['prompt'], max_new_tokens=8)\n"
        "shipped, _ = read_example(EXAMPLE_RUN_DIR)\n"
        "from recap_studio.state.example import shipped_example\n"
        "from recap_studio.state.settings import load_settings\n"
        "settings = load_settings()\n"
        "first_page = shipped_example(settings)\n"
        "print(json.dumps({'recap': recap.__file__, 'model': target.name, 'tokens': out.token_ids,\n"
        "                  'shipped': shipped.token_ids[:8], 'examples': len(settings.examples),\n"
        "                  'warm': settings.warm_memory, 'first_page': first_page is not None}))\n"
    )
    out = run([str(built["python"]), "-c", code], cwd=built["elsewhere"], env=outside_env(built))
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    site = str(built["venv"])
    assert seen["recap"].startswith(site) and seen["model"].startswith(site), seen  # not this checkout
    assert len(seen["tokens"]) == 8 and seen["tokens"] == seen["shipped"]  # greedy: the shipped run's start
    assert seen["examples"] > 0 and seen["warm"].startswith(site) and seen["first_page"]


def test_recap_app_starts_the_installed_app_which_shows_its_shipped_benchmark(built) -> None:
    """`recap app` from the installed package (no checkout anywhere near): it answers, its Benchmark
    tab reads the shipped results (package data), its data directory is the user's cache."""
    import socket
    import time
    import urllib.request

    from gradio_client import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in outside_env(built).items() if k != "RECAP_DATA_DIR"}
    env["XDG_CACHE_HOME"] = str(built["elsewhere"] / "cache")
    recap_script = built["python"].parent / "recap"
    proc = subprocess.Popen([str(recap_script), "app", "--port", str(port)], cwd=built["elsewhere"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    said = proc.stdout.read() if proc.stdout else ""
                    raise AssertionError(f"recap app did not answer:\n{said}") from None
                time.sleep(1)
        client = Client(url, verbose=False)
        table, _ = client.predict("shipped (docs/bench)", api_name="/bench_results")
        assert "| recap |" in table and "| hf |" in table  # the shipped default suite's rows
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not (built["elsewhere"] / "app-data").exists()  # not beside the process, not in site-packages


def test_the_new_environment_imports_this_environments_packages_behind_its_own(built) -> None:
    code = ("import json, sys, torch, transformers, gradio, PIL\n"
            "files = [m.__file__ for m in (torch, transformers, gradio, PIL)]\n"
            "print(json.dumps({'path': sys.path, 'files': files}))\n")
    out = run([str(built["python"]), "-c", code], cwd=built["elsewhere"], env=outside_env(built))
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    import gradio
    import PIL
    import torch
    import transformers

    assert seen["files"] == [m.__file__ for m in (torch, transformers, gradio, PIL)]  # the very same install
    own = next(i for i, d in enumerate(seen["path"]) if d.startswith(str(built["venv"])))
    outer = [seen["path"].index(d) for d in this_environments_site_dirs()]
    assert all(own < i for i in outer), seen["path"]  # the wheel's recap wins over anything outside


def test_the_recap_console_script_answers_help(built) -> None:
    recap_script = built["python"].parent / "recap"
    out = run([str(recap_script), "--help"], cwd=built["elsewhere"], env=outside_env(built))
    assert out.stdout.startswith("usage: recap ") and "generate" in out.stdout and "bench" in out.stdout
    assert "app" in out.stdout
    out = run([str(recap_script), "generate", "--help"], cwd=built["elsewhere"], env=outside_env(built))
    assert "--device" in out.stdout and "--dtype" in out.stdout


def test_ci_runs_the_readmes_test_command_inside_a_fresh_virtual_environment() -> None:
    readme = (ROOT / "README.md").read_text()
    (command,) = {line for line in readme.splitlines() if "-m pytest" in line and "pip install" in line}
    steps = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert steps[-1] == command  # exactly the README's, last
    made = next(i for i, line in enumerate(steps) if "-m venv" in line)
    activated = next(i for i, line in enumerate(steps) if line.startswith(". ") and "bin/activate" in line)
    assert made < activated < len(steps) - 1


def test_the_library_takes_ranges_and_the_space_pins_what_ci_tests() -> None:
    import gradio
    import tomllib
    import torch
    import transformers
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert deps and not [d for d in deps if "==" in d], "exact pins belong to requirements.txt (the Space's)"
    lines = (ROOT / "requirements.txt").read_text().split()
    pinned = {line.split("==")[0]: line.split("==")[1] for line in lines if "==" in line}
    assert {name: pinned.get(name) for name in ("torch", "transformers", "gradio")} == {
        "torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
        "gradio": gradio.__version__,
    }  # the versions this suite runs on
    for dep in deps:  # and each pinned version satisfies the library's range
        req = Requirement(dep)
        if req.name in pinned:
            assert req.specifier.contains(pinned[req.name]), (dep, pinned[req.name])
    assert (ROOT / "LICENSE").read_text().startswith(" " * 33 + "Apache License")
