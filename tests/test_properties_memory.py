"""Property tests: memories, their files, calibration and clones behave as DESIGN.md section 2 says."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_properties import IMAGE, K, V, record, warm_memory  # the shared strategies and the "recap" profile

from recap.core.config import RecapConfig
from recap.drafting.protocol import DraftState
from recap.drafting.recap_drafter import RecapDrafter
from recap.memory.file import MemoryFileError
from recap.memory.store import ContextMemory, RequestMemory, TokenMemory

# --------------------------------------------------------------------------- memories


@given(warm_memory())
def test_lookup_returns_the_latest_write_for_each_key(mem_seq):
    seq, mem = mem_seq
    for t in set(seq) - {IMAGE}:
        last = max(i for i, x in enumerate(seq) if x == t)
        e = mem.m1.lookup(t)
        assert e is not None and e.request == mem.request
        # the M2 entry written at the same position agrees with M1 when it is the latest for both
        if last >= 1 and seq[last - 1] != IMAGE:
            e2 = mem.m2.get((seq[last - 1], t))
            later2 = any(seq[j - 1 : j + 1] == [seq[last - 1], t] for j in range(last + 1, len(seq)))
            if not later2:
                assert e2 is not None and e2.ids == e.ids
    assert mem.m1.lookup(IMAGE) is None


@given(st.lists(st.integers(0, V - 1), min_size=3, max_size=30))
def test_image_tokens_are_never_part_of_a_key(seq):
    seq = [IMAGE if i % 4 == 1 else t for i, t in enumerate(seq)]
    mem = RequestMemory(TokenMemory(V, K), image_token_ids=[IMAGE])
    ids, probs = torch.randint(0, V, (len(seq), K)), torch.full((len(seq), K), 0.25)
    pre = [None, None, *seq]
    record(mem, [(pre[t], pre[t + 1], pre[t + 2]) for t in range(len(seq))], ids, probs, step=0,
               depths=[0] * len(seq))
    assert mem.m1.lookup(IMAGE) is None
    assert all(IMAGE not in key for key in mem.m2)
    assert all(IMAGE not in key for key in mem.m3)


def test_contextual_memories_are_empty_at_request_start_and_m1_persists():
    m1 = TokenMemory(V, K)
    first = RequestMemory(m1, prompt="a")
    record(first, [(1, 2, 3)], torch.tensor([[4, 5, 6, 8]]), torch.full((1, K), 0.25), step=1, depths=[1])
    assert len(first.m2) == 1 and len(first.m3) == 1
    second = RequestMemory(m1, prompt="b")
    assert len(second.m2) == 0 and len(second.m3) == 0
    assert second.m1.lookup(3) is not None and second.request == first.request + 1


@given(warm_memory())
def test_save_load_round_trip(tmp_path_factory, mem_seq):
    _, mem = mem_seq
    path = tmp_path_factory.mktemp("mem") / "m.safetensors"
    mem.m1.save(path)
    back = TokenMemory.load(path, vocab_size=V)
    for name in ("ids", "probs", "entropy", "concentration", "request", "step", "depth"):
        assert torch.equal(getattr(back, name), getattr(mem.m1, name))
    assert back.requests == mem.m1.requests


def test_loading_a_memory_of_another_vocabulary_is_refused(tmp_path):
    path = tmp_path / "m.safetensors"
    TokenMemory(V, K).save(path)
    with pytest.raises(MemoryFileError, match="vocabulary of 40 tokens; this model has 41"):
        TokenMemory.load(path, vocab_size=V + 1)


def test_loading_a_file_that_is_not_a_memory_is_refused(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"not a safetensors file at all")
    with pytest.raises(MemoryFileError, match="not a RECAP memory file"):
        TokenMemory.load(path)


def test_context_memory_needs_two_or_more_tokens():
    with pytest.raises(ValueError):
        ContextMemory(1)


# --------------------------------------------------------------------------- calibration


@given(st.floats(0.0, 1.0), st.integers(1, 50))
def test_calibration_moves_from_the_prior_towards_observed_acceptance(p, n):
    from recap.memory.calibration import Calibration, acceptance_rate, count

    cal = Calibration()

    def rate(cls: int) -> float:
        return acceptance_rate(cal.cells, cls, p, cal.prior)

    assert rate(Calibration.TOKEN) == pytest.approx(p)
    for _ in range(n):
        count(cal.cells, Calibration.TOKEN, p, False)
    assert rate(Calibration.TOKEN) <= p
    assert rate(Calibration.CONTEXT) == pytest.approx(p)  # other classes untouched
    for _ in range(3 * n):
        count(cal.cells, Calibration.TOKEN, p, True)
    assert rate(Calibration.TOKEN) >= 0.7 * p


def test_calibration_is_saved_with_the_memory(tmp_path):
    from recap.memory.calibration import Calibration, count

    mem = TokenMemory(V, K)
    for hit in (True, False, True, True, True):
        count(mem.calibration.cells, Calibration.SUFFIX, 0.5, hit)
    mem.save(tmp_path / "m.safetensors")
    back = TokenMemory.load(tmp_path / "m.safetensors")
    assert torch.equal(back.calibration.counts, mem.calibration.counts)


# --------------------------------------------------------------------------- clone


def _same_state(a: object, b: object, path: str) -> None:
    """a and b hold equal values in independent containers (Entries are immutable and may be shared)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), path
        assert a.data_ptr() != b.data_ptr(), f"{path} shares storage"
    elif isinstance(a, np.ndarray):  # the memories' arrays (recap.memory.rows)
        assert isinstance(b, np.ndarray) and np.array_equal(a, b), path
        assert not np.shares_memory(a, b), f"{path} shares storage"
    elif isinstance(a, tuple) and any(isinstance(x, np.ndarray) for x in a):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_state(x, y, f"{path}[{i}]")
    elif isinstance(a, (list, dict, set)):
        assert type(a) is type(b) and a == b, path
        assert a is not b or not a, f"{path} is shared"
        if isinstance(a, list):
            for i, (x, y) in enumerate(zip(a, b)):
                _same_state(x, y, f"{path}[{i}]")
    elif hasattr(a, "__dict__") and not getattr(getattr(a, "__dataclass_params__", None), "frozen", False):
        assert type(a) is type(b) and a is not b, f"{path} is shared"
        assert set(vars(a)) == set(vars(b)), path
        for name in vars(a):
            _same_state(getattr(a, name), getattr(b, name), f"{path}.{name}")
    else:
        assert a == b, path


@given(warm_memory())
def test_clone_copies_everything_a_drafter_reads(mem_seq):
    seq, mem = mem_seq
    from recap.memory.calibration import Calibration, count

    for hit in (True, False, True, True, False, True):
        count(mem.m1.calibration.cells, Calibration.TOKEN, 0.3, hit)
    copy = mem.m1.clone()
    _same_state(mem.m1, copy, "memory")  # every attribute, calibration included, equal and independent
    again = RequestMemory(copy, image_token_ids=[IMAGE])
    cfg = RecapConfig(budget=16, top_k=K, use_m2=False, use_m3=False, cost_aware=False)
    fresh = RequestMemory(mem.m1, image_token_ids=[IMAGE])
    a = RecapDrafter(fresh, cfg, 16).draft(DraftState(seq))
    b = RecapDrafter(again, cfg, 16).draft(DraftState(seq))
    assert (a.tokens, a.parents, a.scores) == (b.tokens, b.parents, b.scores)
    count(copy.calibration.cells, Calibration.TOKEN, 0.3, True)
    record(RequestMemory(copy), [(None, None, seq[0])], torch.tensor([list(range(K))]),
                               torch.tensor([[0.4, 0.3, 0.2, 0.1]]), step=1, depths=[1])
    assert mem.m1.calibration.table != copy.calibration.table and mem.m1.lookup(seq[0]) != copy.lookup(seq[0])


def test_recorded_rows_reach_the_tables_and_the_saved_file(tmp_path):
    mem = TokenMemory(V, K)
    first, second = RequestMemory(mem, prompt="a prompt"), RequestMemory(mem, prompt="a prompt")
    # one batch writing token 3 twice: the later row wins (callers put the accepted path last)
    record(first, [(None, None, 3), (None, None, 9), (None, None, 3)],
                 torch.tensor([[1, 2, 4, 5], [6, 2, 4, 5], [7, 2, 4, 5]]),
                 torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1], [0.6, 0.2, 0.1, 0.1]]), step=2,
                 depths=[1, 2, 1])
    assert mem.ids[3].tolist() == [7, 2, 4, 5] and mem.depth[3] == 1
    record(second, [(None, None, 3)], torch.tensor([[8, 2, 4, 5]]), torch.tensor([[0.7, 0.1, 0.1, 0.1]]),
                  step=5, depths=[3])
    assert mem.filled == 2 and mem.ids[3].tolist() == [8, 2, 4, 5]
    assert mem.depth[3] == 3 and mem.request[9] == 0
    assert mem.request[3] == second.request == 1
    mem.save(tmp_path / "m.safetensors")
    back = TokenMemory.load(tmp_path / "m.safetensors")
    assert back.lookup(3) is not None and back.lookup(3).ids == (8, 2, 4, 5) and back.lookup(3).step == 5
    assert back.lookup(4) is None


def test_the_tables_are_read_only_views_of_the_rows():
    mem = TokenMemory(V, K)
    record(RequestMemory(mem), [(None, None, 3)], torch.tensor([[1, 2, 4, 5]]),
                              torch.tensor([[0.5, 0.2, 0.2, 0.1]]), step=0, depths=[0])
    assert mem.lookup(3).ids == (1, 2, 4, 5) and mem.ids[3].tolist() == [1, 2, 4, 5]
    with pytest.raises(AttributeError):
        mem.ids = mem.ids.clone()  # a replaced table would leave the row view drafting reads behind
