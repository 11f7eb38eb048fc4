"""Prediction memories (DESIGN.md section 2).

At every position the target evaluates, its top-k next-token prediction is recorded
under keys ending at that position's input token:

* ``TokenMemory`` (M1): key ``(x_t)``; persistent across requests, one dense
  ``(V, k)`` row per vocabulary token (like Token Recycling's adjacency matrix),
  written with vectorised tensor ops; saved to / loaded from safetensors.
* ``ContextMemory`` (M2, M3): keys ``(x_{t-1}, x_t)`` and ``(x_{t-2}, x_{t-1}, x_t)``;
  request-local hash maps, created empty for every request, so they are implicitly
  conditioned on that request's image.
* ``RequestMemory`` bundles the three for one request and is what drafters use.

Rules: latest write wins; image placeholder tokens are never part of a key (a position
whose input is one is not recorded; a key that would reach back into one is dropped);
every entry keeps its provenance (request number, decode step, tree depth).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

MEMORY_FORMAT = "recap-token-memory"
MEMORY_VERSION = 1


class MemoryFileError(ValueError):
    """A memory file that cannot be used (foreign vocabulary, corrupt, wrong format)."""


class Entry(NamedTuple):
    """One recorded prediction: the target's top-k after a key, with provenance.

    A NamedTuple: immutable and cheap to build (thousands are written per request).
    """

    ids: tuple[int, ...]  # top-k token ids, most probable first
    probs: tuple[float, ...]  # their softmax probabilities under the full vocabulary
    entropy: float  # entropy (nats) of probs renormalised over the k tokens
    concentration: float  # 1 - entropy / log k, in [0, 1]
    request: int
    step: int
    depth: int
    q: tuple[float, ...] | None = None  # probs renormalised over the k tokens (what fusion mixes)

    def normalised(self) -> tuple[float, ...]:
        """probs renormalised to sum to 1 over the k tokens."""
        if self.q is not None:
            return self.q
        mass = sum(self.probs) or 1.0
        return tuple(p / mass for p in self.probs)

    def prob_of(self, token: int) -> float:
        """The probability this entry gave ``token`` (0 when outside its top-k)."""
        try:
            return self.probs[self.ids.index(token)]
        except ValueError:
            return 0.0


@dataclass(frozen=True)
class RequestInfo:
    """What the memory knows about a request that wrote into it (for provenance)."""

    image_key: str | None
    prompt: str


def entropy_stats(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy and concentration of top-k rows renormalised over k.

    probs: (N, k) non-negative. Returns entropy (N,) in nats and concentration (N,) in [0, 1].
    """
    k = probs.shape[-1]
    q = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)  # (N, k)
    h = torch.special.entr(q).sum(-1)  # (N,)  entr(x) = -x log x
    if k == 1:
        return h, torch.ones_like(h)
    return h, (1.0 - h / math.log(k)).clamp_(0.0, 1.0)


class Calibration:
    """Online calibration of proposal probabilities into acceptance rates.

    A memory's probability is the target's confidence *when the entry was written*; for
    an image-dependent slot filled under another image it is confidently wrong (the
    aliasing RECAP is about). Best-first search should rank paths by how often such a
    proposal is actually accepted. Every verified node is a sample: it was proposed with
    probability p by a class of evidence, and the target's argmax at its parent either
    equals its token or not. Counts are kept per (class, probability bin); a Beta prior of
    strength ``prior`` centred on p keeps early estimates close to p.

    Classes: ``CONTEXT`` (a 2- or 3-token memory of this request took part), ``TOKEN``
    (the 1-token memory alone), ``SUFFIX`` (a suffix-match proposal, p = 1).
    """

    CONTEXT, TOKEN, SUFFIX = 0, 1, 2
    BINS = 10

    def __init__(self, prior: float = 4.0) -> None:
        self.prior = prior
        # [class][bin] = [proposed, accepted]: plain lists, updated a few dozen times a step
        self.table: list[list[list[float]]] = [[[0.0, 0.0] for _ in range(self.BINS)] for _ in range(3)]

    @property
    def counts(self) -> torch.Tensor:
        """(3, BINS, 2) tensor of [proposed, accepted] counts (what is saved)."""
        return torch.tensor(self.table, dtype=torch.float64)

    def load_counts(self, counts: torch.Tensor) -> None:
        if tuple(counts.shape) != (3, self.BINS, 2):
            raise ValueError(f"calibration counts must have shape (3, {self.BINS}, 2), got {tuple(counts.shape)}")
        self.table = counts.tolist()

    def _bin(self, p: float) -> int:
        return min(int(p * self.BINS), self.BINS - 1)

    def rate(self, cls: int, p: float) -> float:
        """Estimated probability that a proposal of class ``cls`` with probability p is accepted."""
        n, a = self.table[cls][self._bin(p)]
        return (a + self.prior * p) / (n + self.prior)

    def update(self, classes: list[int], probs: list[float], accepted: list[bool]) -> None:
        table, bins = self.table, self.BINS
        for cls, p, hit in zip(classes, probs, accepted):
            cell = table[cls][min(int(p * bins), bins - 1)]
            cell[0] += 1.0
            if hit:
                cell[1] += 1.0


class TokenMemory:
    """M1: persistent 1-token memory, one top-k row per vocabulary token.

    Pass the same instance to successive ``recap.generate`` calls to keep it warm.
    """

    def __init__(self, vocab_size: int, k: int = 8) -> None:
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        self.vocab_size = vocab_size
        self.k = k
        self.ids = torch.zeros(vocab_size, k, dtype=torch.int64)  # (V, k)
        self.probs = torch.zeros(vocab_size, k, dtype=torch.float32)  # (V, k)
        # Per-row statistics and provenance live in two packed tensors so that a write is four
        # index_put_ calls; the named attributes are column views of them.
        self._stats = torch.zeros(vocab_size, 2, dtype=torch.float32)  # (V, 2): entropy, concentration
        self._prov = torch.zeros(vocab_size, 3, dtype=torch.int32)  # (V, 3): request, step, depth
        self._prov[:, 0] = -1  # -1 = empty row
        self.entropy = self._stats[:, 0]  # (V,)
        self.concentration = self._stats[:, 1]  # (V,)
        self.request = self._prov[:, 0]  # (V,)
        self.step = self._prov[:, 1]  # (V,)
        self.depth = self._prov[:, 2]  # (V,)
        self.requests: list[RequestInfo] = []
        self.calibration = Calibration()  # how often proposals are accepted: persists with the memory
        # Python-side view of rows already read, dropped for every key a write touches:
        # drafting reads the same rows many times per step, writing is vectorised.
        self._entries: dict[int, Entry | None] = {}

    @classmethod
    def for_target(cls, target: object, k: int = 8) -> TokenMemory:
        """An empty memory sized for a target's vocabulary (a ``recap.Target``)."""
        return cls(int(target.vocab_size), k)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ requests
    def begin_request(self, image_key: str | None, prompt: str) -> int:
        """Register a new request; returns its number (used as provenance)."""
        self.requests.append(RequestInfo(image_key, prompt))
        return len(self.requests) - 1

    def request_info(self, request: int) -> RequestInfo | None:
        return self.requests[request] if 0 <= request < len(self.requests) else None

    # ------------------------------------------------------------------ access
    @property
    def filled(self) -> int:
        """Number of rows that hold a prediction."""
        return int((self.request >= 0).sum())

    def __len__(self) -> int:
        return self.filled

    def lookup(self, token: int) -> Entry | None:
        try:
            return self._entries[token]
        except KeyError:
            pass
        entry = self._read(token)
        self._entries[token] = entry
        return entry

    def _read(self, token: int) -> Entry | None:
        if not 0 <= token < self.vocab_size or int(self.request[token]) < 0:
            return None
        return Entry(
            ids=tuple(self.ids[token].tolist()),
            probs=tuple(self.probs[token].tolist()),
            entropy=float(self.entropy[token]),
            concentration=float(self.concentration[token]),
            request=int(self.request[token]),
            step=int(self.step[token]),
            depth=int(self.depth[token]),
        )

    def write(
        self,
        keys: torch.Tensor,
        ids: torch.Tensor,
        probs: torch.Tensor,
        entropy: torch.Tensor,
        concentration: torch.Tensor,
        request: int,
        step: int,
        depths: torch.Tensor,
        entries: Sequence[Entry] | None = None,
    ) -> None:
        """Vectorised write of N rows; for repeated keys the last row wins.

        keys: (N,) token ids; ids / probs: (N, k); entropy / concentration / depths: (N,), all on
        the host like the table (the engine copies each pass's top-k there).
        entries: the same N rows as ``Entry`` objects, when the caller has built them
        (they then serve lookups directly, without reading the tensors back).
        """
        if keys.numel() == 0:
            return
        if ids.shape[-1] != self.k:
            raise ValueError(f"memory rows hold k={self.k} predictions, got {ids.shape[-1]}")
        # Keep only the last occurrence of each key (index_put_ with duplicates is unordered).
        key_list = keys.tolist()
        last = {key: i for i, key in enumerate(key_list)}
        if len(last) < len(key_list):
            keep = torch.tensor(sorted(last.values()))
            keys, ids, probs, entropy, concentration, depths = (
                t[keep] for t in (keys, ids, probs, entropy, concentration, depths)
            )
        if entries is not None:
            for key, i in last.items():
                self._entries[key] = entries[i]
        else:
            for key in last:
                self._entries.pop(key, None)
        keys = keys.to(torch.int64)
        self.ids[keys] = ids.to(torch.int64)
        self.probs[keys] = probs.to(torch.float32)
        self._stats[keys] = torch.stack([entropy, concentration], dim=1).to(torch.float32)  # (N, 2)
        prov = torch.empty(keys.shape[0], 3, dtype=torch.int32)  # (N, 3)
        prov[:, 0] = request
        prov[:, 1] = step
        prov[:, 2] = depths
        self._prov[keys] = prov

    def reset(self) -> None:
        """Forget every row and every request."""
        self.__init__(self.vocab_size, self.k)  # type: ignore[misc]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write to ``path`` as safetensors (tensors + JSON metadata), atomically. Never pickle.

        Raises ``MemoryFileError`` for a memory too large to save (k over ``MAX_MEMORY_K``).
        """
        from recap.memory_file import save_memory  # the file format module imports this one

        save_memory(self, path)

    @classmethod
    def load(cls, path: str | Path, *, vocab_size: int | None = None) -> TokenMemory:
        """Read a memory written by ``save``, checking every value first (``recap.memory_file``).

        A new memory, or ``MemoryFileError`` naming the file and the field; with
        ``vocab_size`` given, a memory made for another vocabulary is refused naming both sizes.
        """
        from recap.memory_file import load_memory  # the file format module imports this one

        return load_memory(path, vocab_size=vocab_size)


class ContextMemory:
    """M2 / M3: request-local memory keyed by the last ``n`` tokens (a hash map)."""

    def __init__(self, n: int) -> None:
        if n < 2:
            raise ValueError(f"a contextual memory has keys of 2 or more tokens, got {n}")
        self.n = n
        self._rows: dict[tuple[int, ...], Entry] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def lookup(self, key: tuple[int, ...]) -> Entry | None:
        return self._rows.get(key)

    def write(self, keys: Sequence[tuple[int, ...]], entries: Sequence[Entry]) -> None:
        for key, entry in zip(keys, entries):  # later entries overwrite earlier ones
            self._rows[key] = entry

    def items(self) -> Iterable[tuple[tuple[int, ...], Entry]]:
        return self._rows.items()


class RequestMemory:
    """The memories one request drafts from: the persistent M1 and fresh M2 / M3.

    ``lookup(context)`` returns the entries whose keys end the context, most specific
    first; ``record`` writes a batch of target predictions into all three.
    """

    def __init__(
        self,
        token_memory: TokenMemory,
        *,
        image_token_ids: Iterable[int] = (),
        image_key: str | None = None,
        prompt: str = "",
        use_context: bool = True,
    ) -> None:
        self.m1 = token_memory
        self.m2 = ContextMemory(2)
        self.m3 = ContextMemory(3)
        self.use_context = use_context
        self.image_token_ids = frozenset(int(t) for t in image_token_ids)
        self.image_key = image_key
        self.request = token_memory.begin_request(image_key, prompt)

    @property
    def k(self) -> int:
        return self.m1.k

    def lookup(self, context: Sequence[int]) -> list[tuple[str, Entry]]:
        """Entries for the context's last 3 / 2 / 1 tokens, most specific first."""
        found: list[tuple[str, Entry]] = []
        if not context:
            return found
        if self.use_context and len(context) >= 3:
            e3 = self.m3.lookup(tuple(context[-3:]))
            if e3 is not None:
                found.append(("m3", e3))
        if self.use_context and len(context) >= 2:
            e2 = self.m2.lookup(tuple(context[-2:]))
            if e2 is not None:
                found.append(("m2", e2))
        e1 = self.m1.lookup(context[-1])
        if e1 is not None:
            found.append(("m1", e1))
        return found

    def record(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
    ) -> None:
        """Record N target predictions.

        keys[i] = (x_{t-2}, x_{t-1}, x_t) for prediction i (None where the context is
        shorter); top_ids / top_probs: (N, k). Rows are written in order, so later rows
        win: callers put the accepted path last.
        """
        n = len(keys)
        if n == 0:
            return
        img = self.image_token_ids
        valid = [i for i, (_, _, c) in enumerate(keys) if c not in img]
        if not valid:
            return
        idx = torch.tensor(valid, dtype=torch.int64)
        ids, probs = top_ids[idx], top_probs[idx]  # (n', k)
        h, conc = entropy_stats(probs)
        depth_t = torch.tensor([depths[i] for i in valid], dtype=torch.int32)
        last = torch.tensor([keys[i][2] for i in valid], dtype=torch.int64)
        # One Entry per prediction, shared by M1's lookup view and the contextual memories.
        ids_l, probs_l, h_l, conc_l = ids.tolist(), probs.tolist(), h.tolist(), conc.tolist()
        q_l = (probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)).tolist()  # (n', k)
        request = self.request
        entries = [
            Entry(tuple(ids_l[j]), tuple(probs_l[j]), h_l[j], conc_l[j], request, step, depths[i], tuple(q_l[j]))
            for j, i in enumerate(valid)
        ]
        self.m1.write(last, ids, probs, h, conc, request, step, depth_t, entries)
        if not self.use_context:
            return
        # Contextual memories: plain Python rows (small, request-sized).
        k2: list[tuple[int, ...]] = []
        e2: list[Entry] = []
        k3: list[tuple[int, ...]] = []
        e3: list[Entry] = []
        for j, i in enumerate(valid):
            a, b, c = keys[i]
            if b is None or b in img:
                continue
            entry = entries[j]
            k2.append((b, c))
            e2.append(entry)
            if a is not None and a not in img:
                k3.append((a, b, c))
                e3.append(entry)
        self.m2.write(k2, e2)
        self.m3.write(k3, e3)
