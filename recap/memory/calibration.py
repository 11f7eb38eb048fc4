"""Online calibration of proposal probabilities into acceptance rates (persists with M1)."""

from __future__ import annotations

from collections.abc import Iterable

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
    ``update`` is the one place samples are counted (RECAP's drafter calls it after every
    verification); ``rate`` reads the estimate back.
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

    def clone(self) -> Calibration:
        out = Calibration(self.prior)
        out.table = [[cell[:] for cell in row] for row in self.table]
        return out

    def update(self, classes: Iterable[int], probs: Iterable[float], accepted: Iterable[bool]) -> None:
        """Count samples: a proposal of class ``classes[i]`` with probability ``probs[i]`` was
        accepted (``accepted[i]``) or not. Any iterables of equal length (read once, together)."""
        table, bins = self.table, self.BINS
        top = bins - 1
        for cls, p, hit in zip(classes, probs, accepted):
            b = int(p * bins)
            cell = table[cls][b if b < top else top]  # = _bin(p), inlined: a few dozen samples a step
            cell[0] += 1.0
            if hit:
                cell[1] += 1.0
