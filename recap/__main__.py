"""Command line: ``recap generate ...`` and ``recap bench ...`` (or ``python -m recap ...``).

The ``recap`` console script (``pyproject.toml``, ``[project.scripts]``) calls ``main``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import recap  # light: its names import on first use, so the help needs neither torch nor transformers
from recap.engine.sampling_args import add_sampling_arguments, sampling_fields
from recap.models.load_args import add_load_arguments, load_kwargs


def _method_arg(name: str) -> str:
    try:
        return recap.get_method(name).name
    except ValueError as exc:  # argparse prints it as "argument --method: ..."
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="decode one image + prompt and print the text and a summary",
        description="Decode one request with a chosen method; output equals the model's own generate() under "
        "its generation config: greedy, or with --temperature / --top-p / --top-k sampled, and under the "
        "same seed the same tokens as generate(do_sample=True).",
    )
    p.add_argument("--image", default=None, help="image file (omit for a text-only prompt)")
    p.add_argument("--prompt", required=True, help="the user prompt")
    p.add_argument("--method", default="recap", type=_method_arg, metavar="METHOD",
                   help="decoding method: a registered method's name (default: recap; a wrong name lists "
                   "them)")
    p.add_argument("--model", default=None,
                   help="model directory or hub id (default: the embedded shapes model)")
    add_load_arguments(p)  # --device, --dtype, --device-map, --revision, --token
    p.add_argument("--max-new-tokens", type=int, default=128, help="generation limit (default: 128)")
    p.add_argument("--budget", default=None,
                   help="tree node budget: an integer or 'auto' (default: RecapConfig's)")
    p.add_argument("--memory", default=None,
                   help="persistent 1-token memory file: loaded if present, saved after")
    p.add_argument("--trace", default=None, metavar="OUT.json", help="write the decode trace as JSON")
    p.add_argument("--check", action="store_true",
                   help="also run the model's own greedy generate() and compare: identical, a bf16 / fp16 "
                   "tie (named, with its gap), or an error (exit status 1)")
    add_sampling_arguments(p, "seed the draws with a private generator (omitted: torch's default generator, "
                           "unseeded); a greedy config ignores it")
    p.set_defaults(func=_generate)


def _generate(args: argparse.Namespace) -> int:
    from pathlib import Path

    config = recap.RecapConfig()
    if args.budget is not None:
        budget = args.budget if args.budget == "auto" else int(args.budget)
        config = recap.RecapConfig(budget=budget)
    target = recap.load_target(args.model, **load_kwargs(args))
    memory = None
    if args.memory and Path(args.memory).is_file():
        memory = recap.TokenMemory.load(args.memory, vocab_size=target.vocab_size)
    elif recap.get_method(args.method).keeps_memory:
        memory = recap.TokenMemory.for_target(target, config.top_k)
    out = recap.generate(
        target,
        args.image,
        args.prompt,
        method=args.method,
        max_new_tokens=args.max_new_tokens,
        memory=memory,
        config=config,
        trace=args.trace is not None,
        generation_config=sampling_fields(args),
        seed=args.seed,
    )
    print(out.text)
    print(
        f"[{args.method}] {len(out.token_ids)} tokens, {out.decode_steps} steps, "
        f"MAT {out.mat:.2f}, {out.tokens_per_second:.1f} tokens/s ({out.stop_reason})",
        file=sys.stderr,
    )
    from recap.trace.stats import generation_line  # here: it imports torch, and --help must not

    print(generation_line(out), file=sys.stderr)
    if args.trace:
        assert out.trace is not None
        out.trace.to_json(args.trace)
        print(f"trace written to {args.trace}", file=sys.stderr)
    if args.memory and memory is not None:
        memory.save(args.memory)
    return _check(args, target, out.token_ids) if args.check else 0


def _check(args: argparse.Namespace, target: recap.Target, tokens: list[int]) -> int:
    """``--check``: the decode against generate()'s (docs/design.md, Precision); 1 when it is no tie."""
    from recap.verification.ties import check_against_generate

    inputs = recap.prepare_inputs(target, args.image, args.prompt)
    same, sentence = check_against_generate(target, inputs, tokens, generation_config=sampling_fields(args))
    print(f"check: {sentence or 'identical to generate()'}", file=sys.stderr)
    return EXIT_OK if same else EXIT_DIFFERS


def _add_app(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "app",
        help="start RECAP Studio, the app (http://127.0.0.1:7860 by default)",
        description="Start the Gradio app from this installation (the package recap_studio, or app/ in a "
        "checkout). Settings come from the environment as for `python app.py` (docs/app.md): RECAP_MODEL, "
        "RECAP_PUBLIC, RECAP_DATA_DIR, GRADIO_SERVER_NAME, GRADIO_SERVER_PORT.",
    )
    p.add_argument("--model", default=None, help="the default model (a folder or hub id; default: the "
                   "embedded shapes model, or RECAP_MODEL)")
    p.add_argument("--port", type=int, default=None, help="the port (default: GRADIO_SERVER_PORT or 7860)")
    p.set_defaults(func=_app)


def studio() -> Any:
    """The app's top module: ``recap_studio.ui`` where the wheel put it, else ``app.ui`` (a checkout)."""
    import importlib
    import importlib.util

    name = "recap_studio.ui" if importlib.util.find_spec("recap_studio") is not None else "app.ui"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in ("app", "recap_studio"):
            raise
        raise RuntimeError("the app is not installed with this package: install recap-studio with its app "
                           "(pip install recap-studio) or run from a checkout") from None


def _app(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    ui = studio()
    demo = ui.build_demo(args.model)
    ui.launch(demo, **({"server_port": args.port} if args.port else {}))
    return EXIT_OK


def _prog() -> str:
    """``recap`` when the console script runs, else ``python -m recap``."""
    from pathlib import Path

    return "recap" if Path(sys.argv[0]).stem == "recap" else "python -m recap"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="RECAP: lossless speculative decoding for vision-language models by prediction "
        "recycling.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s (recap-studio) {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{generate,bench,app}")
    _add_generate(sub)
    _add_app(sub)
    from recap.bench.cli import add_parser as add_bench

    add_bench(sub)
    return parser


#: Exit statuses: what a script calling ``recap`` can tell apart.
EXIT_OK = 0
EXIT_DIFFERS = 1  # the output differs from generate()'s and is no tie (--check, bench's lossless check)
EXIT_USAGE = 2  # a bad argument or input: the command line, a prompt, a setting, an image (argparse's too)
EXIT_RUNTIME = 3  # the run could not be done: a model that does not load, a file not readable or writable
EPILOG = (f"exit status: {EXIT_OK} done; {EXIT_DIFFERS} an output differs from generate() (not a tie); "
          f"{EXIT_USAGE} a bad argument or input; {EXIT_RUNTIME} a model or file that could not be used")


def version() -> str:
    """The installed distribution's version, or the checkout's (pyproject.toml) when not installed."""
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version("recap-studio")
    except metadata.PackageNotFoundError:
        import re

        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
        found = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)
        return found.group(1) if found else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # recap.core.errors.InputError, PluginError and every setting's check
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (RuntimeError, OSError) as exc:  # ModelLoadError, a missing, unreadable or unwritable file
        print(f"error: {_sentence(exc)}", file=sys.stderr)
        return EXIT_RUNTIME


def _sentence(exc: BaseException) -> str:
    """An OSError in one line naming its file ("permission denied: out/trace.json"), else its message."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.strerror.lower()}: {exc.filename}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
