"""App settings: which model, which limits, read once from the environment.

Environment variables (all optional):

RECAP_MODEL            the default model (local path or hub id); default: assets/shapes-vlm
RECAP_ALLOWED_MODELS   comma-separated models a visitor may load (public deployments);
                       unset: any supported model path or hub id may be typed in
RECAP_MAX_NEW_TOKENS   largest "max new tokens" accepted (default 512)
RECAP_STREAM_INTERVAL  least seconds between two streamed UI updates (default 0.25; charts: 4x)
RECAP_CONCURRENCY      decodes running at once across all visitors (default 2)
RECAP_WARM_MEMORY      folder of the warm memory new sessions start from (recap.shapes.warm_memory);
                       default: assets/warm-memory when the default model is the embedded one;
                       empty: sessions start with empty memories
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from recap.models import DEFAULT_MODEL_DIR, MAX_PROMPT_CHARS

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO_ROOT / "assets" / "examples"
WARM_MEMORY_DIR = REPO_ROOT / "assets" / "warm-memory"
METHOD_CHOICES: list[tuple[str, str]] = [
    ("RECAP", "recap"),
    ("Token Recycling", "tr"),
    ("Prompt lookup", "pld"),
    ("Autoregressive", "ar"),
]
METHOD_NAMES = {value: label for label, value in METHOD_CHOICES}
MEMORY_METHODS = ("recap", "tr")
PAPER_URL = "https://arxiv.org/abs/2611.05894"


def _env_int(name: str, default: int, lo: int, hi: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return min(max(value, lo), hi)


def _env_float(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def auto_budget_available() -> bool:
    """Whether the library can resolve ``budget="auto"`` (recap.autobudget exists)."""
    try:
        return importlib.util.find_spec("recap.autobudget") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Settings:
    default_model: str
    allowed_models: tuple[str, ...] = ()  # empty: unrestricted
    max_new_tokens: int = 512
    stream_interval: float = 0.25
    concurrency: int = 2
    max_prompt_chars: int = MAX_PROMPT_CHARS
    examples: list[dict] = field(default_factory=list)
    warm_memory: str = ""  # warm-memory folder for the default model ("": new memories start empty)

    @property
    def restricted(self) -> bool:
        return bool(self.allowed_models)

    def model_choices(self) -> list[str]:
        out = [self.default_model]
        out += [m for m in self.allowed_models if m != self.default_model]
        return out

    def check_model(self, name: str) -> str:
        """The model name a visitor asked for, if allowed; raises ValueError otherwise."""
        name = (name or "").strip()
        if not name:
            raise ValueError("type a model path or hub id first")
        if self.restricted and name not in self.model_choices():
            raise ValueError(
                f"{name!r} is not available in this deployment; choose one of: {', '.join(self.model_choices())}"
            )
        return name


def load_settings(model_path: str | os.PathLike[str] | None = None) -> Settings:
    default = str(model_path or os.environ.get("RECAP_MODEL") or DEFAULT_MODEL_DIR)
    allowed = tuple(m.strip() for m in os.environ.get("RECAP_ALLOWED_MODELS", "").split(",") if m.strip())
    return Settings(
        default_model=default,
        allowed_models=allowed,
        max_new_tokens=_env_int("RECAP_MAX_NEW_TOKENS", 512, 1, 4096),
        stream_interval=_env_float("RECAP_STREAM_INTERVAL", 0.25),
        concurrency=_env_int("RECAP_CONCURRENCY", 2, 1, 64),
        examples=load_examples(),
        warm_memory=warm_memory_dir(default),
    )


def warm_memory_dir(default_model: str) -> str:
    """$RECAP_WARM_MEMORY if set, else the shipped warm memory when the default model is the embedded one."""
    if "RECAP_WARM_MEMORY" in os.environ:
        return os.environ["RECAP_WARM_MEMORY"].strip()
    embedded = Path(default_model).resolve() == Path(DEFAULT_MODEL_DIR).resolve()
    return str(WARM_MEMORY_DIR) if embedded and (WARM_MEMORY_DIR / "provenance.json").is_file() else ""


def load_examples(directory: Path = EXAMPLES_DIR) -> list[dict]:
    """assets/examples/examples.json entries whose image exists, with absolute paths."""
    import json

    index = directory / "examples.json"
    try:
        entries = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or "file" not in entry or "prompt" not in entry:
            continue
        path = directory / str(entry["file"])
        if path.is_file():
            out.append({**entry, "path": str(path)})
    return out
