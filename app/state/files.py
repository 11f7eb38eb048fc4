"""A session's files: request thumbnails (private) and downloads (served by Gradio), deleted with the session.

Downloads (``download``) go to a folder of their own in Gradio's cache (``files_root``), which
Gradio serves without a copy: each is on disk once. Its name is random (Gradio serves anything
in its cache by path); private files (request thumbnails) stay in ``tmpdir``, outside it.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import weakref
from pathlib import Path

from PIL import Image

THUMBNAIL_PX = 256


class SessionFiles:
    """The two folders of one session; ``remove()`` (or the session being collected) deletes both."""

    def __init__(self, files_root: Path | None = None) -> None:
        """``files_root``: where the downloads folder goes (Gradio's cache; None: inside ``tmpdir``)."""
        self.tmpdir = Path(tempfile.mkdtemp(prefix="recap-session-"))
        root = files_root if files_root is not None else self.tmpdir
        self.downloads = root / f"recap-{secrets.token_hex(16)}"  # made on the first download
        self.closed = False
        self._finalizer = weakref.finalize(self, _remove, (str(self.tmpdir), str(self.downloads)))

    def thumbnail(self, image: Image.Image | None, name: str) -> str | None:
        """Save a small copy of a request's image (``name``.png) for provenance views; None without one."""
        if image is None or self.closed:
            return None
        thumb = image.copy()
        thumb.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        path = self.tmpdir / f"{name}.png"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        thumb.save(path)
        return str(path)

    def private(self, path: str | None) -> bool:
        """Whether ``path`` is one of this session's own thumbnails (never a shipped warm-start one)."""
        return bool(path) and Path(path).parent == self.tmpdir

    def download(self, name: str, replaces: str) -> Path:
        """A path for a file handed to the visitor; the earlier downloads matching the glob ``replaces``
        are deleted first (one download of each kind per session: a session's files stay few)."""
        if self.closed:
            raise RuntimeError("this session has ended: reload the page")
        self.downloads.mkdir(parents=True, exist_ok=True)
        for old in self.downloads.glob(replaces):
            old.unlink(missing_ok=True)
        return self.downloads / name

    def remove(self) -> None:
        self.closed = True
        self._finalizer()


def _remove(folders: tuple[str, ...]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
