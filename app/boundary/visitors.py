"""Each visitor's session by its Gradio session hash, kept by the app (Gradio's own store is not public).

Gradio keeps every visitor's ``gr.State`` values itself and hands the unload hook (a tab or API client
disconnected) the request only. So every handler (``app.boundary.guard.guarded``) asks Gradio for its
request too, and ``VISITORS.seen`` records the ``Visitor`` it was handed (the app's ``Session``) under
the request's session hash; ``VISITORS.close`` closes and forgets it on unload. References are weak:
a session Gradio lets go of (over its session capacity, an hour after a close) is not kept alive here.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any


class Visitor:
    """What one visitor holds (``app.state.session.Session``): closed when the visitor leaves, reopened
    (a new visitor's again) when the same session hash comes back."""

    closed: bool

    def close(self) -> None:
        raise NotImplementedError

    def reopen(self) -> None:
        raise NotImplementedError


class Visitors:
    """Session hash -> that visitor's ``Visitor`` (weakly)."""

    def __init__(self) -> None:
        self._by_hash: weakref.WeakValueDictionary[str, Visitor] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def seen(self, session_hash: str | None, inputs: Iterable[Any]) -> None:
        """A handler of ``session_hash`` was handed ``inputs``: record the visitor's session among them.

        A session closed on unload whose hash comes back (a reconnect: Gradio keeps its state an hour) is
        reopened, a new visitor's, as Gradio would have made one had the app taken it out of its store.
        """
        if not session_hash:
            return
        for value in inputs:
            if isinstance(value, Visitor):
                if self._by_hash.get(session_hash) is not value or value.closed:
                    with self._lock:
                        if value.closed:
                            value.reopen()
                        self._by_hash[session_hash] = value
                return

    def get(self, session_hash: str) -> Visitor | None:
        return self._by_hash.get(session_hash)

    def close(self, session_hash: str | None) -> None:
        """The visitor left: its session is closed now (Gradio would keep it an hour) and forgotten."""
        with self._lock:
            visitor = self._by_hash.pop(session_hash, None) if session_hash else None
        if visitor is not None:
            visitor.close()

    def __len__(self) -> int:
        return len(self._by_hash)


#: The process's visitors (session hashes are unique across the demos of one process).
VISITORS = Visitors()
