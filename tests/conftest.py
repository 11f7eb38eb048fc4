"""Shared fixtures, each built once per session: tiny random-weight models of every family, the
real-files checkpoints, the embedded shapes model and its quick-suite benchmark."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(int(os.environ.get("RECAP_TEST_THREADS", "1")))

import tiny_models  # noqa: E402

#: RECAP_TEST_DEVICE=cuda runs the model tests on a GPU (fp32, so exactness still holds).
DEVICE = os.environ.get("RECAP_TEST_DEVICE", "cpu")
#: RECAP_TEST_DTYPE=bfloat16 loads the tiny models in bf16 (device check only: exactness is
#: guaranteed in fp32; bf16 mismatches are measured, not promised).
DTYPE = getattr(torch, os.environ.get("RECAP_TEST_DTYPE", "float32"))


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {family: tiny_models.build(family, root / family) for family in tiny_models.FAMILIES}


_TARGETS: dict[tuple[str, str], object] = {}


@pytest.fixture(scope="session")
def load_tiny(tiny_dirs: dict[str, Path]):
    """load_tiny(family, attn="sdpa") -> recap.Target, cached per session."""
    import recap

    def load(family: str, attn: str = "sdpa"):
        key = (family, attn)
        if key not in _TARGETS:
            _TARGETS[key] = recap.load_target(
                tiny_dirs[family], device=DEVICE, dtype=DTYPE, attn_implementation=attn
            )
        return _TARGETS[key]

    return load


@pytest.fixture(scope="session")
def real_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoints laid out as real ones ship (tests/real_models.py), built once per session."""
    import real_models

    return real_models.build_all(tmp_path_factory.mktemp("real-checkpoints"))


_REAL: dict[str, object] = {}


@pytest.fixture(scope="session")
def load_real(real_dirs: dict[str, Path]):
    """load_real(name) -> recap.Target of one real-files checkpoint (fp32), cached per session."""
    import recap

    def load(name: str):
        if name not in _REAL:
            _REAL[name] = recap.load_target(real_dirs[name], device=DEVICE, dtype=torch.float32)
        return _REAL[name]

    return load


#: The embedded shapes model the repository ships (a missing or broken asset fails, never skips).
SHAPES_DIR = Path(__file__).resolve().parent.parent / "assets" / "shapes-vlm"


@pytest.fixture(scope="session")
def shapes_target():
    """The embedded shapes model, fp32 on DEVICE, loaded once for every module that decodes it."""
    import recap

    return recap.load_target(None, device=DEVICE, dtype=torch.float32)


@pytest.fixture(scope="session")
def shapes_cpu(shapes_target):
    """The shapes model as ``recap.load_target()`` loads it on a CPU (the shipped example run's
    conditions): the session's model unless the tests run on another device."""
    import recap

    return shapes_target if DEVICE == "cpu" else recap.load_target(None, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def quick_bench(shapes_target) -> dict:
    """``recap.bench.bench`` on the quick suite (hf, pld, tr, recap; the default RecapConfig: fixed
    24-node trees, no timing in the trees), run once: its outputs are checked for identity with hf
    (tests/test_bench.py) and its tokens per step against a floor (tests/test_draft_quality.py)."""
    from recap import bench

    return bench.bench(shapes_target, suite="quick", methods=["hf", "pld", "tr", "recap"], repeats=1,
                       warmup=False, progress=False)
