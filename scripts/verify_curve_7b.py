"""Verify time against tree size at the real Qwen2.5-VL-7B dimensions (random weights, text only).

The auto budget (recap.engine.autobudget) measures verify(b) on the model it runs; this script
gives it a real-size prior: a Qwen2.5-VL decoder with Qwen2.5-VL-7B-Instruct's text
dimensions (hidden 3584, 28 layers, 28 heads, 4 KV heads, intermediate 18944, vocab 152064)
and random weights, built directly on the device in the chosen dtype (no download, no
weights on disk). It times the engine's own verify step (``recap.engine.steps.verify``:
tree forward, logits processing, argmax, plus the memories' top-k) through
``autobudget.measure_verify_curve``, twice: under a plain greedy config and under the
config Qwen2.5-VL-7B-Instruct ships (repetition_penalty 1.05, top_k 1 sampling), which
adds the per-node logits processing over a 152k vocabulary.

    python scripts/verify_curve_7b.py --out device-check/              # CUDA, bf16, real size
    python scripts/verify_curve_7b.py --device cpu --dtype float32 \\
        --layers 1 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 --vocab 2000 \\
        --out /tmp/x  # smoke test

Writes ``verify-curve-7b.json`` into --out: per tree size (nodes, root included) the
minimum verify milliseconds, the fitted curve and the budget ``choose_budget`` picks.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from recap.engine import autobudget, costfit
from recap.models.families.registry import ADAPTERS
from recap.models.target import Target

#: Tree sizes timed (nodes, root included); the auto budget's own BUDGETS are drafted nodes.
TREE_SIZES = (1, 8, 16, 32, 64, 128)
QWEN25_VL_7B_SHIPPED = {
    "do_sample": True, "temperature": 0.1, "top_k": 1, "top_p": 0.001, "repetition_penalty": 1.05,
}


def build(args: argparse.Namespace) -> Target:
    """A random-weight Qwen2.5-VL at the given text dimensions, made directly on the device."""
    vocab = args.vocab
    # Qwen2.5-VL-7B's special ids when they fit, else the top of a small test vocabulary.
    real = vocab > 151656
    ids = dict(
        image_token_id=151655 if real else vocab - 3,
        video_token_id=151656 if real else vocab - 2,
        vision_start_token_id=151652 if real else vocab - 4,
        vision_end_token_id=151653 if real else vocab - 5,
    )
    eos = 151645 if real else vocab - 1
    half = args.hidden // args.heads // 2  # M-RoPE sections split half the head dim (7B: 16, 24, 24)
    sections = [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]
    text = dict(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=128000, rms_norm_eps=1e-6, eos_token_id=eos, bos_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": sections},
    )
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=args.hidden,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                  fullatt_block_indexes=[0])
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, eos_token_id=eos, **ids)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = Qwen2_5_VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(default)
    model.eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos, bos_token_id=None)
    name = f"qwen2.5-vl-7b-dims-random-L{args.layers}-H{args.hidden}"
    return Target(
        model=model, processor=None, adapter=ADAPTERS["qwen2_5_vl"], name=name, device=device, dtype=dtype
    )


def curve_ms(target: Target, budgets: list[int], args: argparse.Namespace) -> dict[int, float]:
    seconds = autobudget.measure_verify_curve(
        target, budgets, prompt_tokens=args.prompt_tokens, repeats=args.repeats, max_seconds=args.max_seconds
    )
    return {b: round(s * 1e3, 3) for b, s in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="device-check", help="output folder (verify-curve-7b.json goes there)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--hidden", type=int, default=3584)
    p.add_argument("--heads", type=int, default=28)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=18944)
    p.add_argument("--vocab", type=int, default=152064)
    p.add_argument("--prompt-tokens", type=int, default=512,
                   help="cached prefix before the tree (an image prompt's size)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-seconds", type=float, default=20.0, help="stop repeating after this much timing")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    target = build(args)
    build_s = time.perf_counter() - t0
    budgets = sorted({n - 1 for n in TREE_SIZES} | set(autobudget.BUDGETS))  # drafted nodes = tree size - 1
    result: dict = {
        "model": target.name,
        "dims": {
            k: getattr(args, k) for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab")
        },
        "parameters": sum(t.numel() for t in target.model.parameters()),
        "device": torch.cuda.get_device_name(0) if target.device.type == "cuda" else args.device,
        "dtype": args.dtype,
        "prompt_tokens": args.prompt_tokens,
        "build_s": round(build_s, 2),
        "curves": {},
    }
    saved = target.model.generation_config
    for label, fields in (("greedy", {}), ("qwen2.5-vl-7b-shipped-config", QWEN25_VL_7B_SHIPPED)):
        target.model.generation_config = GenerationConfig(**{**saved.to_dict(), **fields})
        ms = curve_ms(target, budgets, args)
        prior = {b: ms[b] / 1e3 for b in autobudget.BUDGETS}
        result["curves"][label] = {
            "verify_ms_by_tree_nodes": {str(n): ms[n - 1] for n in TREE_SIZES},
            "verify_ms_by_budget": {str(b): ms[b] for b in autobudget.BUDGETS},
            "fit_a_c1_c2_seconds": [round(c, 9) for c in costfit.fit_verify(prior)],
            "chosen_budget": autobudget.choose_budget(prior),
        }
    target.model.generation_config = saved
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify-curve-7b.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
