"""The memories' write path on the compiled kernels: what ``RequestMemory.record_block`` runs.

``recap.memory.store`` owns the memories; this module is the flat side of their write path
(``recap.memory.fastpath``): one kernel call files a step's predictions into the flat tables
(``recap.memory.rows``), which are the truth on this path; the dict views the rest of the library
reads (``TokenMemory.lookup`` / ``entries``, ``ContextMemory.rows``, the image scopes) are filled
from them when read, with the Entries and in the order the reference loop (``refwrite``) would
have left. It imports nothing from the store (the store imports it): the memories come in as
arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from recap.memory.rows import ContextTable, read_back_q, record_rows, unpack

NO_TABLES = (ContextTable(1, 16), ContextTable(1, 16))  # stand-ins where M2 / M3 are off (never written)


def next_uids(m1: Any, n: int) -> range:
    """The uids of a ``TokenMemory``'s next ``n`` predictions (each recorded prediction gets one)."""
    first = m1._next_uid
    m1._next_uid = first + n
    return range(first, first + n)


def read_back(m1: Any) -> None:
    """A ``TokenMemory`` whose tables were just read from a file: its rows' q as
    ``Entry.normalised()`` gives a row read back, and a fresh uid per filled row."""
    filled = np.flatnonzero(m1._np[3][:, 0] >= 0)
    m1._q[:] = read_back_q(m1._np[1])
    m1._uid[:] = -1
    m1._uid[filled] = np.arange(filled.size)
    m1._next_uid = int(filled.size)


def context_tables(mem: Any) -> tuple[ContextTable, ContextTable]:
    """A ``RequestMemory``'s M2 / M3 as flat tables, from its row dicts, attached to its views.

    An image scope's tables stay with M1 (``TokenMemory._context_tables``, at most one per scope
    M1 still keeps) and serve the scope's next request: as they are while they hold as many rows
    as its dicts, else cut to the dicts' keys (``ContextTable.subset``). Between requests the
    dicts only lose rows (pruning), and while one runs only this path writes both (a
    reference-path request on the scope drops its tables).
    """
    cache, key = mem.m1._context_tables, mem.scope if mem.scoped else None
    hit = cache.get(key) if key is not None else None
    made = []
    for view, table in zip((mem.m2, mem.m3), hit or (None, None)):
        rows = view.rows
        if table is not None and table.count != len(rows):  # the scope was pruned: keep what it kept
            table = table.subset(rows, view.n, len(rows))
        if table is None:
            table = ContextTable(mem.k)
            table.load(rows)
        made.append(table)
    tables = (made[0], made[1])
    for view, table in zip((mem.m2, mem.m3), tables):
        owner = getattr(table, "owner", None)
        if owner is not None and owner is not view:  # the scope's previous request: file its rows, let go
            owner.rows  # noqa: B018
            owner._table = None
        table.owner = view  # type: ignore[attr-defined]
        view._table = table
    if key is not None:
        cache.pop(key, None)
        for gone in [name for name in cache if name not in mem.m1._scoped.scopes]:
            del cache[gone]
        cache[key] = tables  # the most recently used last
    return tables


def sync_rows(view: Any, entry: type) -> None:
    """File into a ``ContextMemory``'s dict the keys its flat table logged, in first-write order,
    with their latest rows: what the reference's loop would have left in it."""
    sync_views([view], entry)


def sync_views(views: list, entry: type) -> None:
    """``sync_rows`` for several views at once, one Entry per prediction (uid) among them all: an
    M2 key and an M3 key written at one position share it, as the reference's do."""
    pending = [(view, view._table, view._table.pending()) for view in views if view._table is not None]
    pending = [(view, table, slots) for view, table, slots in pending if slots.size]
    if not pending:
        return
    irow = np.concatenate([table.irow[slots] for _, table, slots in pending])
    frow = np.concatenate([table.frow[slots] for _, table, slots in pending])
    uids, first, where = np.unique(irow[:, 0], return_index=True, return_inverse=True)
    made = unpack(entry, irow[first], frow[first])
    at = 0
    for view, table, slots in pending:
        keys = table.keys[slots, 3 - view.n:].tolist()
        view._rows.update(zip(map(tuple, keys), map(made.__getitem__, where[at: at + slots.size].tolist())))
        at += slots.size


def sync_all(m1: Any, entry: type) -> None:
    """File every row view the compiled path wrote behind (before the image scopes are read)."""
    views, m1._unsynced = m1._unsynced, []
    for view in views:
        view._logged = False
    sync_views(views, entry)


def sync_entries(m1: Any, entry: type) -> None:
    """Bring a ``TokenMemory``'s row view up to its table: every row whose Entry is missing or
    older than the row is read afresh (a pass over the filled rows; for readers of the whole
    view, not the hot path, which reads single rows through ``lookup``)."""
    m1._flush()
    rows, uids = m1._entries, m1._uid
    for token in np.flatnonzero(uids >= 0).tolist():
        e = rows.get(token)
        if e is None or e.uid != uids[token]:
            rows[token] = m1._read(token)
    m1._kernel_writes = False  # the view is current again, until the compiled path writes next


def block(mem: Any, top_ids: torch.Tensor, top_probs: torch.Tensor) -> tuple:
    """What filing a block of N predictions takes besides its keys (``rows.file_rows``'s arguments
    from ``ids`` on, less depths, request and step): the block's statistics (the reference's tensor
    ops), its first uid, M1's arrays, and the flat M2 / M3 with room for N more keys."""
    n = top_ids.shape[0]
    probs = top_probs if top_probs.dtype == torch.float32 else top_probs.float()
    q = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)  # (N, k) renormalised over k: the reference's ops
    h = torch.special.entr(q).sum(-1)  # (N,)
    context = mem.use_context
    t2, t3 = mem.context_tables() if context else NO_TABLES
    if context:
        t2.reserve(n)
        t3.reserve(n)
        if mem.scoped and not mem.m2._logged:  # an image scope's dicts: filed before the scopes are read
            mem.m2._logged = mem.m3._logged = True
            mem.m1._unsynced += (mem.m2, mem.m3)
    m1 = mem.m1
    m1._flush()  # rows a reference-path request left unflushed (none on this path)
    m1._kernel_writes = True
    return (top_ids.numpy(), probs.numpy(), q.numpy(), h.numpy(), next_uids(m1, n).start,
            *m1._np, m1._q, m1._uid, m1._hasq, context, *t2.arrays(), *t3.arrays()), (t2, t3)


def record_block(
    mem: Any,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    top_ids: torch.Tensor,
    top_probs: torch.Tensor,
    *,
    step: int,
    depths: Sequence[int],
    order: np.ndarray | None = None,
) -> None:
    """``RequestMemory.record`` with keys as (N,) int64 arrays (``rows.NONE`` where None).

    The same rows as the reference: q and the entropy are the same tensor ops, the
    concentration the same float32 arithmetic (``rows.concentration``); ``rows.record_rows``
    writes M1's table and the flat M2 / M3. No Python object per row: the dict views are filled
    from the tables when read (``TokenMemory.lookup`` / ``entries``, ``ContextMemory.rows``).
    """
    n = a.shape[0]
    if n == 0:
        return
    args, (t2, t3) = block(mem, top_ids, top_probs)
    ids, probs, q, h, uid0, *rest = args
    depth_arr = depths if isinstance(depths, np.ndarray) else np.asarray(depths, dtype=np.int64)
    new2, new3 = record_rows(a, b, c, np.arange(n, dtype=np.int64) if order is None else order, mem._img,
                             mem.m1.vocab_size, ids, probs, q, h, depth_arr, mem.request, step, uid0, *rest)
    t2.count += new2
    t3.count += new3
