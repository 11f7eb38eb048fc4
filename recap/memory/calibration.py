"""Online calibration of proposal probabilities into acceptance rates (persists with M1)."""

from __future__ import annotations

import numpy as np
import torch

from recap.memory.jit import njit

BINS = 10  # probability bins per class
#: The classes of evidence a proposal is counted under (``Calibration``).
CONTEXT, TOKEN, SUFFIX = 0, 1, 2


@njit
def bin_of(p):  # noqa: ANN001, ANN201
    """The bin of probability p (1.0 in the last)."""
    b = int(p * BINS)
    return b if b < BINS - 1 else BINS - 1


@njit
def acceptance_rate(cells, cls, p, prior):  # noqa: ANN001, ANN201
    """The estimated acceptance rate of a proposal of class ``cls`` at probability p:
    (accepted + prior p) / (proposed + prior) in its bin."""
    b = bin_of(p)
    return (cells[cls, b, 1] + prior * p) / (cells[cls, b, 0] + prior)


@njit
def count(cells, cls, p, hit):  # noqa: ANN001, ANN201
    """One sample: a proposal of class ``cls`` at probability p, accepted (``hit``) or not."""
    b = bin_of(p)
    cells[cls, b, 0] += 1.0
    if hit:
        cells[cls, b, 1] += 1.0


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
    RECAP's update counts its samples into ``cells`` (``recap.drafting.update.update_tree``, through
    ``count``); its draft reads the estimates (``acceptance_rate``). Under sampling only the nodes
    whose parent the walk drew at are samples: elsewhere the target's pick is its mode, not a draw.
    """

    CONTEXT, TOKEN, SUFFIX, BINS = CONTEXT, TOKEN, SUFFIX, BINS

    def __init__(self, prior: float = 4.0) -> None:
        self.prior = prior
        # [class, bin] = [proposed, accepted]: read by the drafting kernel every step
        # (``recap.drafting.search``) and counted into by the update
        self.cells = np.zeros((3, self.BINS, 2), dtype=np.float64)

    @property
    def table(self) -> list[list[list[float]]]:
        """The counts as nested lists, [class][bin] = [proposed, accepted] (a copy)."""
        return self.cells.tolist()  # type: ignore[no-any-return]

    @property
    def counts(self) -> torch.Tensor:
        """(3, BINS, 2) tensor of [proposed, accepted] counts (what is saved; a copy)."""
        return torch.from_numpy(self.cells.copy())

    def clone(self) -> Calibration:
        out = Calibration(self.prior)
        out.cells = self.cells.copy()
        return out
