"""The node inspector (app/fusion_view.py): the fusion drawn from the trace's source rows."""

from __future__ import annotations

import math

import pytest
from accepted import TREES
from conftest_app import example

from app.presenters.fusion import fuse_panels, fusion_choice, fusion_figure, inspect_node, node_choices
from app.presenters.provenance import provenance_html, provenance_rows
from app.presenters.tree import ORIGIN_COLORS
from recap.trace.format import DecodeTrace, SourceInfo, TraceNode, TraceStep

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target

M3 = SourceInfo("m3", weight=0.6, entropy=0.2, concentration=0.9, prob=0.8, request=2, step=5, depth=1,
                same_image=True, top_ids=[10, 11], top_probs=[0.8, 0.1], top_texts=["big", "small"])
M1 = SourceInfo("m1", weight=0.4, entropy=1.0, concentration=0.5, prob=0.3, request=0, step=2, depth=3,
                same_image=False, top_ids=[11, 10, 12], top_probs=[0.5, 0.3, 0.2],
                top_texts=["small", "big", "red"])


def node(i: int, parent: int, token: int, text: str, sources=(), *, fused: float = 0.0, target: int = 999,
         origin: str = "mixed", accepted: bool = False) -> TraceNode:
    depth = 0 if parent < 0 else 1
    return TraceNode(index=i, token=token, text=text, parent=parent, depth=depth, score=1.0, fused=fused,
                     origin=origin, target_token=target, target_text={11: "small"}.get(target, "?"),
                     accepted=accepted, sources=list(sources))


def fused_step() -> TraceStep:
    q3 = [0.8 / 0.9, 0.1 / 0.9]
    q1 = [0.5, 0.3, 0.2]
    big = 0.6 * q3[0] + 0.4 * q1[1]
    small = 0.6 * q3[1] + 0.4 * q1[0]
    nodes = [node(0, -1, 5, "a", target=11, origin="root", accepted=True),
             node(1, 0, 10, "big", [M3, M1], fused=big),
             node(2, 0, 11, "small", [M3, M1], fused=small, accepted=True),
             node(3, 0, 77, "chain", origin="suffix")]
    nodes[3].suffix = True
    return TraceStep(step=4, nodes=nodes, accepted=[0, 2], bonus_token=1, bonus_text="x", emitted=[11, 1],
                     draft_s=0, verify_s=0, update_s=0)


def test_panels_match_the_trace_source_rows_and_weights_sum_to_one():
    step = fused_step()
    choice = fusion_choice(step, 0)
    assert [p.kind for p in choice.sources] == ["m3", "m1"]
    assert math.isclose(sum(p.weight for p in choice.sources), 1.0)
    for panel, src in zip(choice.sources, (M3, M1)):
        assert [b.token for b in panel.bars] == src.top_ids
        assert [b.prob for b in panel.bars] == pytest.approx([p / sum(src.top_probs) for p in src.top_probs])
        assert (panel.entropy, panel.concentration, panel.request, panel.same_image) == (
            src.entropy, src.concentration, src.request, src.same_image,
        )
    # drafted children marked, the target's token (11) flagged in every panel that has it
    assert {b.token: b.drafted for b in choice.sources[1].bars} == {11: 2, 10: 1, 12: None}
    assert [b.token for p in choice.sources for b in p.bars if b.target] == [11, 11]
    assert [c.kind for c in choice.chains] == ["suffix"] and choice.chains[0].bars[0].drafted == 3


def test_fused_distribution_equals_the_trace_fused_probabilities():
    step = fused_step()
    choice = fusion_choice(step, 0)
    fused = {b.token: b.prob for b in choice.fused}
    for child in step.nodes[1:3]:
        assert fused[child.token] == pytest.approx(child.fused)
    assert sum(fused.values()) == pytest.approx(1.0)
    assert [b.token for b in choice.fused] == [t for t, _ in fuse_panels(choice.sources)]


def test_figure_titles_bars_and_colours():
    fig = fusion_figure(fusion_choice(fused_step(), 0))
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("M3: weight 0.60") and "entropy 0.20" in titles[0]
    assert "concentration 0.90" in titles[0] and titles[1].startswith("M1: weight 0.40")
    bars = [t for t in fig.data if t.meta and t.meta.get("panel") in ("m3", "m1")]
    assert [list(t.customdata) for t in bars] == [M3.top_ids, M1.top_ids]
    assert [t.marker.color for t in bars] == [ORIGIN_COLORS["m3"], ORIGIN_COLORS["m1"]]
    # the target's bar is outlined, drafted bars opaque
    m1 = bars[1]
    assert list(m1.marker.line.width) == [3, 0, 0] and list(m1.marker.opacity) == [1.0, 1.0, 0.45]
    # the fused panel stacks each source's weighted share: the shares add up to the fused bar
    shares = [t for t in fig.data if t.meta and t.meta.get("panel") == "fused-share"]
    fused = next(t for t in fig.data if t.meta and t.meta.get("panel") == "fused")
    for k, total in enumerate(fused.x):
        assert sum(t.x[k] for t in shares) == pytest.approx(total)


def test_leaf_shows_how_it_was_drafted_and_provenance():
    step = fused_step()
    choice = inspect_node(step, 2)  # a leaf: the choice at its parent, with the node picked
    assert choice.node == 0 and choice.selected == 2
    rows = provenance_rows(choice)
    assert [(r.kind, r.request, r.step, r.depth, r.same_image) for r in rows[:2]] == [
        ("m3", 2, 5, 1, True), ("m1", 0, 2, 3, False),
    ]
    page = provenance_html(choice, thumbnail=lambda r: "data:image/png;base64,AAAA" if r == 0 else None)
    assert page.count("<img") == 1 and "another image" in page  # only the row another image wrote
    assert [label for label, _ in node_choices(step)][2].startswith("2: small (depth 1, accepted)")


def test_real_trace_every_node_reconstructs(target):
    import recap

    image, prompt = example()
    memory = recap.TokenMemory(target.vocab_size, 8)
    recap.generate(target, image, prompt, method="recap", max_new_tokens=48, memory=memory, config=TREES)
    for method in ("recap", "tr"):  # TREES: drafted children to check, whatever the machine's timings
        trace = recap.generate(target, image, prompt, method=method, max_new_tokens=48, memory=memory,
                               trace=True, config=TREES).trace
        trace = DecodeTrace.from_json(trace.to_json())  # what an uploaded trace shows
        checked = 0
        for step in trace.steps:
            for n in step.nodes:
                choice = fusion_choice(step, n.index)
                if choice.sources:
                    assert sum(p.weight for p in choice.sources) == pytest.approx(1.0)
                    fused = {b.token: b.prob for b in choice.fused}
                    for kid in (k for k in step.nodes if k.parent == n.index and k.sources):
                        assert fused[kid.token] == pytest.approx(kid.fused, abs=1e-5)
                        checked += 1
            fusion_figure(fusion_choice(step, 0))
        assert checked > 0
        if method == "tr":
            assert all(len(fusion_choice(s, 0).sources) <= 1 for s in trace.steps)


def test_prompt_lookup_shows_its_single_source(target):
    import recap

    image, prompt = example()
    trace = recap.generate(target, image, prompt, method="pld", max_new_tokens=48, trace=True).trace
    chains = [fusion_choice(s, n.index)
              for s in trace.steps
              for n in s.nodes
              if any(k.parent == n.index for k in s.nodes)]
    assert chains and all(not c.sources and [p.kind for p in c.chains] == ["lookup"] for c in chains)
