"""The memory drafters' update as kernels: the prefill's keys (``prompt_keys``), and a drafted tree's
whole update in one call (``update_tree``: its rows filed under the keys its draft left by
``recap.memory.rows.file_rows``, the accepted path last, then RECAP's calibration samples counted)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from recap.drafting.search import CLS, KA, KB, KC, PAR, PCAL, TOK
from recap.memory.calibration import count
from recap.memory.jit import njit
from recap.memory.rows import NONE, Keys, Predictions, Writer, file_rows, key_after, named_memory


class TreeRows(NamedTuple):
    """A tree a drafting kernel left (``recap.drafting.search``'s out_i / out_f, ``size`` nodes)."""

    out_i: np.ndarray
    out_f: np.ndarray
    size: int


def plain_tree_rows(*, out_i: np.ndarray, out_f: np.ndarray, size: int) -> tuple:
    """A ``TreeRows`` as a kernel call takes it, built by name (``update_tree`` names it again)."""
    return (out_i, out_f, size)


class Samples(NamedTuple):
    """What a verification says about a drafted tree's proposals."""

    cells: np.ndarray  # (3, BINS, 2) float64 the calibration counts (untouched unless ``calibrate``)
    calibrate: bool
    path: np.ndarray  # (P,) int64 the accepted nodes, the root first
    picked: np.ndarray  # (N,) int64 per node, the token the target emits after it
    drawn: np.ndarray  # (N,) bool per node, whether its pick is a sample (a draw, or greedy's decision)


def plain_samples(
    *, cells: np.ndarray, calibrate: bool, path: np.ndarray, picked: np.ndarray, drawn: np.ndarray
) -> tuple:
    """A ``Samples`` as a kernel call takes it, built by name."""
    return (cells, calibrate, path, picked, drawn)


@njit
def count_samples(cells, tree, samples):  # noqa: ANN001, ANN201
    """Node i's sample (class CLS, probability PCAL, accepted when the pick at its parent is its token)
    for every drafted node i = 1..size-1 whose parent's pick is a sample (``samples.drawn``), in order."""
    out_i, out_f, picked, drawn = tree.out_i, tree.out_f, samples.picked, samples.drawn
    for i in range(1, tree.size):
        parent = out_i[PAR, i]
        if drawn[parent]:
            count(cells, out_i[CLS, i], out_f[PCAL, i], picked[parent] == out_i[TOK, i])


@njit
def path_last(n, path):  # noqa: ANN001, ANN201
    """The write order of a verified tree's rows: every node off the path ascending, then the path."""
    on = np.zeros(n, dtype=np.bool_)
    for i in path:
        on[i] = True
    order = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if not on[i]:
            order[m] = i
            m += 1
    for i in path:
        order[m] = i
        m += 1
    return order


@njit
def prompt_keys(seq, m):  # noqa: ANN001, ANN201
    """The keys (a, b, c) ending at each of seq[:m], a chain from the request's first token (``NONE``:
    no token)."""
    keys = np.empty((3, m), dtype=np.int64)
    key = (NONE, NONE, NONE)
    for i in range(m):
        key = key_after(key, seq[i])
        keys[0, i], keys[1, i], keys[2, i] = key
    return keys[0], keys[1], keys[2]


@njit
def update_tree(tree_, samples_, rows, writer, mem):  # noqa: ANN001, ANN201
    """A drafted tree's update in one call, its records in plain form (``TreeRows``, ``Samples``,
    ``Predictions``, ``Writer``, ``MemoryArrays``): the rows filed under the nodes' keys with the
    accepted path last, then, with ``samples.calibrate``, every drafted node's calibration sample."""
    tree, samples = TreeRows(*tree_), Samples(*samples_)
    size, out_i = tree.size, tree.out_i
    order = path_last(size, samples.path)
    keys = Keys(a=out_i[KA, :size], b=out_i[KB, :size], c=out_i[KC, :size], order=order)
    file_rows(keys, Predictions(*rows), Writer(*writer), named_memory(mem))
    if samples.calibrate:
        count_samples(samples.cells, tree, samples)

