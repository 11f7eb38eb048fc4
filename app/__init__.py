"""RECAP Studio: the Gradio app over the ``recap`` library.

    from .ui import build_demo, launch
    demo = build_demo()           # or build_demo(model_path="path/to/model")
    launch(demo)

``app.demo`` (built on first access) is the Blocks object for Spaces and tests.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_demo", "demo"]


def __getattr__(name: str) -> Any:
    if name == "build_demo":
        from .ui import build_demo

        return build_demo
    if name == "demo":
        global demo
        from .ui import build_demo

        demo = build_demo()
        return demo
    raise AttributeError(f"module 'app' has no attribute {name!r}")
