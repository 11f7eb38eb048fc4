"""The real-size benchmark (``recap.bench.realrun``): random-weight checkpoints at full real sizes.

    nice -n 10 python scripts/bench_real_sizes.py --real-size qwen2-vl-2b --out bench-real
    nice -n 10 python scripts/bench_real_sizes.py --real-size smolvlm-256m --methods hf recap recap-auto tr

Same as ``python -m recap bench --real-size MODEL``: each method in a process of its own, one at
a time (a Qwen2-VL-2B process needs ~12 GB; the run refuses to start one with less available).
Writes ``OUT/MODEL.json`` and ``OUT/MODEL.md`` (the table in docs/benchmark.md "At real sizes").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recap.bench.realrun import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
