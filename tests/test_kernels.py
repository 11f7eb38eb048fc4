"""The kernels (``recap.drafting``, ``recap.memory``) draft and write exactly what the oracle does.

The oracle (``tests/oracle``) is the readable reference: plain Python over ``Entry`` objects and
dicts. Every test runs the same work through both and compares everything a drafter produces or
leaves behind: each tree's tokens, parents, depths, scores, fused probabilities, sources (the
Entries, by value), suffix flags, origins and order, why its growth stopped, M1's rows, M2 / M3 in
their insertion order, the image scopes and the calibration counts. numba is a hard dependency:
without it these tests fail at import.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numba  # noqa: F401  (a hard dependency: fail, never skip, without it)
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import drafters as ref
from oracle import memory as refmem
from test_properties import record

import recap
from recap.core.config import RecapConfig
from recap.drafting import search, token_recycling, update
from recap.drafting.protocol import DraftState, Verification
from recap.drafting.recap_drafter import RecapDrafter
from recap.drafting.token_recycling import TRDrafter
from recap.drafting.treecost import PassCost
from recap.memory import rows
from recap.memory.scoped import ScopedMemory
from recap.memory.store import RequestMemory, TokenMemory
from recap.verification.acceptance import accept_path

V, K, IMAGE = 12, 4, 7  # a small vocabulary: contexts repeat, so M2 / M3 hits, adoption and ties happen
#: Probability rows with few distinct values, so that scores and fused probabilities tie often.
PROBS = (
    [0.4, 0.3, 0.2, 0.1],
    [0.25, 0.25, 0.25, 0.25],
    [0.5, 0.5, 0.0, 0.0],
    [1.0, 0.0, 0.0, 0.0],
    [0.5, 0.25, 0.25, 0.0],
    [0.7, 0.1, 0.1, 0.1],
)
CONFIGS = (
    {},
    {"budget": 8},
    {"budget": 30, "max_depth": 5, "max_children": 3},
    {"calibrate": False},
    {"fusion": "fixed", "depth_discount": 0.9},
    {"fusion": "backoff", "suffix": False},
    {"use_m2": False, "use_m3": False, "budget": 8},
    {"use_m3": False},
    {"budget": 64, "max_depth": 12},
    {"suffix_min_len": 1, "suffix_max_tokens": 6},
    {"cost_aware": True},
    {"cost_aware": True, "budget": 40},
)


def tree_fields(t) -> tuple:  # noqa: ANN001
    return (t.tokens, t.parents, t.depths, t.scores, t.fused, t.sources, t.suffix, t.origins, t.order)


def memory_state(m1) -> tuple:  # noqa: ANN001
    """A recap or an oracle memory: M1's filled rows, the calibration counts, the image scopes."""
    if isinstance(m1, TokenMemory):
        filled = m1.entries()
        scopes = {key: (s.m2.items(), s.m3.items(), s.last_request) for key, s in m1.scoped.scopes.items()}
    else:
        filled = dict(sorted(m1.rows.items()))
        scopes = {
            key: (list(m2.items()), list(m3.items()), last)
            for key, (m2, m3, last) in m1.scopes.scopes.items()
        }
    return filled, m1.calibration.cells.tolist(), scopes


def session(
    oracle: bool,
    seed: int,
    method: str,
    settings_: dict,
    *,
    requests: int = 3,
    steps: int = 5,
    scoped: bool = True,
    bounds: tuple[int, int, int] | None = None,
) -> tuple:
    """Random requests on one persistent memory: prefill rows, then draft / verify / update steps with
    random target picks, on the kernels or (``oracle``) the oracle. ``bounds``: the image scopes'
    (max_rows, max_age, max_images), small enough to prune."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    bounds = bounds or (2048, 32, 8)
    if oracle:
        m1 = refmem.TokenMemory(V, K, refmem.Scopes(*bounds))
    else:
        m1 = TokenMemory(V, K)
        m1.scoped = ScopedMemory(K, max_rows=bounds[0], max_age=bounds[1], max_images=bounds[2])
    made = refmem.RequestMemory if oracle else RequestMemory
    out: list = []
    for _ in range(requests):
        # each setting over 24 fixed nodes (the library's default before trees were sized by cost)
        cfg = RecapConfig(top_k=K, **{"budget": 24, "cost_aware": False, **settings_})
        budget = int(cfg.budget)
        context = method != "tr" and (cfg.use_m2 or cfg.use_m3)  # M2 / M3 as the factories keep them
        mem = made(m1, image_token_ids=[IMAGE], scope=f"image{rng.randrange(3)}", use_context=context,
                   scoped=scoped)
        if method == "tr":
            drafter = (ref.TokenRecycling if oracle else TRDrafter)(mem, cfg, budget)
        else:
            cost = PassCost.from_fit((1e-3, [2e-5, 4e-4][seed % 2], 1e-7), budget) if cfg.cost_aware else None
            drafter = (ref.Recap if oracle else RecapDrafter)(mem, cfg, budget, cost)
        seq = [rng.randrange(V) for _ in range(rng.randint(1, 16))]
        if len(seq) >= 2:
            drafter.update(DraftState(seq, 0), Verification(None, [], [], *_rows(rng, gen, len(seq) - 1)))
        for step in range(1, steps + 1):
            state = DraftState(seq, step)
            drafted = drafter.draft(state)
            out.append((tree_fields(drafted), getattr(drafter, "last_stop", "")))
            picked = [rng.choice(drafted.tokens + [rng.randrange(V)]) for _ in range(len(drafted))]
            path, bonus = accept_path(drafted, picked)
            drawn = path if step % 2 else None  # odd steps as under sampling: samples at the walk only
            drafter.update(state, Verification(drafted, picked, path, *_rows(rng, gen, len(drafted)), drawn))
            seq = seq + [drafted.tokens[i] for i in path[1:]] + [bonus]
        out.append((list(mem.m2.items()), list(mem.m3.items())))
    return out, memory_state(m1)


def _rows(rng: random.Random, gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.stack([torch.randperm(V, generator=gen)[:K] for _ in range(n)])
    return ids, torch.tensor([rng.choice(PROBS) for _ in range(n)], dtype=torch.float32)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CONFIGS), st.booleans())
def test_recap_drafts_and_writes_the_oracles_trees_and_rows(seed, settings_, scoped) -> None:
    assert session(False, seed, "recap", settings_, scoped=scoped) == session(
        True, seed, "recap", settings_, scoped=scoped
    )


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 10**6),
    st.sampled_from(CONFIGS[:4]),
    st.sampled_from([(6, 2, 2), (40, 1, 3), (10**4, 3, 1)]),
)
def test_pruned_image_scopes_keep_the_oracles_rows_in_its_order(seed, settings_, bounds) -> None:
    """Scopes small enough to be pruned by rows, age and images between requests."""
    kw = {"requests": 6, "steps": 3, "bounds": bounds}
    assert session(False, seed, "recap", settings_, **kw) == session(True, seed, "recap", settings_, **kw)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 10**6),
    st.sampled_from([{}, {"budget": 8, "max_depth": 3}, {"budget": 64, "max_depth": 12}]),
)
def test_token_recycling_fills_the_oracles_template(seed, settings_) -> None:
    assert session(False, seed, "tr", settings_) == session(True, seed, "tr", settings_)


def test_a_memory_read_back_from_a_file_drafts_as_the_oracle_of_its_rows(tmp_path) -> None:
    m1 = TokenMemory(V, K)
    mem = RequestMemory(m1, image_token_ids=[IMAGE])
    seq = [random.Random(1).randrange(V) for _ in range(30)]
    record(
        mem,
        [((seq[i - 2] if i > 1 else None), (seq[i - 1] if i else None), seq[i]) for i in range(30)],
        *_rows(random.Random(2), torch.Generator().manual_seed(2), 30),
        step=0,
        depths=[0] * 30,
    )
    m1.save(tmp_path / "m.safetensors")
    back = TokenMemory.load(tmp_path / "m.safetensors")
    oracle = refmem.TokenMemory.read_back(back)
    assert back.entries() == oracle.rows  # q as Entry.normalised() gives it, uids in token order
    drafted = RecapDrafter(RequestMemory(back), RecapConfig(top_k=K), 24).draft(DraftState(seq))
    expected = ref.Recap(refmem.RequestMemory(oracle), RecapConfig(top_k=K), 24).draft(DraftState(seq))
    assert tree_fields(drafted) == tree_fields(expected) and len(drafted) > 1


def test_the_row_views_are_built_from_the_tables_whenever_read() -> None:
    m1 = TokenMemory(V, K)
    mem = RequestMemory(m1, scope="img", scoped=True)
    record(
        mem,
        [(None, None, 3), (None, 3, 4), (3, 4, 5), (None, 3, 4)],
        torch.tensor([[1, 2, 3, 4]] * 4),
        torch.tensor([PROBS[0], PROBS[1], PROBS[2], PROBS[5]]),
        step=2,
        depths=[0, 1, 2, 3],
    )
    assert m1.lookup(4).probs == pytest.approx(PROBS[5]) and m1.lookup(4).depth == 3  # the latest write wins
    assert list(mem.m2) == [(3, 4), (4, 5)] and list(mem.m3) == [(3, 4, 5)]  # first-write order
    assert mem.m2[(3, 4)].uid == m1.lookup(4).uid  # one prediction, one uid, under both keys
    assert m1.scoped.rows("img") == 3 and m1.scoped.scopes["img"].m2 is mem.m2  # the scope's live table
    assert m1.lookup(IMAGE) is None and m1.lookup(V + 5) is None
    assert (9, 9) not in mem.m2 and mem.m2.get((9, 9)) is None and rows.NONE == -(2**63)


def test_every_kernel_is_compiled_once_for_the_arrays_the_library_passes(load_tiny) -> None:
    """No second signature: the library always passes the dtypes and layouts the warm-up compiled."""
    target = load_tiny("qwen2_5_vl")
    memory = recap.TokenMemory.for_target(target)
    for method in ("recap", "tr"):
        recap.generate(target, None, "describe the image .", method=method, max_new_tokens=8, memory=memory)
    kernels = (
        search.draft_tree, token_recycling.tr_fill, update.update_tree, update.prompt_keys, rows.record_rows,
    )
    assert all(len(k.signatures) == 1 for k in kernels), [(k.__name__, len(k.signatures)) for k in kernels]


#: A representative part of the lossless suite: every method on one family, the cut at
#: max_new_tokens, every config.
PLAIN_PYTHON_TESTS = (
    "(test_every_method_matches_greedy_generate_over_three_requests and sdpa and qwen2_5_vl) "
    "or test_max_new_tokens_falling_mid_path or test_every_config_stays_lossless"
)


def test_the_lossless_suite_passes_on_the_plain_python_fallback() -> None:
    """The same kernels as plain Python (``NUMBA_DISABLE_JIT=1``, what runs where numba cannot
    compile): a part of tests/test_lossless.py in a fresh process."""
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    here = Path(__file__).resolve().parent
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            str(here / "test_lossless.py"),
            "-k",
            PLAIN_PYTHON_TESTS,
        ],
        env=env,
        cwd=here.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout.split("\n")[-2]


def _calibrated_tree() -> tuple[RecapDrafter, list[int], object]:
    """A RECAP drafter over rows that make a tree with grandchildren, and its tree."""
    rng, gen = random.Random(5), torch.Generator().manual_seed(5)
    mem = RequestMemory(TokenMemory(V, K))
    drafter = RecapDrafter(mem, RecapConfig(top_k=K, suffix=False), 24)
    seq = [rng.randrange(V) for _ in range(16)]
    drafter.update(DraftState(seq, 0), Verification(None, [], [], *_rows(rng, gen, len(seq) - 1)))
    drafted = drafter.draft(DraftState(seq, 1))
    assert any(p > 0 for p in drafted.parents[1:])  # some node below a drafted node
    return drafter, seq, drafted


def test_under_sampling_only_the_parents_the_walk_drew_at_give_calibration_samples() -> None:
    """Off the walk a sampling rule's pick is the mode, not a draw: no sample there (issue 28)."""
    counts = []
    for drawn in (None, [0]):  # greedy: every pick is the rule's own; sampling: the walk stopped at the root
        drafter, seq, drafted = _calibrated_tree()
        kids = {i: [j for j in range(len(drafted)) if drafted.parents[j] == i] for i in range(len(drafted))}
        # the root's draw is none of its children (the walk ends there); elsewhere the mode is the first child
        picked = [V + 1] + [drafted.tokens[kids[i][0]] if kids[i] else 0 for i in range(1, len(drafted))]
        before = drafter.calibration.cells.copy()
        rows = _rows(random.Random(6), torch.Generator().manual_seed(6), len(drafted))
        drafter.update(DraftState(seq, 1), Verification(drafted, picked, [0], *rows, drawn))
        counts.append((drafter.calibration.cells - before).sum(axis=(0, 1)).tolist())  # [proposed, accepted]
    greedy, sampled = counts
    assert greedy == [len(drafted) - 1, sum(bool(kids[i]) for i in range(1, len(drafted)))]
    assert sampled == [len(kids[0]), 0]  # the root's children only, none accepted
