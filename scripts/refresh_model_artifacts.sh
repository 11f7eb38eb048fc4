#!/usr/bin/env bash
# After replacing assets/shapes-vlm, regenerate everything that records the model's behaviour:
# its evaluation (next to the weights), the example gallery, the benchmark and ablation runs
# in docs/bench, and the README / docs screenshots. About 15 minutes on the 2-core CPU.
# The prose numbers in README.md, docs/shapes-model.md and docs/benchmark.md, and
# recap.engine.autobudget.SHAPES_MAT_CURVE (the budget rows of docs/bench/ablation.md), are then
# updated by hand from these files.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m recap.shapes.evaluate --by-objects --json assets/shapes-vlm/evaluation.json | tee assets/shapes-vlm/evaluation.md
python -m recap.shapes.examples
python -m recap bench --out docs/bench --no-progress
python -m recap bench --ablation --repeats 1 --out docs/bench --no-progress
RECAP_UPDATE_SCREENSHOTS=1 python -m pytest -q tests/test_browser.py
