"""Hugging Face Spaces entry point: ``python app.py`` starts RECAP Studio.

Settings come from the environment (see app/settings.py and docs/app.md): RECAP_MODEL picks
the model (default: the embedded assets/shapes-vlm), RECAP_ALLOWED_MODELS what else visitors
may load. On a Space (SPACE_ID set) or with RECAP_PUBLIC=1 the app runs in public mode. It
listens on 127.0.0.1 locally and on 0.0.0.0 on a Space; GRADIO_SERVER_NAME overrides both.
The package ``app/`` holds the app itself.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app.ui import build_demo, launch  # noqa: E402

demo = build_demo()

if __name__ == "__main__":
    launch(demo)  # server_name: app.ui.server_name()
