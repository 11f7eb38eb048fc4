"""Record the shipped example run: what a new visitor's first Run gives on the first example.

    python scripts/record_example.py [--out assets/example-run]

A new app session starts from the warm memory (``assets/warm-memory``) and the default
settings; this script decodes the first entry of ``assets/examples/examples.json`` exactly
so (method ``recap``, 128 new tokens, the app's defaults ``SESSION_CONFIG``) on the embedded model and writes
the trace as ``trace.json.gz`` beside a ``run.json`` naming the image and the prompt. The
app opens on it without any model work; ``tests/test_example_run.py`` decodes it afresh
and fails when the shipped file no longer matches (timings aside), so it cannot go stale.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from recap.shapes.example_run import EXAMPLE_RUN_DIR, decode_example, write_example  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=EXAMPLE_RUN_DIR)
    args = ap.parse_args()
    trace, meta = decode_example()
    write_example(args.out, trace, meta)
    size = (args.out / "trace.json.gz").stat().st_size
    print(f"{args.out}: {trace.decode_steps} steps, {len(trace.token_ids)} tokens, MAT {trace.mat:.2f}, "
          f"{size / 1024:.0f} KiB compressed ({len(gzip.decompress((args.out / 'trace.json.gz').read_bytes())) / 1024:.0f} KiB JSON)")
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
