"""The boundary's errors: what a visitor reads when a request cannot be served (no Gradio here).

* ``UserError``: a problem with what the visitor asked for; its message is shown as is.
* ``redact``: any text shown to a visitor loses the server's own folders.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

#: The checkout the app runs from (``app.state.settings.REPO_ROOT`` is the same folder).
_APP_ROOT = Path(__file__).resolve().parents[2]


class UserError(Exception):
    """A problem with what the visitor asked for; the message is shown as is."""


def redact(text: str) -> str:
    """``text`` with the server's own folders (the app, temp and home directories) replaced by short tags."""
    temp = tempfile.gettempdir()
    roots = sorted({(str(_APP_ROOT), "<app>"), (str(Path(temp).resolve()), "<tmp>"), (temp, "<tmp>"),
                    (str(Path.home()), "~")}, key=lambda r: -len(r[0]))
    for root, tag in roots:
        if len(root) > 1:
            text = text.replace(root, tag)
    return text
