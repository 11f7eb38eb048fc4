"""A warmed persistent memory for the embedded shapes model, built from training scenes.

A new visitor's memory is empty, so the first run's early steps draft nothing. The app
instead starts sessions from this memory: the M1 rows that decoding a few training-seed
scenes wrote. Only ``TRAIN_SEEDS`` scenes are decoded, never the evaluation seeds nor the
shipped examples, so the warm start shows recycling, not memorised answers.

    python -m recap.shapes.warm_memory --out assets/warm-memory

writes ``memory.safetensors`` (``TokenMemory.save``), ``provenance.json`` (per memory
request: the scene seed, the question kind, the prompt and the image fingerprint) and
``thumbs/scene_<seed>.png`` (small copies of the scene images, for the aliasing
inspector). ``load_warm(directory, vocab_size)`` reads them back.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from recap.memory.file import MemoryFileError
from recap.memory.store import TokenMemory
from recap.shapes.scene import EVAL_SEEDS, TRAIN_SEEDS, random_scene, render_scene_from

WARM_FORMAT = "recap-warm-memory"
DEFAULT_KINDS = ("describe", "detail", "where", "count", "color")
DEFAULT_SCENES = 12
FIRST_SEED = TRAIN_SEEDS.start + 4242  # any training seeds do; fixed so the asset is reproducible
THUMB_PX = 64
MAX_NEW_TOKENS = 160


@dataclass(frozen=True)
class WarmRequest:
    """One request that wrote into the warm memory."""

    request: int  # its number in the memory (TokenMemory.requests)
    seed: int  # the training scene
    kind: str
    prompt: str
    image_key: str | None
    thumbnail: str  # file name under thumbs/


@dataclass
class WarmMemory:
    memory: TokenMemory
    requests: list[WarmRequest]
    directory: Path
    model: str

    def thumbnail_path(self, request: int) -> Path | None:
        for r in self.requests:
            if r.request == request:
                path = self.directory / "thumbs" / r.thumbnail
                return path if path.is_file() else None
        return None


def training_plan(scenes: int = DEFAULT_SCENES, kinds: tuple[str, ...] = DEFAULT_KINDS,
                  first_seed: int = FIRST_SEED) -> list[tuple[int, str, str]]:
    """(seed, kind, prompt) for each request, scenes from TRAIN_SEEDS only."""
    plan = []
    rng = random.Random(first_seed)
    for seed in range(first_seed, first_seed + scenes):
        if seed not in TRAIN_SEEDS or seed in EVAL_SEEDS:
            raise ValueError(f"seed {seed} is not a training seed")
        scene = random_scene(seed)
        for kind in kinds:
            q = scene.question(kind, rng)
            if q is not None:
                plan.append((seed, kind, q.prompt))
    return plan


def build(model: str, out: Path, *, scenes: int = DEFAULT_SCENES, kinds: tuple[str, ...] = DEFAULT_KINDS,
          first_seed: int = FIRST_SEED, k: int = 8) -> WarmMemory:
    """Decode the plan with RECAP into one fresh memory; write the memory, provenance and thumbnails."""
    import recap
    from recap.models.inputs import image_key

    target = recap.load_target(model)
    memory = TokenMemory.for_target(target, k)
    out.mkdir(parents=True, exist_ok=True)
    (out / "thumbs").mkdir(exist_ok=True)
    for old in (out / "thumbs").glob("*.png"):  # a rebuild replaces the whole folder's contents
        old.unlink()
    requests: list[WarmRequest] = []
    for seed, kind, prompt in training_plan(scenes, kinds, first_seed):
        image = render_scene_from(random_scene(seed))
        request = len(memory.requests)  # the number generate() will register
        recap.generate(target, image, prompt, method="recap", max_new_tokens=MAX_NEW_TOKENS, memory=memory,
                       config=recap.RecapConfig(top_k=k, scoped_memory=True))
        assert memory.requests[request].prompt == prompt
        name = f"scene_{seed}.png"  # one thumbnail per scene, shared by its questions
        if not (out / "thumbs" / name).is_file():
            thumb = image.copy()
            thumb.thumbnail((THUMB_PX, THUMB_PX))
            thumb.save(out / "thumbs" / name, optimize=True)
        requests.append(WarmRequest(request, seed, kind, prompt, image_key(image), name))
    memory.save(out / "memory.safetensors")
    provenance = {"format": WARM_FORMAT, "model": target.name, "vocab_size": target.vocab_size, "k": k,
                  "requests": [asdict(r) for r in requests]}
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
    return WarmMemory(memory, requests, out, target.name)


def load_warm(directory: str | Path, vocab_size: int | None = None) -> WarmMemory:
    """Read a warm memory folder; MemoryFileError names what is wrong."""
    directory = Path(directory)
    prov_path = directory / "provenance.json"
    try:
        prov = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MemoryFileError(f"{prov_path}: cannot read the warm memory's provenance: {exc}") from exc
    if not isinstance(prov, dict) or prov.get("format") != WARM_FORMAT:
        raise MemoryFileError(f"{prov_path} is not a warm-memory provenance file (format {WARM_FORMAT!r})")
    memory = TokenMemory.load(directory / "memory.safetensors", vocab_size=vocab_size)
    try:
        requests = [WarmRequest(**r) for r in prov["requests"]]
    except (KeyError, TypeError) as exc:
        raise MemoryFileError(f"{prov_path}: malformed request list: {exc}") from exc
    if [r.request for r in requests] != list(range(len(memory.requests))):
        raise MemoryFileError(f"{prov_path}: provenance lists {len(requests)} requests, the memory {len(memory.requests)}")
    return WarmMemory(memory, requests, directory, str(prov.get("model", "")))


def main(argv: list[str] | None = None) -> None:
    from recap.models.target import DEFAULT_MODEL_DIR

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("assets/warm-memory"))
    ap.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    ap.add_argument("--scenes", type=int, default=DEFAULT_SCENES)
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS))
    args = ap.parse_args(argv)
    warm = build(args.model, args.out, scenes=args.scenes, kinds=tuple(k for k in args.kinds.split(",") if k))
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {args.out}: {len(warm.requests)} requests, {warm.memory.filled} rows filled, {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
