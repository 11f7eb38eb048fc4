"""Hugging Face Spaces entry point: ``python app.py`` starts RECAP Studio.

Settings come from the environment (see app/settings.py): RECAP_MODEL picks the model
(default: the embedded assets/shapes-vlm), RECAP_ALLOWED_MODELS restricts what
visitors may load. The package ``app/`` holds the app itself.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app.ui import build_demo, launch  # noqa: E402

demo = build_demo()

if __name__ == "__main__":
    launch(demo, server_name=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"))
