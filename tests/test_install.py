"""A package that installs: the wheel built from this tree works outside a checkout.

The wheel is built from a copy of what the build reads (no ``build/`` or ``*.egg-info`` left
in the tree) and installed into a fresh virtual environment made with
``--system-site-packages``, so torch, transformers and gradio come from this environment and
nothing is downloaded (``--no-deps --no-build-isolation --no-index``). From another folder,
with no PYTHONPATH, the installed ``recap`` then loads the embedded model, decodes the first
example as the shipped example run did, finds what the app's first page opens on, and the
``recap`` console script answers ``--help``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from recap.core.assets import ASSETS

ROOT = Path(__file__).resolve().parent.parent
#: What ``pip install .`` reads: the packaging files, the readme (the metadata's long description),
#: the two packages and the assets mapped into ``recap/assets``.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "recap", "app", "assets")


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
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
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
    assert "recap/__main__.py" in names and "app/ui.py" in names
    assert not any(n.startswith(("tests/", "scripts/")) for n in names)
    assert "[console_scripts]\nrecap = recap.__main__:main" in scripts


def test_load_target_decodes_from_another_folder_and_the_app_finds_its_first_page(built) -> None:
    code = (
        "import json, recap\n"
        "from recap.core.assets import EXAMPLES\n"
        "from recap.shapes.example_run import EXAMPLE_RUN_DIR, first_example, read_example\n"
        "target = recap.load_target()\n"
        "example = first_example()\n"
        "out = recap.generate(target, EXAMPLES / example['file'], example['prompt'], max_new_tokens=8)\n"
        "shipped, _ = read_example(EXAMPLE_RUN_DIR)\n"
        "from app.state.example import shipped_example\n"
        "from app.state.settings import load_settings\n"
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


def test_the_recap_console_script_answers_help(built) -> None:
    recap_script = built["python"].parent / "recap"
    out = run([str(recap_script), "--help"], cwd=built["elsewhere"], env=outside_env(built))
    assert out.stdout.startswith("usage: recap ") and "generate" in out.stdout and "bench" in out.stdout
    out = run([str(recap_script), "generate", "--help"], cwd=built["elsewhere"], env=outside_env(built))
    assert "--device" in out.stdout and "--dtype" in out.stdout
