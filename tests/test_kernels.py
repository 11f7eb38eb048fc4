"""The compiled hot path (``recap.memory.fastpath``) drafts and writes exactly what the reference does.

Every test runs the same work twice, on the pure-Python reference and on the numba kernels, and
compares everything a drafter produces or leaves behind: each tree's tokens, parents, depths,
scores, fused probabilities, sources (the Entries themselves), suffix flags, origins and order,
why its growth stopped, the memories' tables, row views (M2 / M3 in their insertion order),
image scopes and calibration counts.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import recap
from recap.core.config import RecapConfig
from recap.drafting import fastdraft, fasttr, fastupdate
from recap.drafting.protocol import DraftState, Verification
from recap.drafting.recap_drafter import RecapDrafter
from recap.drafting.token_recycling import TRDrafter
from recap.drafting.treecost import PassCost
from recap.memory import fastpath, rows
from recap.memory.scoped import ScopedMemory
from recap.memory.store import RequestMemory, TokenMemory
from recap.verification.acceptance import accept_path

pytestmark = pytest.mark.skipif(not fastpath.AVAILABLE, reason="numba is not installed: only the reference runs")

V, K, IMAGE = 12, 4, 7  # a small vocabulary: contexts repeat, so M2 / M3 hits, adoption and ties happen
#: Probability rows with few distinct values, so that scores and fused probabilities tie often.
PROBS = ([0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0],
         [0.5, 0.25, 0.25, 0.0], [0.7, 0.1, 0.1, 0.1])
CONFIGS = (
    {}, {"budget": 8}, {"budget": 30, "max_depth": 5, "max_children": 3}, {"calibrate": False},
    {"fusion": "fixed", "depth_discount": 0.9}, {"fusion": "backoff", "suffix": False},
    {"use_m2": False, "use_m3": False, "budget": 8}, {"use_m3": False}, {"budget": 64, "max_depth": 12},
    {"suffix_min_len": 1, "suffix_max_tokens": 6}, {"cost_aware": True}, {"cost_aware": True, "budget": 40},
)


def tree_fields(tree) -> tuple:  # noqa: ANN001
    return (tree.tokens, tree.parents, tree.depths, tree.scores, tree.fused, tree.sources, tree.suffix, tree.origins,
            tree.order, tree.reordered().tokens)


def memory_state(m1: TokenMemory) -> tuple:
    tables = tuple(getattr(m1, name).tolist() for name in ("ids", "probs", "entropy", "concentration", "request",
                                                              "step", "depth"))
    filled = {t: e for t, e in m1.entries.items() if e is not None}
    scopes = {key: (list(s.m2.items()), list(s.m3.items()), s.last_request) for key, s in m1.scoped.scopes.items()}
    return tables, filled, m1.calibration.table, scopes


def session(fast: bool | None, seed: int, method: str, settings_: dict, *, requests: int = 3, steps: int = 5,
            scoped: bool = True, bounds: tuple[int, int, int] | None = None) -> tuple:
    """Random requests on one persistent memory: prefill rows, then draft / verify / update steps
    with random target picks. ``fast`` None: each request picks a path at random (mixed use).
    ``bounds``: the image scopes' (max_rows, max_age, max_images), small enough to prune."""
    rng, paths = random.Random(seed), random.Random(-seed)  # the paths drawn apart: the same requests either way
    gen = torch.Generator().manual_seed(seed)
    m1 = TokenMemory(V, K)
    if bounds is not None:
        m1.scoped = ScopedMemory(max_rows=bounds[0], max_age=bounds[1], max_images=bounds[2])
    out: list = []
    for _ in range(requests):
        on = paths.random() < 0.5 if fast is None else fast
        with fastpath.use_kernels(on):
            mem = RequestMemory(m1, image_token_ids=[IMAGE], image_key=f"image{rng.randrange(3)}", scoped=scoped)
            # each setting over 24 fixed nodes (the library's default before trees were sized by cost)
            cfg = RecapConfig(top_k=K, **{"budget": 24, "cost_aware": False, **settings_})
            budget = int(cfg.budget)
            if method == "tr":
                drafter = TRDrafter(mem, cfg, budget)
            else:
                cost = PassCost.from_fit((1e-3, [2e-5, 4e-4][seed % 2], 1e-7), budget) if cfg.cost_aware else None
                drafter = RecapDrafter(mem, cfg, budget, cost)
            seq = [rng.randrange(V) for _ in range(rng.randint(1, 16))]
            if len(seq) >= 2:
                n = len(seq) - 1
                drafter.update(DraftState(seq, 0), Verification(None, [], [], *_rows(rng, gen, n)))
            for step in range(1, steps + 1):
                state = DraftState(seq, step)
                tree = drafter.draft(state)
                out.append((tree_fields(tree), getattr(drafter, "last_stop", "")))
                picked = [rng.choice(tree.tokens + [rng.randrange(V)]) for _ in range(len(tree))]
                path, bonus = accept_path(tree, picked)
                drafter.update(state, Verification(tree, picked, path, *_rows(rng, gen, len(tree))))
                seq = seq + [tree.tokens[i] for i in path[1:]] + [bonus]
            out.append((list(mem.m2.rows.items()), list(mem.m3.rows.items())))
    return out, memory_state(m1)


def _rows(rng: random.Random, gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.stack([torch.randperm(V, generator=gen)[:K] for _ in range(n)])
    return ids, torch.tensor([rng.choice(PROBS) for _ in range(n)], dtype=torch.float32)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CONFIGS), st.booleans())
def test_recap_drafts_and_writes_the_reference_trees_and_rows(seed, settings_, scoped) -> None:
    assert session(True, seed, "recap", settings_, scoped=scoped) == session(False, seed, "recap", settings_,
                                                                               scoped=scoped)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CONFIGS[:4]), st.sampled_from([(6, 2, 2), (40, 1, 3), (10**4, 3, 1)]))
def test_pruned_image_scopes_leave_the_flat_tables_the_reference_rows(seed, settings_, bounds) -> None:
    """Scopes small enough to be pruned by rows, age and images between requests."""
    kw = {"requests": 6, "steps": 3, "bounds": bounds}
    assert session(True, seed, "recap", settings_, **kw) == session(False, seed, "recap", settings_, **kw)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([{}, {"budget": 8, "max_depth": 3}, {"budget": 64, "max_depth": 12}]))
def test_token_recycling_fills_the_reference_template(seed, settings_) -> None:
    assert session(True, seed, "tr", settings_) == session(False, seed, "tr", settings_)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CONFIGS[:4]))
def test_requests_alternating_between_the_paths_share_one_memory_as_the_reference(seed, settings_) -> None:
    """A memory written by one path and read by the other (the views are filled from the tables)."""
    assert session(None, seed, "recap", settings_, requests=4) == session(False, seed, "recap", settings_, requests=4)


def test_a_saved_memory_drafts_the_same_on_both_paths(tmp_path) -> None:
    with fastpath.use_kernels(True):
        _, _ = session(True, 3, "recap", {})  # warm the kernels (nothing else)
        m1 = TokenMemory(V, K)
        mem = RequestMemory(m1, image_token_ids=[IMAGE])
        seq = [random.Random(1).randrange(V) for _ in range(30)]
        mem.record([((seq[i - 2] if i > 1 else None), (seq[i - 1] if i else None), seq[i]) for i in range(30)],
                   *_rows(random.Random(2), torch.Generator().manual_seed(2), 30), step=0, depths=[0] * 30)
        m1.save(tmp_path / "m.safetensors")
    trees = []
    for on in (True, False):
        with fastpath.use_kernels(on):
            back = TokenMemory.load(tmp_path / "m.safetensors")
            trees.append(tree_fields(RecapDrafter(RequestMemory(back), RecapConfig(top_k=K), 24).draft(DraftState(seq))))
    assert trees[0] == trees[1] and len(trees[0][0]) > 1


def test_the_row_views_are_current_whenever_read() -> None:
    with fastpath.use_kernels(True):
        m1 = TokenMemory(V, K)
        mem = RequestMemory(m1, image_key="img", scoped=True)
        mem.record([(None, None, 3), (None, 3, 4), (3, 4, 5), (None, 3, 4)], torch.tensor([[1, 2, 3, 4]] * 4),
                   torch.tensor([PROBS[0], PROBS[1], PROBS[2], PROBS[5]]), step=2, depths=[0, 1, 2, 3])
        assert m1.lookup(4).probs == pytest.approx(PROBS[5]) and m1.lookup(4).depth == 3  # the latest write wins
        assert list(mem.m2.rows) == [(3, 4), (4, 5)] and list(mem.m3.rows) == [(3, 4, 5)]
        assert mem.m2.rows[(3, 4)].uid == m1.lookup(4).uid  # one prediction, one uid, under both keys
        assert m1.scoped.rows("img") == 3  # the image scope holds them too (filed when the scopes are read)
        assert m1.lookup(IMAGE) is None and m1.lookup(V + 5) is None


def test_every_kernel_is_compiled_once_for_the_arrays_the_library_passes(load_tiny) -> None:
    """No second signature: the library always passes the dtypes and layouts the warm-up compiled."""
    target = load_tiny("qwen2_5_vl")
    memory = recap.TokenMemory.for_target(target)
    for method in ("recap", "tr"):
        recap.generate(target, None, "describe the image .", method=method, max_new_tokens=8, memory=memory)
    kernels = (fastdraft.draft_tree, fasttr.tr_fill, fastupdate.update_tree, fastupdate.path_last,
               fastupdate.tree_keys, rows.record_rows, rows._insert_rows, rows._pending)
    assert all(len(k.signatures) == 1 for k in kernels), [(k.__name__, len(k.signatures)) for k in kernels]


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_decoding_with_the_kernels_is_the_reference_decode_step_by_step(load_tiny, family, monkeypatch) -> None:
    """A real (tiny) model: every step's tree, picks, path and trace, and the memory afterwards."""
    from test_lossless import make_image

    from recap.engine import autobudget

    def fixed(target, cap, context_tokens=None):  # noqa: ANN001, ANN202  (timing must not enter)
        return PassCost.from_fit((3e-3, 30e-6, 0.4e-6), cap, host_s_per_node=10e-6, host_s_per_pass=0.1e-3)

    monkeypatch.setattr(autobudget, "pass_cost", fixed)
    target = load_tiny(family)
    requests = [(make_image(4), "describe the image ."), (make_image(5), "what color is the circle ?"),
                (make_image(4), "where is the circle ?")]
    runs = []
    for on in (True, False):
        with fastpath.use_kernels(on):
            seen = []
            fixed_24 = RecapConfig(budget=24, cost_aware=False)
            for method, cfg in (("recap", fixed_24), ("recap", RecapConfig(budget=40, cost_aware=True)),
                                ("recap", RecapConfig()), ("tr", fixed_24)):
                memory = recap.TokenMemory.for_target(target)
                for img, prompt in requests:
                    for rec in recap.iter_steps(target, img, prompt, method=method, max_new_tokens=24, memory=memory,
                                                config=cfg, trace=True):
                        nodes = [{**vars(n), "sources": [vars(s) for s in n.sources]} for n in rec.trace_step.nodes]
                        seen.append((tree_fields(rec.tree), rec.argmax, rec.accepted, rec.emitted, nodes))
                seen.append(memory_state(memory))
            runs.append(seen)
    assert runs[0] == runs[1]


def test_the_switch_fixes_the_path_of_each_request() -> None:
    with fastpath.use_kernels(False):
        assert not RequestMemory(TokenMemory(V, K)).fast
    with fastpath.use_kernels(True):
        assert RequestMemory(TokenMemory(V, K)).fast
    assert np.iinfo(np.int64).min == rows.NONE  # a key position with no token is never a token id
