"""Image-scoped contextual memories: M2 / M3 rows that follow an image across a session's requests.

The contextual memories (M2, M3; ``recap.memory.store.ContextMemory``) are predictions the
target made while looking at one image. A visitor who asks several questions about the same
image would otherwise start every question with them empty. ``ScopedMemory`` keeps, per image
fingerprint (``recap.models.inputs.image_key``), the M2 and M3 rows written under that image,
and hands them to the next request on the same image.

Contract
--------
* ``open(image_key, request)`` returns the image's two tables (2-token keys, 3-token keys;
  ``recap.memory.context.ContextMemory``), pruned to the bounds below. They are the *live*
  tables: the request drafts from them and writes its own rows into them (latest write wins, as
  inside one request), so whatever the request's finished steps wrote stays for the next request
  on that image, even when it is stopped early. Another image's rows are never in them; a request
  without a scope never calls ``open`` (``RequestMemory`` decides).
* Bounds (deterministic, so the benchmark's repeats agree):
  - **age**: a row written by request ``r`` is carried into request ``q`` only while
    ``q - r <= max_age`` (request numbers are the persistent memory's, counting every request
    it has seen, on any image); an image none of whose requests is that recent is dropped;
  - **rows**: at most ``max_rows`` rows per table are carried into a request (the newest by
    (request, step); a request's own writes are not capped while it runs, as today);
  - **images**: at most ``max_images`` images are kept, the least recently opened dropped.
* ``clone()`` copies every table; ``clear()`` forgets all.
* Owners: a scope is named by ``scope_name(image_key, owner)``: requests of different owners on
  one ``TokenMemory`` open different scopes for the same image, so one owner's rows never reach
  another's drafts (``owner=None``: the memory's one owner, the scope named by the image key).

The store owns it (``TokenMemory.scoped``); the tables prune themselves (``ContextMemory.pruned``).
"""

from __future__ import annotations

from dataclasses import dataclass

from recap.memory.context import ContextMemory

__all__ = ["MAX_AGE", "MAX_IMAGES", "MAX_ROWS", "ImageScope", "ScopedMemory", "check_owner", "scope_name"]

#: Defaults of the bounds. On the embedded shapes model a request writes 60-200 contextual
#: rows per table, so 2,048 rows hold 10 or more questions' worth; 32 requests and 8 images
#: cover a visitor going back and forth between a few images, and keep a session's scopes to
#: a few MB at most.
MAX_ROWS = 2048
MAX_AGE = 32
MAX_IMAGES = 8


def check_owner(owner: object) -> None:
    """ValueError unless ``owner`` is None or a non-empty string."""
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise ValueError(f"owner must be a non-empty string or None, got {owner!r}")


def scope_name(image_key: str, owner: str | None) -> str:
    """The scope of ``image_key``'s rows for ``owner``: the image key itself for no owner, else a
    length-prefixed (owner, key) pair, which no other owner's name and no image key (hex, no ':')
    can spell."""
    check_owner(owner)
    return image_key if owner is None else f"{len(owner)}:{owner}:{image_key}"


@dataclass
class ImageScope:
    """The contextual rows one image's requests left: 2-token keys, 3-token keys."""

    m2: ContextMemory
    m3: ContextMemory
    last_request: int = -1  # the latest request that opened it


class ScopedMemory:
    """The image-scoped M2 / M3 rows of one persistent memory of top-k ``k`` (see the module docstring)."""

    def __init__(self, k: int = 8, *, max_rows: int = MAX_ROWS, max_age: int = MAX_AGE,
                 max_images: int = MAX_IMAGES) -> None:
        for name, value in (("max_rows", max_rows), ("max_age", max_age), ("max_images", max_images)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.k, self.max_rows, self.max_age, self.max_images = k, max_rows, max_age, max_images
        # image key -> its scope, least recently opened first (dicts keep insertion order)
        self.scopes: dict[str, ImageScope] = {}

    def __len__(self) -> int:
        """Number of images with a scope."""
        return len(self.scopes)

    def rows(self, image_key: str) -> int:
        """Rows held for ``image_key`` (both tables; 0 when it has no scope)."""
        scope = self.scopes.get(image_key)
        return 0 if scope is None else len(scope.m2) + len(scope.m3)

    def open(self, image_key: str, request: int) -> tuple[ContextMemory, ContextMemory]:
        """The live (M2 rows, M3 rows) of ``image_key`` for request number ``request``, pruned to the bounds.

        Called once per request, when the request's memories are made; costs one pass over the
        image's rows (a sort only when they exceed ``max_rows``).
        """
        if not isinstance(image_key, str) or not image_key:
            raise ValueError(f"an image scope needs an image fingerprint, got {image_key!r}")
        oldest = request - self.max_age
        for key in [k for k, s in self.scopes.items() if s.last_request < oldest]:
            del self.scopes[key]  # nothing in it is young enough to be carried
        scope = self.scopes.pop(image_key, None)
        if scope is None:
            scope = ImageScope(ContextMemory(2, self.k), ContextMemory(3, self.k))
        else:
            scope.m2 = scope.m2.pruned(oldest, self.max_rows)
            scope.m3 = scope.m3.pruned(oldest, self.max_rows)
        scope.last_request = request
        self.scopes[image_key] = scope  # now the most recently opened
        while len(self.scopes) > self.max_images:
            del self.scopes[next(iter(self.scopes))]
        return scope.m2, scope.m3

    def clone(self) -> ScopedMemory:
        """An independent copy: every table copied."""
        out = ScopedMemory(self.k, max_rows=self.max_rows, max_age=self.max_age, max_images=self.max_images)
        out.scopes = {
            key: ImageScope(s.m2.copy(), s.m3.copy(), s.last_request) for key, s in self.scopes.items()
        }
        return out

    def clear(self) -> None:
        """Forget every image's rows."""
        self.scopes.clear()
