"""The memories over Python objects (DESIGN.md section 2; ``recap.memory``'s reference): M1 a dict
token -> ``Entry``, M2 / M3 dicts key -> ``Entry`` (insertion order kept), image scopes of dicts,
the calibration counts. ``record`` files a pass's predictions under their keys, one ``Entry`` per
prediction shared by its keys, the latest write winning."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from recap.memory.rows import Entry
from recap.memory.scoped import MAX_AGE, MAX_IMAGES, MAX_ROWS

BINS = 10
Rows = dict[tuple[int, ...], Entry]


class Scopes:
    """``recap.memory.scoped.ScopedMemory`` over dicts."""

    def __init__(
        self, max_rows: int = MAX_ROWS, max_age: int = MAX_AGE, max_images: int = MAX_IMAGES
    ) -> None:
        self.max_rows, self.max_age, self.max_images = max_rows, max_age, max_images
        self.scopes: dict[str, list] = {}  # image key -> [m2, m3, last request]

    def open(self, image_key: str, request: int) -> tuple[Rows, Rows]:
        """The image's M2 / M3 for a new request: scopes unused for over max_age requests dropped, the
        image's rows as old dropped and its newest max_rows kept (by request, step, then insertion);
        it becomes the latest scope, and the least recently used beyond max_images are dropped."""
        oldest = request - self.max_age
        for key in [k for k, s in self.scopes.items() if s[2] < oldest]:
            del self.scopes[key]
        scope = self.scopes.pop(image_key, None)
        if scope is None:
            scope = [{}, {}, request]
        else:
            scope = [self._pruned(scope[0], oldest), self._pruned(scope[1], oldest), request]
        self.scopes[image_key] = scope
        while len(self.scopes) > self.max_images:
            del self.scopes[next(iter(self.scopes))]
        return scope[0], scope[1]

    def _pruned(self, rows: Rows, oldest: int) -> Rows:
        kept = {key: row for key, row in rows.items() if row.request >= oldest}
        if len(kept) <= self.max_rows:
            return kept
        ranked = sorted(
            enumerate(kept.items()), key=lambda item: (item[1][1].request, item[1][1].step, item[0])
        )
        newest = {i for i, _ in ranked[-self.max_rows :]}
        return {key: row for i, (key, row) in enumerate(kept.items()) if i in newest}


class Calibration:
    """The calibration counts: [class, bin] = [proposed, accepted]."""

    CONTEXT, TOKEN, SUFFIX = 0, 1, 2

    def __init__(self, prior: float = 4.0) -> None:
        self.prior = prior
        self.cells = np.zeros((3, BINS, 2), dtype=np.float64)

    def rate(self, cls: int, p: float) -> float:
        n, a = self.cells[cls, min(int(p * BINS), BINS - 1)].tolist()
        return (a + self.prior * p) / (n + self.prior)

    def update(self, classes: Iterable[int], probs: Iterable[float], accepted: Iterable[bool]) -> None:
        for cls, p, hit in zip(classes, probs, accepted):
            b = min(int(p * BINS), BINS - 1)
            self.cells[cls, b, 0] += 1.0
            if hit:
                self.cells[cls, b, 1] += 1.0


class TokenMemory:
    """M1 as a dict, the requests' count, the calibration and the image scopes."""

    def __init__(self, vocab_size: int, k: int, scopes: Scopes | None = None) -> None:
        self.vocab_size, self.k = vocab_size, k
        self.rows: dict[int, Entry] = {}
        self.next_uid = 0
        self.requests = 0
        self.calibration = Calibration()
        self.scopes = scopes or Scopes()

    @classmethod
    def read_back(cls, memory: object) -> TokenMemory:
        """The oracle of a ``recap`` memory just loaded from a file (rows read back, uids in token order)."""
        out = cls(memory.vocab_size, memory.k)  # type: ignore[attr-defined]
        filled = [t for t in range(memory.vocab_size) if int(memory.request[t]) >= 0]  # type: ignore[attr-defined]
        for uid, t in enumerate(filled):
            e = Entry(
                tuple(memory.ids[t].tolist()),
                tuple(memory.probs[t].tolist()),  # type: ignore[attr-defined]
                float(memory.entropy[t]),
                float(memory.concentration[t]),
                int(memory.request[t]),  # type: ignore[attr-defined]
                int(memory.step[t]),
                int(memory.depth[t]),
            )  # type: ignore[attr-defined]
            out.rows[t] = e._replace(q=e.normalised(), uid=uid)
        out.next_uid, out.requests = len(filled), len(memory.requests)  # type: ignore[attr-defined]
        out.calibration.cells[:] = memory.calibration.cells  # type: ignore[attr-defined]
        return out

    def lookup(self, token: int) -> Entry | None:
        return self.rows.get(token)


class RequestMemory:
    """A request's memories: the persistent M1, fresh (or the image's scoped) M2 / M3 dicts."""

    def __init__(
        self,
        m1: TokenMemory,
        *,
        image_token_ids: Iterable[int] = (),
        scope: str | None = None,
        use_context: bool = True,
        scoped: bool = False,
    ) -> None:
        self.m1, self.use_context = m1, use_context
        self.image_token_ids = frozenset(image_token_ids)
        self.request = m1.requests
        m1.requests += 1
        self.scoped = scoped and use_context and scope is not None
        self.m2, self.m3 = m1.scopes.open(scope, self.request) if self.scoped else ({}, {})  # type: ignore[arg-type]

    @property
    def k(self) -> int:
        return self.m1.k

    def record(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
        order: Sequence[int] | None = None,
    ) -> None:
        """File N predictions under their keys in ``order`` (latest write wins), one shared Entry each."""
        k = top_probs.shape[-1]
        probs = top_probs.float()
        q = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)
        h = torch.special.entr(q).sum(-1)
        conc = (1.0 - h / math.log(k)).clamp_(0.0, 1.0) if k > 1 else torch.ones_like(h)
        uid0 = self.m1.next_uid
        self.m1.next_uid += len(keys)
        entries = [
            Entry(tuple(ids), tuple(p), entropy, c, self.request, step, depth, tuple(qi), uid0 + i)
            for i, (ids, p, entropy, c, depth, qi) in enumerate(
                zip(top_ids.tolist(), probs.tolist(), h.tolist(), conc.tolist(), depths, q.tolist())
            )
        ]
        img = self.image_token_ids
        for i in range(len(keys)) if order is None else order:
            a, b, c = keys[i]
            if c in img:  # no key ends at (or holds) an image placeholder
                continue
            if 0 <= c < self.m1.vocab_size:
                self.m1.rows[c] = entries[i]
            if self.use_context and b is not None and b not in img:
                self.m2[(b, c)] = entries[i]
                if a is not None and a not in img:
                    self.m3[(a, b, c)] = entries[i]
