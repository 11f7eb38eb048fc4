"""App settings: which models, which limits, read once from the environment.

Public mode (on when ``SPACE_ID`` is set, i.e. on a Hugging Face Space, or with
``RECAP_PUBLIC=1``; ``RECAP_PUBLIC=0`` turns it off) is for strangers: visitors load only
the listed models, the Benchmark tab only shows the shipped run, and the limits below
take their tighter public defaults. Locally (``python app.py``) the full power stays.
docs/app.md ("Deploying publicly") lists every variable; in short:

RECAP_MODEL            the default model (local path or hub id, optionally with loading options:
                       ``app.state.model_entry``); default: assets/shapes-vlm
RECAP_ALLOWED_MODELS   comma-separated further models (entries) a visitor may load; in public mode
                       nothing else loads, locally any model may be typed in when unset
RECAP_DATA_DIR         the app's data directory (benchmark runs); default: app-data/ in a checkout,
                       the user's cache (``$XDG_CACHE_HOME`` or ~/.cache, then recap-studio/) when
                       the app runs from an installed package
RECAP_STREAM_INTERVAL  least seconds between two streamed UI updates (default 0.25; charts: 4x)
RECAP_CONCURRENCY      decodes running at once across all visitors (default 2; public: 32,
``PUBLIC_CONCURRENCY``)
RECAP_WARM_MEMORY      folder of the warm memory new sessions start from (recap.shapes.warm_memory);
                       default: assets/warm-memory when the default model is the embedded one;
                       empty: sessions start with empty memories
and the limits of ``Limits`` (each ``RECAP_MAX_...``). When the default model is the embedded
one, the Decode tab opens on the shipped example run (``assets/example-run``, ``app.state.example``).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import recap.methods
from recap.core.assets import EXAMPLES, WARM_MEMORY
from recap.core.limits import MAX_PROMPT_CHARS
from recap.methods import Method, get_method
from recap.models.target import DEFAULT_MODEL_DIR
from recap.shapes.example_run import EXAMPLE_RUN_DIR

# A model entry (its spec and its parser) lives in app.state.model_entry; re-exported where the app reads it.
from .model_entry import (  # noqa: F401
    ModelSpec,
    canonical_source,
    is_local,
    model_specs,
    parse_entry,
    short_name,
)

REPO_ROOT = Path(__file__).resolve().parents[2]  # app/state/settings.py -> the checkout
EXAMPLES_DIR = EXAMPLES  # assets/examples (in an installed package: recap/assets/examples)
WARM_MEMORY_DIR = WARM_MEMORY
#: The method the app starts with and the one the memory panels fall back to.
DEFAULT_METHOD: Method = get_method("recap")
#: The model's own decoding: what every other method must reproduce token for token.
REFERENCE_METHOD: Method = get_method("ar")
PAPER_URL = "https://arxiv.org/abs/2611.05894"


# The methods are the library's registry (recap/methods.py), read at call time so that a drafter
# registered after this module was imported is listed too; the app only orders them.
def app_methods() -> tuple[Method, ...]:
    """Every registered method: the built-ins richest first (the registry goes from plain decoding up, so
    RECAP leads every choice), then the others in registration order."""
    builtins = recap.methods.REGISTRY
    return (*reversed(builtins), *(m for m in recap.methods.registered() if m not in builtins))


def method_labels() -> dict[str, str]:
    """Name -> label of every registered method (the names a request may ask for)."""
    return {m.name: m.label for m in app_methods()}


def method_choices() -> list[tuple[str, str]]:
    """(label, name) of every method, richest first: the choices of every method picker."""
    return [(m.label, m.name) for m in app_methods()]


def memory_methods() -> tuple[str, ...]:
    """Names of the methods that keep a persistent memory, richest first."""
    return tuple(m.name for m in app_methods() if m.keeps_memory)


def memory_choices() -> list[tuple[str, str]]:
    """(label, name) of the methods that keep a persistent memory: the choices of the memory panels."""
    return [(m.label, m.name) for m in app_methods() if m.keeps_memory]


@dataclass(frozen=True)
class Limits:
    """Ceilings of every expensive knob (per request or per session). Env: ``RECAP_`` + field name
    upper-cased.

    Public defaults (second value) are sized so that eight visitors at the ceilings leave a
    ninth a responsive app on a 2-core CPU (docs/app.md gives the measurement).
    """

    max_new_tokens: int = 512  # "max new tokens" of one request
    max_budget: int = 256  # drafted nodes per tree
    max_depth: int = 32  # tree depth
    max_children: int = 64  # children per expanded node
    max_tree_work: int = 256 * 32 * 64  # budget x depth x children of one request
    max_top_k: int = 64  # predictions per memory row (runs, saved and uploaded memories)
    max_trace_mb: int = 64  # size of an uploaded trace file
    max_trace_nodes: int = 200_000  # tree nodes of an uploaded trace, all steps together
    max_upload_mb: int = 600  # any upload (Gradio refuses bigger files before the app sees them)
    max_image_side: int = 2048  # longer side of a request's image (bigger ones are shrunk on receipt)
    max_runs: int = 50  # runs kept per session (oldest dropped first)
    max_uploaded_traces: int = 10  # uploaded traces kept per session (older ones dropped)
    cache_age_s: int = 24 * 3600  # files in Gradio's cache (uploads, downloads) are deleted after this
    max_queue: int = 0  # waiting jobs, all visitors together (0: unbounded)
    max_sessions: int = 10_000  # sessions kept in memory (the oldest are dropped)
    max_turns: int = 32  # user turns of one conversation (the first Run, then the follow-ups)
    max_conversation_tokens: int = 32_768  # prompt tokens of a follow-up's whole rendered conversation


PUBLIC_LIMITS = Limits(
    max_new_tokens=256,
    max_budget=64,
    max_depth=16,
    max_children=16,
    max_tree_work=64 * 16 * 8,
    max_top_k=16,
    max_trace_mb=8,
    max_trace_nodes=20_000,
    max_upload_mb=64,
    max_image_side=1536,
    max_runs=20,
    max_uploaded_traces=3,
    cache_age_s=3600,
    max_queue=64,
    max_sessions=1000,
    max_turns=6,
    max_conversation_tokens=4096,
)

#: Decodes at once in public mode (RECAP_CONCURRENCY): they take turns on the model step by step.
PUBLIC_CONCURRENCY = 32

# Hard bounds an operator's environment value is clamped into (a typo must not open the app up).
_LIMIT_BOUNDS: dict[str, tuple[int, int]] = {
    "max_new_tokens": (1, 4096),
    "max_budget": (1, 256),
    "max_depth": (1, 32),
    "max_children": (1, 64),
    "max_tree_work": (1, 256 * 32 * 64),
    "max_top_k": (1, 64),
    "max_trace_mb": (1, 1024),
    "max_trace_nodes": (1, 2_000_000),
    "max_upload_mb": (1, 4096),
    "max_image_side": (64, 8192),
    "max_runs": (1, 1000),
    "max_uploaded_traces": (1, 100),
    "cache_age_s": (60, 30 * 24 * 3600),
    "max_queue": (0, 100_000),
    "max_sessions": (10, 100_000),
    "max_turns": (1, 32),  # recap.engine.conversation.MAX_TURNS
    "max_conversation_tokens": (16, 262_144),
}


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


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def public_mode() -> bool:
    """On a Space (``SPACE_ID`` set) unless ``RECAP_PUBLIC=0``; anywhere with ``RECAP_PUBLIC=1``."""
    flag = _env_flag("RECAP_PUBLIC")
    return flag if flag is not None else bool(os.environ.get("SPACE_ID"))


def load_limits(public: bool) -> Limits:
    base = PUBLIC_LIMITS if public else Limits()
    values = {}
    for f in fields(Limits):
        lo, hi = _LIMIT_BOUNDS[f.name]
        values[f.name] = _env_int(f"RECAP_{f.name.upper()}", getattr(base, f.name), lo, hi)
    return Limits(**values)


# --------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Settings:
    default_model: str
    allowed_models: tuple[str, ...] = ()
    public: bool = False
    limits: Limits = field(default_factory=Limits)
    stream_interval: float = 0.25
    concurrency: int = 2
    max_prompt_chars: int = MAX_PROMPT_CHARS
    data_dir: Path = field(default_factory=lambda: default_data_dir())
    examples: list[dict] = field(default_factory=list)
    warm_memory: str = ""  # warm-memory folder for the default model ("": new memories start empty)
    # the shipped run the Decode tab opens on (``app.state.example``; "": it opens empty)
    example_run: str = ""

    @property
    def max_new_tokens(self) -> int:
        return self.limits.max_new_tokens

    @property
    def restricted(self) -> bool:
        """Visitors pick from a list (public mode, or an allowed list) instead of typing any model."""
        return self.public or bool(self.allowed_models)

    @functools.cached_property
    def models(self) -> tuple[ModelSpec, ...]:
        """The default model, then the allowed ones (resolved once: cached_property writes past the frozen
        fields)."""
        return model_specs(self.default_model, self.allowed_models)

    @property
    def default_spec(self) -> ModelSpec:
        return self.models[0]

    def model_choices(self) -> list[str]:
        return [s.name for s in self.models]

    def check_model(self, requested: str) -> ModelSpec:
        """The model a visitor asked for (a short name, or locally any path / hub id); ValueError otherwise.

        The refusal is the same sentence whatever was typed, so it never tells whether a
        server path exists.
        """
        requested = (requested or "").strip()
        if not requested:
            raise ValueError("choose a model first")
        for spec in self.models:
            if requested in (spec.name, spec.source, spec.key):
                return spec
        try:  # an entry: the source and its loading options (app.state.model_entry)
            typed: ModelSpec | None = parse_entry(requested)
        except OSError:  # e.g. a NUL byte or an over-long name
            typed = None
        except ValueError:
            if self.restricted:  # the same sentence as below: nothing typed is told apart
                typed = None
            else:
                raise
        for spec in self.models:
            if typed is not None and spec.key == typed.key:
                return spec
        if not self.restricted:
            if typed is None:
                raise ValueError("that is not a usable model path or hub id")
            return typed
        # The same sentence whatever was typed: it never tells whether a server path exists.
        raise ValueError(
            "that model is not available in this deployment; choose one of: "
            f"{', '.join(self.model_choices())}"
        )

    @property
    def bench_dir(self) -> Path:
        """Where the Benchmark tab writes its runs (one folder per run)."""
        return self.data_dir / "bench"


def default_data_dir(root: Path = REPO_ROOT) -> Path:
    """app-data/ beside the code in a checkout (its app.py next to app/); an installed package's
    folder is site-packages, no place for data: the user's cache then."""
    if (root / "app.py").is_file() and (root / "app").is_dir():
        return root / "app-data"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "recap-studio"


def load_settings(model_path: str | os.PathLike[str] | None = None) -> Settings:
    public = public_mode()
    default = str(model_path or os.environ.get("RECAP_MODEL") or DEFAULT_MODEL_DIR)
    allowed = tuple(m.strip() for m in os.environ.get("RECAP_ALLOWED_MODELS", "").split(",") if m.strip())
    data_dir = Path(os.environ.get("RECAP_DATA_DIR") or default_data_dir()).expanduser().resolve()
    return Settings(
        default_model=default,
        allowed_models=allowed,
        public=public,
        limits=load_limits(public),
        stream_interval=_env_float("RECAP_STREAM_INTERVAL", 0.25),
        # Public: enough decodes at once that a small one never queues behind long ones (they share the
        # model step by step); locally one person rarely runs more than two.
        concurrency=_env_int("RECAP_CONCURRENCY", PUBLIC_CONCURRENCY if public else 2, 1, 64),
        data_dir=data_dir,
        examples=load_examples(),
        warm_memory=warm_memory_dir(default),
        example_run=example_run_dir(default),
    )


def embedded(model: str) -> bool:
    """Whether ``model`` is the embedded shapes model (what the shipped memory and example were decoded
    with)."""
    try:
        source = parse_entry(model).source  # the entry may carry loading options
    except ValueError:
        return False
    return Path(source).resolve() == Path(DEFAULT_MODEL_DIR).resolve()


def warm_memory_dir(default_model: str) -> str:
    """$RECAP_WARM_MEMORY if set, else the shipped warm memory when the default model is the embedded one."""
    if "RECAP_WARM_MEMORY" in os.environ:
        return os.environ["RECAP_WARM_MEMORY"].strip()
    return (
        str(WARM_MEMORY_DIR)
        if embedded(default_model) and (WARM_MEMORY_DIR / "provenance.json").is_file()
        else ""
    )


def example_run_dir(default_model: str) -> str:
    """The shipped example run when the default model is the embedded one (its trace is of that model),
    else ""."""
    return (
        str(EXAMPLE_RUN_DIR)
        if embedded(default_model) and (EXAMPLE_RUN_DIR / "trace.json.gz").is_file()
        else ""
    )


def load_examples(directory: Path = EXAMPLES_DIR) -> list[dict]:
    """assets/examples/examples.json entries whose image exists, with absolute paths."""
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
