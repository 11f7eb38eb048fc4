"""Trace round trips: valid traces load back equal and draw; fuzzed ones draw or raise TraceError."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest
from accepted import TREES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trace_schema import node, valid_dict, valid_trace

import recap
from recap.core.jsontext import SchemaError
from recap.core.schema import checker
from recap.trace import fields as F
from recap.trace.format import DecodeTrace, TraceError, TraceNode, TraceStep

# ----------------------------------------------------------------------------- valid traces


def test_round_trip_of_a_hand_made_trace():
    back = DecodeTrace.from_json(valid_trace().to_json())
    assert back == valid_trace()
    back.validate(vocab_size=11)


def test_a_drafter_s_own_method_and_origins_round_trip():
    """A drafter registered by a user names its method and its nodes' origins itself."""
    trace = valid_trace()
    trace.method = "beam-search_2"
    trace.steps[0].nodes[1].origin = "beam"
    trace.steps[0].nodes[3].origin = "n" + "x" * 31  # the longest identifier
    trace.validate(vocab_size=11)
    back = DecodeTrace.from_json(trace.to_json())
    assert back == trace and back.method == "beam-search_2" and back.steps[0].nodes[1].origin == "beam"


def test_an_engine_trace_round_trips_within_its_vocabulary(load_tiny):
    target = load_tiny("qwen2_5_vl")
    memory = recap.TokenMemory.for_target(target)
    for _ in range(2):  # the second request drafts from the first one's memory: sources, provenance
        out = recap.generate(target, None, "describe the image .", memory=memory, max_new_tokens=12,
                             trace=True, config=TREES)  # trees drafted: nodes with sources
    out.trace.validate(vocab_size=target.vocab_size)
    back = DecodeTrace.from_json(out.trace.to_json(), vocab_size=target.vocab_size)
    assert back.to_json() == out.trace.to_json()
    assert any(n.sources for s in back.steps for n in s.nodes)


def test_an_older_trace_without_optional_fields_loads_with_their_defaults():
    d = valid_dict()
    for key in ("text", "timings", "stop_reason", "budget", "token_texts", "turn"):
        del d[key]
    for s in d["steps"]:
        for n in s["nodes"]:
            for key in ("accepted", "suffix", "sources"):
                n.pop(key, None)
    d2 = copy.deepcopy(valid_dict())
    for src in d2["steps"][0]["nodes"][1]["sources"]:
        for key in ("same_image", "top_token", "top_text", "top_prob"):
            del src[key]
    old = DecodeTrace.from_dict(d)
    assert old.stop_reason == "" and old.token_texts == [] and old.steps[0].nodes[1].sources == []
    assert old.turn == 1  # a trace from before conversations answered a first turn
    src = DecodeTrace.from_dict(d2).steps[0].nodes[1].sources[0]
    assert (src.same_image, src.top_token, src.top_text, src.top_prob) == (None, -1, "", 0.0)


def test_unknown_keys_are_ignored_and_integers_stand_for_floats():
    d = valid_dict()
    d["written_by"] = "a newer build"
    d["steps"][0]["nodes"][1]["colour"] = "a key this build does not know"
    d["steps"][0]["nodes"][1]["score"] = 1  # JSON writers may drop the ".0"
    trace = DecodeTrace.from_dict(d)
    assert trace.steps[0].nodes[1].score == 1.0 and isinstance(trace.steps[0].nodes[1].score, float)
    assert not hasattr(trace, "written_by")


def test_an_older_builds_trace_with_a_notice_loads():
    """Builds before this one wrote a ``notice`` (always "" at the end, once a sampling config decoded
    greedily said so): the field is gone, its key is ignored, and the trace loads as it was."""
    for notice in ("", "sampling config decoded greedily"):
        for version in (1, 2):
            d = {**valid_dict(), "version": version, "notice": notice}
            trace = DecodeTrace.from_json(json.dumps(d))
            assert trace == valid_trace() and not hasattr(trace, "notice")
            assert "notice" not in trace.to_dict()


def test_validate_checks_objects_built_in_code():
    trace = valid_trace()
    trace.steps[0].nodes[1].text = 12345  # type: ignore[assignment]
    with pytest.raises(TraceError,
                       match=r"^steps\[0\]\.nodes\[1\]\.text: expected a string, got the integer 12345$"):
        trace.validate()
    trace = valid_trace()
    trace.steps[0].nodes[2].score = float("nan")
    with pytest.raises(TraceError, match=r"nodes\[2\]\.score: expected a finite number, got nan"):
        trace.validate()
    trace = valid_trace()
    trace.steps[0].nodes = [{"index": 0}]  # type: ignore[list-item]
    with pytest.raises(TraceError, match=r"steps\[0\]\.nodes\[0\]: expected a TraceNode, got an object"):
        trace.validate()


@dataclass
class NodeWithOrder(TraceNode):
    """What a later optional field looks like: annotated, with a default."""

    order: int = -1
    sizes: tuple[int, ...] = ()


def test_a_field_added_later_with_a_default_loads_from_older_traces_and_is_checked():
    read = checker(NodeWithOrder)
    old = valid_dict()["steps"][0]["nodes"][1]
    assert (read(old).order, read(old).sizes) == (-1, ())
    assert (read({**old, "order": 4, "sizes": [1, 2]}).order, read({**old, "sizes": [1, 2]}).sizes) == (
        4, (1, 2),
    )
    with pytest.raises(SchemaError, match=r"^order: expected an integer, got the string '4'$"):
        read({**old, "order": "4"})
    with pytest.raises(SchemaError, match=r"^sizes\[1\]: expected an integer, got null$"):
        read({**old, "sizes": [1, None]})


@pytest.mark.parametrize("shape", ["chain", "star"])
def test_the_largest_step_allowed_draws(shape):
    n = F.MAX_NODES_PER_STEP
    parents = [-1] + [i - 1 if shape == "chain" else 0 for i in range(1, n)]
    depths = [0]
    for p in parents[1:]:
        depths.append(depths[p] + 1)
    nodes = [node(i, p, d, 5 + i % 7) for i, (p, d) in enumerate(zip(parents, depths))]
    accepted = [0, 1, 2] if shape == "chain" else [0, 1]
    emitted = [nodes[i].token for i in accepted[1:]] + [3]
    step = TraceStep(step=1, nodes=nodes, accepted=accepted, bonus_token=3, bonus_text="b", emitted=emitted,
                     draft_s=0.0, verify_s=0.0, update_s=0.0)
    trace = DecodeTrace(method="recap", model="m", prompt="p", request=0, image_key=None, config={},
                        prompt_tokens=3, steps=[step], token_ids=emitted)
    draws(DecodeTrace.from_json(trace.to_json()))


# ----------------------------------------------------------------------------- fuzz


def draws(trace: DecodeTrace) -> None:
    """Everything the app draws from a trace: it must not raise for an accepted trace."""
    from plotly.utils import PlotlyJSONEncoder

    from app.presenters.charts import accepted_length_figure, step_time_figure
    from app.presenters.text import highlighted, status_markdown
    from app.presenters.tree import tree_figure
    from app.state.aliasing import trace_states

    trace.validate()
    figures = [tree_figure(s, highlight=len(s.nodes) - 1) for s in trace.steps]
    figures += [accepted_length_figure(trace, current=1), step_time_figure(trace)]
    # What the app sends must encode as UTF-8 (a lone surrogate would fail the response).
    for fig in figures:
        json.dumps(fig.to_plotly_json(), cls=PlotlyJSONEncoder, ensure_ascii=False).encode("utf-8")
    json.dumps([highlighted(trace, current=1), status_markdown(trace)], ensure_ascii=False).encode("utf-8")
    trace_states(trace)


def locations(obj: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        out += locations(value, (*path, key))
    return out


JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.sampled_from([0, 1, -1, 2, 3, 9, 10, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.5, 1.0, 1.5, -0.5]),
    st.text(max_size=6),
    st.sampled_from(["0", "high", "m1", "root", "recap", "eos", "", "\ud800", "<b>x</b>"]),
    st.lists(st.integers(-2, 12), max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(-1, 3), max_size=2),
)
BASE = valid_dict()
PLACES = locations(BASE)[1:]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(["set", "delete", "dup"]), JSON_VALUES),
                min_size=1, max_size=3))
def test_fuzz_mutated_traces_load_and_draw_or_raise_trace_error(mutations):
    d = copy.deepcopy(BASE)
    for path, op, value in mutations:
        parent = d
        try:
            for key in path[:-1]:
                parent = parent[key]
            key = path[-1]
            parent[key]  # noqa: B018 (the place may be gone after an earlier mutation)
        except (KeyError, IndexError, TypeError):
            continue
        if op == "delete":
            del parent[key]
        elif op == "dup" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[key] = value
    try:
        trace = DecodeTrace.from_json(json.dumps(d, allow_nan=True))
    except TraceError:
        return
    draws(trace)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(list('{}[]",:-.0123456789eEtrufalsnNI \\'))),
                min_size=1, max_size=4))
def test_fuzz_edited_trace_text_loads_and_draws_or_raises_trace_error(edits):
    text = valid_trace().to_json()
    for pos, char in edits:
        pos %= len(text)
        text = text[:pos] + char + text[pos + 1 :] if pos % 2 else text[:pos] + char + text[pos:]
    try:
        trace = DecodeTrace.from_json(text)
    except TraceError:
        return
    draws(trace)
