"""The loading options of the command line (``generate`` and ``bench``), defined once: ``--dtype``
(``auto``: the checkpoint's), ``--device-map``, ``--revision``, ``--token``, and what they pass to
``recap.load_target``.

Argparse only: the parser must build without torch (``python -m recap --help`` stays instant).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def device_map_arg(text: str) -> str | dict[str, Any]:
    """``auto``, ``balanced``, ``sequential``, ``cpu``, ``cuda:0``... as given, or a JSON object of module
    name -> device (a GPU index, ``"cpu"`` or ``"disk"``)."""
    text = text.strip()
    if not text.startswith(("{", "[")):
        if not text:
            raise argparse.ArgumentTypeError("the device map is empty: give auto, a device or a JSON object")
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"the device map is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("the device map must be a JSON object of module name -> device")
    return value


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    """``--device``, ``--dtype``, ``--device-map``, ``--revision`` and ``--token`` on ``p``."""
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    p.add_argument("--dtype", default=None,
                   help="float32, bfloat16, float16 or auto (the checkpoint's own dtype); default: fp32 on "
                   "CPU, bf16 on CUDA (fp32 is token for token generate()'s; bf16 / fp16 may take the other "
                   "token of a tie within the dtype's rounding: docs/design.md, Precision)")
    p.add_argument("--device-map", default=None, type=device_map_arg, metavar="MAP",
                   help="instead of --device: transformers' device_map (auto, balanced, sequential, or a "
                   "JSON object of module name -> device), to split a model over GPUs or offload it "
                   "(needs accelerate)")
    p.add_argument("--revision", default=None, help="a hub id's branch, tag or commit (default: its main)")
    p.add_argument("--token", default=None,
                   help="hub token for a gated or private model (default: huggingface_hub's own, e.g. "
                   "$HF_TOKEN, which keeps it out of the shell history)")


def load_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """What ``recap.load_target`` gets from the parsed options (besides the model)."""
    return {"device": args.device, "dtype": args.dtype, "device_map": args.device_map,
            "revision": args.revision, "token": args.token}
