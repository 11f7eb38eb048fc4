"""Trace schema version 2: insertion order and per-source top-k; version-1 traces still load."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_figures import make_step, make_trace

from app.presenters.fusion import fusion_choice, fusion_figure
from app.presenters.play import play_figure
from recap.trace.format import GREEDY_VERSION, DecodeTrace, TraceError


def v1_text(trace: DecodeTrace) -> str:
    """The trace as a version-1 file: no order, no top-k lists."""
    d = trace.to_dict()
    d["version"] = 1
    for s in d["steps"]:
        for n in s["nodes"]:
            del n["order"]
            for src in n["sources"]:
                for key in ("top_ids", "top_probs", "top_texts"):
                    del src[key]
    return json.dumps(d)


def ordered_trace() -> DecodeTrace:
    step = make_step([-1, 0, 0, 1], [0, 1])
    nodes = [dataclasses.replace(n, order=o) for n, o in zip(step.nodes, [0, 2, 1, 3])]
    return make_trace([dataclasses.replace(step, nodes=nodes)])


def test_version_2_round_trip_keeps_order_and_top_k():
    trace = ordered_trace()
    trace.steps[0].nodes[1].sources[0].top_ids = [101, 5]
    trace.steps[0].nodes[1].sources[0].top_probs = [0.7, 0.2]
    trace.steps[0].nodes[1].sources[0].top_texts = ["w1", "x"]
    back = DecodeTrace.from_json(trace.to_json())
    assert (
        json.loads(trace.to_json())["version"] == GREEDY_VERSION == 2
    )  # a greedy trace (version 3 adds sampling)
    assert [n.order for n in back.steps[0].nodes] == [0, 2, 1, 3]
    assert back.steps[0].insertion_order() == [0, 2, 1, 3]
    assert back.steps[0].nodes[1].sources[0].top_ids == [101, 5]


def test_version_1_traces_load_and_play():
    old = DecodeTrace.from_json(v1_text(ordered_trace()))
    step = old.steps[0]
    assert [n.order for n in step.nodes] == [-1] * 4
    assert step.insertion_order() == [0, 1, 2, 3]
    assert all(src.top_ids == [] for n in step.nodes for src in n.sources)
    play_figure(step)
    choice = fusion_choice(step, 0)  # only the entry's top-1 is known: the panel says so
    assert choice.sources and all(p.partial for p in choice.sources)
    titles = [a.text for a in fusion_figure(choice).layout.annotations]
    assert any("older trace" in t for t in titles)


@pytest.mark.parametrize("order, message",
                         [
                             ([0, 1, 1, 3], "not 0..3"), ([1, 0, 2, 3], "not 0..3 with the root first"),
                             ([0, 3, 2, 1], "added before its parent"),
                         ])
def test_bad_orders_are_refused_with_the_reason(order, message):
    d = ordered_trace().to_dict()
    for n, o in zip(d["steps"][0]["nodes"], order):
        n["order"] = o
    with pytest.raises(TraceError, match=message):
        DecodeTrace.from_dict(d)


@pytest.mark.parametrize("field, value, message",
                         [
                             ("top_ids", [1, 2], "differ in length"),
                             ("top_ids", "abc", r"sources\[0\]\.top_ids: expected a list"),
                             ("top_probs", [float("inf")], r"top_probs\[0\]: expected a finite number"),
                         ])
def test_bad_top_k_lists_are_refused(field, value, message):
    trace = ordered_trace()
    src = trace.steps[0].nodes[1].sources[0]
    src.top_ids, src.top_probs, src.top_texts = [7], [0.5], ["x"]
    d = trace.to_dict()
    d["steps"][0]["nodes"][1]["sources"][0][field] = value
    with pytest.raises(TraceError, match=message):
        DecodeTrace.from_dict(d)
