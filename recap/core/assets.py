"""Where the shipped assets are: the embedded model, its warm memory, the examples, the example run.

In a checkout they are the repository's top-level ``assets/`` folder. An installed package
(``pip install .`` or the wheel it builds) carries the same folder as package data in
``recap/assets`` (``setup.py`` maps ``assets/`` there), so every path below works from any
folder. The installed copy wins when both exist: a wheel's ``site-packages/assets`` (if some
other distribution put one there) is never this project's.
"""

from __future__ import annotations

from pathlib import Path

_RECAP = Path(__file__).resolve().parents[1]  # the recap package folder
INSTALLED_ASSETS = _RECAP / "assets"  # in an installed wheel
CHECKOUT_ASSETS = _RECAP.parent / "assets"  # in a checkout (the repository root's assets/)
#: The assets folder in use.
ASSETS = INSTALLED_ASSETS if INSTALLED_ASSETS.is_dir() else CHECKOUT_ASSETS

SHAPES_VLM = ASSETS / "shapes-vlm"  # the embedded model (``recap.load_target()`` with no argument)
WARM_MEMORY = ASSETS / "warm-memory"  # the memory new app sessions start from (recap.shapes.warm_memory)
EXAMPLES = ASSETS / "examples"  # example images and examples.json
EXAMPLE_RUN = ASSETS / "example-run"  # the decode the app's first page shows (recap.shapes.example_run)
SAMPLING_CURVE = ASSETS / "sampling-curve.json"  # the app's sampling curve (scripts/sampling_curve.py)
#: The shipped benchmark results the app's Benchmark tab opens on: docs/bench in a checkout, the same
#: files as package data (``setup.py`` maps docs/bench to recap/assets/bench) in an installed wheel.
SHIPPED_BENCH = INSTALLED_ASSETS / "bench" if INSTALLED_ASSETS.is_dir() else _RECAP.parent / "docs" / "bench"
