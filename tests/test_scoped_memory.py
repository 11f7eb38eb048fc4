"""Image-scoped contextual memories (``recap.memory.scoped``, ``RecapConfig.scoped_memory``).

The store on its own (bounds, order, copies), its hooks (``RequestMemory``, ``TokenMemory.clone``
/ ``reset`` / ``save`` / ``load``), then decoding on the embedded shapes model: a follow-up on
the same image drafts from the rows earlier requests on it wrote (the trace's provenance says
so), another image or a text-only request never does, outputs equal ``generate()``'s, and with
the field off nothing is kept. Last, the follow-up suite of the benchmark.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hf_reference import greedy_reference
from test_properties import record

import recap
from recap import bench
from recap.bench.reports import render_markdown
from recap.memory.context import ContextMemory
from recap.memory.rows import IDS, UID, Q, put, row_layout
from recap.memory.scoped import ScopedMemory
from recap.memory.store import Entry, RequestMemory, TokenMemory
from recap.shapes.scene import KINDS, render_scene


def row(request: int, step: int = 1) -> Entry:
    """A row as the tables give it back (q as Entry.normalised() computes it)."""
    made = Entry((1, 2), (0.6, 0.3), 0.5, 0.4, request, step, 1)
    return made._replace(q=made.normalised())


def put_row(table: ContextMemory, key: tuple[int, ...], entry: Entry) -> None:
    """File one row made by hand into an M2 / M3 table (the write path files blocks: ``file_rows``)."""
    col, k = row_layout(table.k), table.k
    irow, frow = np.zeros(col.seq, dtype=np.int64), np.zeros(col.fwidth, dtype=np.float64)
    irow[UID], irow[IDS : IDS + k], irow[col.prov : col.prov + 3] = entry.uid, entry.ids, entry[4:7]
    frow[Q : Q + k], frow[col.probs : col.probs + k] = entry.normalised(), entry.probs
    frow[col.stats], frow[col.stats + 1] = entry.entropy, entry.concentration
    table.reserve(1)
    put(table.arrays, *table._key(key), irow, frow)


# --------------------------------------------------------------------------- the store


def test_open_hands_the_same_live_rows_to_the_same_image_only() -> None:
    store = ScopedMemory(2)
    m2, m3 = store.open("aaa", 0)
    put_row(m2, (1, 2), row(0))
    put_row(m3, (0, 1, 2), row(0))
    again2, again3 = store.open("aaa", 1)
    assert again2 == {(1, 2): row(0)} and again3 == {(0, 1, 2): row(0)}
    put_row(again2, (5, 6), row(1))  # the live dict: the next request on the image sees this one's writes
    assert store.open("aaa", 2)[0].keys() == {(1, 2), (5, 6)}
    other2, other3 = store.open("bbb", 3)
    assert other2 == {} and other3 == {}
    assert len(store) == 2 and store.rows("aaa") == 3 and store.rows("zzz") == 0


def test_rows_older_than_max_age_requests_are_dropped_and_so_is_a_stale_image() -> None:
    store = ScopedMemory(2, max_age=3)
    m2, _ = store.open("aaa", 0)
    put_row(m2, (1, 1), row(0))
    m2, _ = store.open("aaa", 2)
    put_row(m2, (2, 2), row(2))
    assert store.open("aaa", 3)[0].keys() == {(1, 1), (2, 2)}  # 3 - 0 <= 3: still carried
    m2, _ = store.open("aaa", 4)
    assert m2.keys() == {(2, 2)}  # 4 - 0 > 3
    store.open("bbb", 8)  # "aaa" was last opened by request 4: 8 - 4 > 3
    assert "aaa" not in store.scopes and store.rows("bbb") == 0


def test_at_most_max_rows_newest_rows_are_carried_in_their_order() -> None:
    store = ScopedMemory(2, max_rows=3)
    m2, _ = store.open("aaa", 0)
    for key, prov in (
        ((1, 1), (0, 5)), ((2, 2), (1, 1)), ((3, 3), (0, 1)), ((4, 4), (1, 2)), ((5, 5), (1, 2)),
    ):
        put_row(m2, key, row(*prov))
    kept = store.open("aaa", 2)[0]
    assert list(kept) == [(2, 2), (4, 4), (5, 5)]  # the three newest by (request, step), insertion order kept


def test_at_most_max_images_the_least_recently_opened_goes() -> None:
    store = ScopedMemory(2, max_images=2)
    for i, key in enumerate(("a", "b", "a", "c")):
        store.open(key, i)
    assert list(store.scopes) == ["a", "c"]


def test_clone_is_independent_and_bad_bounds_or_keys_are_refused() -> None:
    store = ScopedMemory(2, max_rows=7, max_age=5, max_images=3)
    put_row(store.open("aaa", 0)[0], (1, 2), row(0))
    copy = store.clone()
    put_row(copy.scopes["aaa"].m2, (3, 4), row(1))
    assert store.rows("aaa") == 1 and copy.rows("aaa") == 2
    assert (copy.max_rows, copy.max_age, copy.max_images) == (7, 5, 3)
    for bad in ({"max_rows": 0}, {"max_age": -1}, {"max_images": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ScopedMemory(**bad)
    with pytest.raises(ValueError, match="image fingerprint"):
        store.open(None, 1)  # type: ignore[arg-type]
    store.clear()
    assert len(store) == 0


# --------------------------------------------------------------------------- the hooks


def _write(req: RequestMemory, step: int = 1) -> None:
    ids = torch.tensor([[5, 6], [7, 8]])
    probs = torch.tensor([[0.7, 0.2], [0.5, 0.4]])
    record(req, [(1, 2, 3), (2, 3, 4)], ids, probs, step=step, depths=[1, 2])


def test_request_memory_starts_from_the_scopes_rows_only_when_scoped_with_a_scope_and_context() -> None:
    m1 = TokenMemory(16, 2)
    first = RequestMemory(m1, scope="img", scoped=True)
    _write(first)
    assert first.scoped and len(first.m2) == 2 and len(first.m3) == 2
    follow = RequestMemory(m1, scope="img", scoped=True)
    assert follow.m3.keys() == {(1, 2, 3), (2, 3, 4)}
    assert {e.request for e in follow.m3.values()} == {first.request}
    for other in (
        RequestMemory(m1, scope="other", scoped=True),  # another image
        RequestMemory(m1, scope=None, scoped=True),  # no scope (text only)
        RequestMemory(m1, scope="img", scoped=False),  # off
        RequestMemory(m1, scope="img", scoped=True, use_context=False),  # a drafter without M2 / M3
    ):
        assert len(other.m2) == 0 and len(other.m3) == 0
    assert set(m1.scoped.scopes) == {"img", "other"}


def test_token_memory_clone_copies_the_scopes_reset_clears_them_save_and_load_do_not_keep_them(
    tmp_path,
) -> None:
    m1 = TokenMemory(16, 2)
    _write(RequestMemory(m1, scope="img", scoped=True))
    copy = m1.clone()
    _write(RequestMemory(copy, scope="img", scoped=True), step=2)
    assert m1.scoped.rows("img") == 4 and copy.scoped.rows("img") == 4
    assert {e.step for e in m1.scoped.scopes["img"].m2.values()} == {
        1
    }  # the copy's writes stayed in the copy
    m1.save(tmp_path / "m.safetensors")
    assert len(TokenMemory.load(tmp_path / "m.safetensors").scoped) == 0  # documented: not in the file
    m1.reset()
    assert len(m1.scoped) == 0


def test_the_setting_is_validated() -> None:
    assert recap.RecapConfig().scoped_memory is False  # opt-in (tests/test_scoped_owner.py)
    with pytest.raises(ValueError, match="scoped_memory"):
        recap.RecapConfig(scoped_memory=1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- decoding


@pytest.fixture(scope="module")
def shapes(shapes_cpu) -> recap.Target:
    return shapes_cpu  # the embedded model, loaded once per session (conftest)


def _reference(target: recap.Target, image, prompt: str, n: int) -> list[int]:
    return greedy_reference(target, image, prompt, n)  # once per session (tests/hf_reference.py)


def _context_sources(gen: recap.Generation) -> list:
    return [s for step in gen.trace.steps for n in step.nodes for s in n.sources if s.kind in ("m2", "m3")]


#: The image-scoped memories on (they are opt-in: ``RecapConfig.scoped_memory``), trees that do not
#: depend on the size loop's timings (``size_loop=False``): the tests need trees drafted, and alike.
ON = recap.RecapConfig(scoped_memory=True, size_loop=False)


def test_a_follow_up_on_the_same_image_drafts_from_the_earlier_rows_and_stays_lossless(shapes) -> None:
    a, b = render_scene(1_000_001)[0], render_scene(1_000_002)[0]
    questions = [(a, "Describe the image in detail."), (a, "Describe the image."), (b, "Describe the image."),
                 (None, "Describe the image."), (a, "What color is the square at the top left?")]
    memory = TokenMemory.for_target(shapes)
    gens = [recap.generate(shapes, img, q, memory=memory, config=ON, max_new_tokens=64, trace=True)
            for img, q in questions]
    for (img, q), gen in zip(questions, gens):
        assert gen.token_ids == _reference(shapes, img, q, 64)
    first, follow, other, text, last = gens
    earlier = [s for s in _context_sources(follow) if s.request == first.trace.request]
    assert earlier and all(
        s.same_image is True for s in earlier
    )  # provenance: the earlier request, same image
    for gen in (other, text):  # another image, no image: only their own request's contextual rows
        assert {s.request for s in _context_sources(gen)} <= {gen.trace.request}
    assert {s.request for s in _context_sources(last)} - {last.trace.request} <= {
        0, 1,
    }  # image a's requests only
    assert set(memory.scoped.scopes) == {follow.trace.image_key, other.trace.image_key}


def test_with_the_field_off_nothing_is_kept_and_a_clone_repeats_the_same_trees(shapes) -> None:
    a = render_scene(1_000_003)[0]
    off = recap.RecapConfig(scoped_memory=False)
    memory = TokenMemory.for_target(shapes)
    for q in ("Describe the image.", "Describe the image in detail."):
        gen = recap.generate(shapes, a, q, memory=memory, config=off, max_new_tokens=48, trace=True)
        assert {s.request for s in _context_sources(gen)} <= {gen.trace.request}
    assert len(memory.scoped) == 0
    recap.generate(shapes, a, "Describe the image.", memory=memory, config=ON, max_new_tokens=48)  # keeps a's
    copy = memory.clone()
    trees = []
    for mem in (copy, memory):  # the benchmark's repeats: a clone must do the same work as the live memory
        gen = recap.generate(shapes, a, "Describe the image in detail.", memory=mem, config=ON,
                             max_new_tokens=48, trace=True)
        trees.append(
            [(tuple(n.token for n in s.nodes), tuple(n.parent for n in s.nodes)) for s in gen.trace.steps]
        )
    assert trees[0] == trees[1]


# --------------------------------------------------------------------------- the follow-up suite


def test_the_follow_up_suite_asks_each_scene_its_questions_in_a_row() -> None:
    reqs = [
        r for r in bench.build_suite("followup") if r.category == "conversation"
    ]  # revisits: test_bench_conversation
    per_scene = bench.FOLLOWUP_QUESTIONS["followup"]
    start, scenes = bench.SUITES["followup"]
    assert len(reqs) == scenes * per_scene
    for i in range(scenes):
        block = reqs[i * per_scene : (i + 1) * per_scene]
        assert {r.seed for r in block} == {start + i}
        assert [r.position for r in block] == list(range(per_scene))
        assert len({r.kind for r in block}) == per_scene
    assert {r.kind for r in reqs if r.position == 0} == set(KINDS)  # every kind comes first somewhere
    default = bench.build_suite("default")
    assert default[0].position == 0 and max(r.position for r in default) == len(KINDS) - 1


def test_the_follow_up_rows_put_each_recap_row_beside_its_twins_under_the_other_carry_modes() -> None:
    cfg = recap.RecapConfig(scoped_memory=False)  # each row's carry mode sets it per turn
    arms = bench.followup_arms(None, cfg)
    assert [a.name for a in arms] == ["hf", "tr", "recap", "recap carry=image", "recap" + bench.UNSCOPED]
    by = {a.name: a for a in arms}
    assert [by[n].carry for n in ("recap", "recap carry=image", "recap" + bench.UNSCOPED)] == [
        "conversation", "image", "none",
    ]
    assert all(by[n].config == cfg for n in ("recap", "recap carry=image"))
    from recap.engine.conversation import carry_settings

    assert carry_settings("conversation", cfg, "c") == (replace(cfg, scoped_memory=True), "c")
    assert carry_settings("image", cfg, "c") == (replace(cfg, scoped_memory=True), None)
    assert carry_settings("none", replace(cfg, scoped_memory=True), "c") == (cfg, None)


@pytest.mark.slow  # decodes the whole follow-up suite
def test_the_follow_up_suite_runs_reports_first_and_later_questions_and_the_ratio(shapes) -> None:
    results = bench.bench(shapes, suite="followup", limit=3, repeats=2, max_new_tokens=24, warmup=False,
                          methods=["recap"], progress=False)
    assert results["lossless"]["ok"]
    names = [a["name"] for a in results["arms"]]
    assert names == ["hf", "recap", "recap carry=image", "recap" + bench.UNSCOPED]
    assert [r["position"] for r in results["requests"]] == [0, 1, 2]
    for name in names:
        pos = results["summary"][name]["by_position"]
        assert pos["first"]["requests"] == 1 and pos["later"]["requests"] == 2
    md = render_markdown(results)
    assert "## Conversations" in md
    assert "Later turns, `recap carry=image`: against the default `recap` row MAT" in md
