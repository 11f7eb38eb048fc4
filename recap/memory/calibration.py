"""Online calibration of proposal probabilities into acceptance rates (persists with M1)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


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
    (the 1-token memory alone), ``SUFFIX`` (a suffix-match proposal no memory made, counted
    at the drafter's nominal probability, ``recap.drafting.recap_drafter.SUFFIX_PRIOR``).
    Samples are counted by ``update`` (RECAP's drafter calls it after every verification) or,
    on the compiled path, by ``recap.drafting.fastupdate.count_samples`` into ``cells``, in the
    same order; ``rate`` reads the estimate back.
    """

    CONTEXT, TOKEN, SUFFIX = 0, 1, 2
    BINS = 10

    def __init__(self, prior: float = 4.0) -> None:
        self.prior = prior
        # [class, bin] = [proposed, accepted]: one float64 array, read by the compiled drafter
        # every step (``recap.drafting.fastdraft``) and updated by its update, or element by
        # element by ``update`` below (the reference path)
        self.cells = np.zeros((3, self.BINS, 2), dtype=np.float64)

    @property
    def table(self) -> list[list[list[float]]]:
        """The counts as nested lists, [class][bin] = [proposed, accepted] (a copy)."""
        return self.cells.tolist()  # type: ignore[no-any-return]

    @property
    def counts(self) -> torch.Tensor:
        """(3, BINS, 2) tensor of [proposed, accepted] counts (what is saved; a copy)."""
        return torch.from_numpy(self.cells.copy())

    def load_counts(self, counts: torch.Tensor) -> None:
        if tuple(counts.shape) != (3, self.BINS, 2):
            raise ValueError(f"calibration counts must have shape (3, {self.BINS}, 2), got {tuple(counts.shape)}")
        self.cells = counts.to(torch.float64).numpy().copy()

    def _bin(self, p: float) -> int:
        return min(int(p * self.BINS), self.BINS - 1)

    def rate(self, cls: int, p: float) -> float:
        """Estimated probability that a proposal of class ``cls`` with probability p is accepted."""
        n, a = self.cells[cls, self._bin(p)].tolist()
        return (a + self.prior * p) / (n + self.prior)

    def clone(self) -> Calibration:
        out = Calibration(self.prior)
        out.cells = self.cells.copy()
        return out

    def update(self, classes: Iterable[int], probs: Iterable[float], accepted: Iterable[bool]) -> None:
        """Count samples: a proposal of class ``classes[i]`` with probability ``probs[i]`` was
        accepted (``accepted[i]``) or not. Any iterables of equal length (read once, together)."""
        cells, bins = memoryview(self.cells), self.BINS  # a memoryview: cheap element access from Python
        top = bins - 1
        for cls, p, hit in zip(classes, probs, accepted):
            b = int(p * bins)
            b = b if b < top else top  # = _bin(p), inlined: a few dozen samples a step
            cells[cls, b, 0] += 1.0
            if hit:
                cells[cls, b, 1] += 1.0
