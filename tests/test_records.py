"""The kernels' records are built by name (issue 34): each plain-form constructor takes its record's
fields as keywords, in the record's order, so a call site cannot swap two fields of one type; and
every memory key comes from the one key builder (``recap.memory.rows.key_after``)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from recap.drafting import search, update
from recap.memory import rows
from recap.memory.rows import NONE, key_after, request_key


@pytest.mark.parametrize(
    ("make", "record"),
    [
        (search.plain_request, search.Request),
        (search.plain_scoring, search.Scoring),
        (update.plain_tree_rows, update.TreeRows),
        (update.plain_samples, update.Samples),
        (rows.plain_memory, rows.MemoryArrays),
    ],
)
def test_each_plain_constructor_takes_its_records_fields_by_name_in_order(make, record) -> None:
    params = inspect.signature(make).parameters.values()
    assert [p.name for p in params] == list(record._fields)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    values = {name: (object(),) for name in record._fields}  # distinct values: a swap shows
    assert make(**values) == tuple(record(**values))


def test_plain_settings_and_buffers_keep_the_field_order() -> None:
    fusion = search.Fusion(use_m2=True, use_m3=False, mode=1, eps=0.5, s1=1.0, s2=2.0, s3=4.0)
    settings = search.Settings(
        budget=7, max_depth=3, max_children=2, calibrate=True, suffix=False, suffix_lengths=(1, 2, 3),
        cost_aware=False, discount=0.9, prior=4.0, suffix_prior=0.5, fusion=fusion,
    )
    plain = search.plain_settings(settings)
    assert search.Settings(*plain[:-1], search.Fusion(*plain[-1])) == settings
    buf = search.draft_buffers(5, 3)
    assert search.named_buffers.py_func(search.plain_buffers(buf)) == buf


def test_one_key_builder() -> None:
    seq = np.array([5, 6, 7, 8], dtype=np.int64)
    assert request_key(seq, 0) == (NONE, NONE, NONE)
    assert request_key(seq, 1) == (NONE, NONE, 5)
    assert request_key(seq, 4) == (6, 7, 8)
    assert key_after(request_key(seq, 3), 9) == (6, 7, 9)
    # the prompt's keys: a chain from no key at all
    a, b, c = update.prompt_keys(seq, 4)
    assert [request_key(seq, i + 1) for i in range(4)] == list(zip(a.tolist(), b.tolist(), c.tolist()))
