"""Loading as GPU users load (issue 36, item 3): ``dtype="auto"`` takes the checkpoint's dtype, a
``device_map`` that offloads layers to disk decodes exactly as ``generate()`` under the same map, and a
hub id's ``revision`` and ``token`` reach every read of the checkpoint.

No network: the revision is proven on a hub cache laid out on disk (two revisions of one hub id, each
a different family, read with HF_HUB_OFFLINE=1), the token through recap's own seam
(``CheckpointFiles.hub``, the one place every read takes its hub arguments from).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accepted import TREES, AcceptedDrafts
from test_lossless import PROMPTS, make_image

import recap
from recap.models.files import CheckpointFiles
from recap.models.target import main_device

ROOT = Path(__file__).resolve().parent.parent
N = 24


def _resave(source: Path, out: Path, dtype: torch.dtype) -> Path:
    """A copy of a tiny checkpoint with its weights (and config.json's dtype) in ``dtype``."""
    import transformers

    shutil.copytree(source, out)
    arch = json.loads((source / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, arch).from_pretrained(source, dtype=dtype)
    model.save_pretrained(out)
    return out


def test_dtype_auto_takes_the_checkpoints_dtype(tiny_dirs, tmp_path: Path) -> None:
    bf16_dir = _resave(tiny_dirs["qwen2_5_vl"], tmp_path / "bf16", torch.bfloat16)
    assert json.loads((bf16_dir / "config.json").read_text())["dtype"] == "bfloat16"
    target = recap.load_target(bf16_dir, device="cpu", dtype="auto")
    assert target.dtype == torch.bfloat16
    assert {p.dtype for p in target.model.parameters()} == {torch.bfloat16}
    # the fp32 checkpoint under "auto" stays fp32; the default on a CPU is fp32 whatever was saved
    assert recap.load_target(tiny_dirs["qwen2_5_vl"], device="cpu", dtype="auto").dtype == torch.float32
    assert recap.load_target(bf16_dir, device="cpu").dtype == torch.float32
    out = recap.generate(target, make_image(1), PROMPTS[0], method="recap", max_new_tokens=8)
    assert len(out.token_ids) > 0


def test_bad_loading_arguments_are_named(tiny_dirs) -> None:
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        recap.load_target(tiny_dirs["qwen2_vl"], device="cpu", dtype="float8")
    with pytest.raises(ValueError, match="give device or device_map, not both"):
        recap.load_target(tiny_dirs["qwen2_vl"], device="cpu", device_map="cpu")


def _offload_map(family_dir: Path) -> dict[str, str]:
    """The text model's second decoder layer on disk, everything else on the CPU."""
    config = json.loads((family_dir / "config.json").read_text())
    layers = (config.get("text_config") or config)["num_hidden_layers"]
    assert layers >= 2
    mapping = {"model.visual": "cpu", "model.language_model.embed_tokens": "cpu",
               "model.language_model.norm": "cpu", "model.language_model.rotary_emb": "cpu", "lm_head": "cpu"}
    for i in range(layers):
        mapping[f"model.language_model.layers.{i}"] = "disk" if i == 1 else "cpu"
    return mapping


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_a_device_map_offloading_to_disk_decodes_as_generate_under_that_map(
    tiny_dirs, tmp_path: Path, family: str
) -> None:
    pytest.importorskip("accelerate")
    target = recap.load_target(tiny_dirs[family], device_map=_offload_map(tiny_dirs[family]),
                               offload_folder=tmp_path / "offload", dtype=torch.float32)
    # really offloaded: the layer's weights are not in memory, accelerate's hook reads them from disk per
    # pass (from the safetensors file itself: transformers writes no copy of a safetensors checkpoint)
    offloaded = target.model.model.language_model.layers[1]
    assert {p.device.type for p in offloaded.parameters()} == {"meta"}
    assert target.device == torch.device("cpu") == main_device(target.model)
    drafted = AcceptedDrafts(f"{family} offloaded")
    for seed, prompt in ((1, PROMPTS[0]), (3, PROMPTS[1]), (5, PROMPTS[2])):
        image = make_image(seed)
        inputs = recap.prepare_inputs(target, image, prompt)
        with torch.inference_mode():
            out = target.model.generate(**inputs, do_sample=False, max_new_tokens=N)
        reference = out[0, inputs["input_ids"].shape[1]:].tolist()
        for method in ("ar", "recap"):
            got = drafted.add(method, recap.generate(target, image, prompt, method=method, max_new_tokens=N,
                                                     config=TREES))
            assert got.token_ids == reference, f"{family}/{method}/seed {seed}"
    drafted.check()  # recap's trees had drafted tokens accepted: the offloaded layer verified trees


def test_the_hub_arguments_reach_every_read_and_the_token_is_never_shown() -> None:
    files = CheckpointFiles("org/model", "org/model", revision="v1", token="hf_secret")
    assert files.hub() == {"revision": "v1", "token": "hf_secret"}
    assert "hf_secret" not in repr(files)
    assert CheckpointFiles("org/model", "org/model").hub() == {}


# Run in a fresh interpreter: huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE when it is imported.
_HUB_SCRIPT = r"""
import json, sys
import recap
from recap.models import files as files_module

calls = []
real = files_module.CheckpointFiles.hub
def spy(self):
    calls.append(real(self))
    return real(self)
files_module.CheckpointFiles.hub = spy  # recap's own seam: every read takes its hub arguments from it

target = recap.load_target("org/tiny-vlm", device="cpu", revision=sys.argv[1], token="hf_not_sent_offline")
print(json.dumps({"family": target.family, "calls": calls}))
"""


def _hub_cache(root: Path, tiny_dirs) -> Path:
    """A hub cache holding org/tiny-vlm at two revisions: main (qwen2_vl) and v1 (llava)."""
    repo = root / "models--org--tiny-vlm"
    for ref, family in (("main", "qwen2_vl"), ("v1", "llava")):
        commit = ("a" if ref == "main" else "b") * 40
        shutil.copytree(tiny_dirs[family], repo / "snapshots" / commit)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return root


@pytest.mark.parametrize(("revision", "family"), [("main", "qwen2_vl"), ("v1", "llava")])
def test_a_hub_revision_chooses_the_snapshot_loaded(
    tiny_dirs, tmp_path: Path, revision: str, family: str
) -> None:
    cache = _hub_cache(tmp_path / "hub", tiny_dirs)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _HUB_SCRIPT, revision], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["family"] == family  # v1 is another family: the revision reached config, files and weights
    assert result["calls"] and all(c == {"revision": revision, "token": "hf_not_sent_offline"}
                                   for c in result["calls"])


# --------------------------------------------------------------------------- the command line


def test_the_command_line_loads_as_load_target_does(tiny_dirs, tmp_path: Path, capsys) -> None:
    from recap.__main__ import main

    bf16_dir = _resave(tiny_dirs["qwen2_vl"], tmp_path / "bf16", torch.bfloat16)
    base = ["generate", "--model", str(bf16_dir), "--prompt", "describe the image .", "--max-new-tokens", "4"]
    assert main([*base, "--dtype", "auto", "--device-map", "cpu"]) == 0
    assert "4 tokens" in capsys.readouterr().err
    # load_target's own refusal: the flags reached it
    assert main([*base, "--device", "cpu", "--device-map", "cpu"]) == 2
    assert "give device or device_map, not both" in capsys.readouterr().err


def test_bench_passes_every_loading_flag_to_the_loader() -> None:
    from recap.__main__ import build_parser
    from recap.bench.cli import main as bench_main

    seen: dict = {}

    class Loaded(Exception):
        pass

    def load(model, **kwargs):
        seen.update(model=model, **kwargs)
        raise Loaded

    args = build_parser().parse_args(
        ["bench", "--suite", "quick", "--model", "org/model", "--dtype", "auto", "--revision", "v2",
         "--token", "hf_x", "--device-map", '{"model.visual": 0, "lm_head": "cpu"}'])
    with pytest.raises(Loaded):
        bench_main(args, load=load)
    assert seen == {"model": "org/model", "device": None, "dtype": "auto", "revision": "v2", "token": "hf_x",
                    "device_map": {"model.visual": 0, "lm_head": "cpu"}}


@pytest.mark.parametrize(("flag", "says"), [("[1, 2]", "must be a JSON object"), ("{nope", "not valid JSON")])
def test_a_bad_device_map_is_named(flag: str, says: str, capsys) -> None:
    from recap.__main__ import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "hi", "--device-map", flag])
    assert says in capsys.readouterr().err
