"""The trace schema: every malformed upload is a TraceError naming the field; valid traces round-trip.

A trace is what a visitor uploads to the app's Decode tab, so ``DecodeTrace.from_json`` is a
boundary: anything it accepts must draw, anything else must be refused with a message that
names the field (``steps[0].nodes[1].parent: ...``), never a TypeError / RecursionError.
Valid traces' round trips and the fuzz tests are in tests/test_trace_round_trip.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import recap
import recap.engine.loop  # read below; alone, this module would not import it
from recap.trace import fields as F
from recap.trace.format import DecodeTrace, SourceInfo, TraceError, TraceNode, TraceStep

DELETE = object()  # a mutation that removes the key


def source(kind: str = "m1", **kw: Any) -> SourceInfo:
    base = {
        "weight": 0.5, "entropy": 0.7, "concentration": 0.6, "prob": 0.4, "request": 0, "step": 1, "depth": 0,
        "same_image": True, "top_token": 6, "top_text": " b", "top_prob": 0.4,
    }
    return SourceInfo(kind=kind, **{**base, **kw})


def node(index: int, parent: int, depth: int, token: int, origin: str = "m1", **kw: Any) -> TraceNode:
    return TraceNode(index=index, token=token, text=f" t{token}", parent=parent, depth=depth,
                     score=1.0 if parent < 0 else 0.5, fused=1.0 if parent < 0 else 0.6, origin=origin,
                     target_token=token + 1, target_text=f" t{token + 1}", **kw)


def valid_trace() -> DecodeTrace:
    """Two steps: a tree 0 -> 1 -> 3, 0 -> 2 with path 0, 1, 3 and bonus 9; then a root-only step."""
    step1 = TraceStep(
        step=1,
        nodes=[node(0, -1, 0, 5, "root"),
               node(1, 0, 1, 6, sources=[source("m3"), source("m1", same_image=None)]),
               node(2, 0, 1, 7, "m2", sources=[source("m2")]), node(3, 1, 2, 8, "suffix", suffix=True)],
        accepted=[0, 1, 3], bonus_token=9, bonus_text=" t9", emitted=[6, 8, 9], draft_s=0.001, verify_s=0.002,
        update_s=0.0005,
    )
    step2 = TraceStep(step=2, nodes=[node(0, -1, 0, 9, "root")], accepted=[0], bonus_token=10,
                      bonus_text=" t10", emitted=[10], draft_s=0.0, verify_s=0.002, update_s=0.0)
    return DecodeTrace(method="recap", model="tiny", prompt="describe", request=0, image_key="abc123",
                       config={**recap.RecapConfig().to_dict(), "specificity": [1.0, 2.0, 4.0]},
                       prompt_tokens=7, steps=[step1, step2], token_ids=[6, 8, 9, 10], text=" t6 t8 t9 t10",
                       timings={"prefill": 0.01, "draft": 0.001}, stop_reason="eos", budget=24,
                       token_texts=[" t6", " t8", " t9", " t10"])


def valid_dict() -> dict[str, Any]:
    return json.loads(valid_trace().to_json())


def mutated(path: tuple, value: Any) -> dict[str, Any]:
    d = valid_dict()
    obj = d
    for key in path[:-1]:
        obj = obj[key]
    if value is DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return d


def refused(text_or_dict: str | dict[str, Any], match: str, **kw: Any) -> TraceError:
    text = text_or_dict if isinstance(text_or_dict, str) else json.dumps(text_or_dict, allow_nan=True)
    with pytest.raises(TraceError, match=match) as info:
        DecodeTrace.from_json(text, **kw)
    return info.value


N1 = ("steps", 0, "nodes", 1)  # a drafted node on the accepted path
S0 = (*N1, "sources", 0)

# ----------------------------------------------------------------------------- one field at a time

#: How a string that is not an identifier (a method name, a node origin) is refused.
IDENT = (r"expected an identifier \(a lowercase letter, then at most 31 lowercase "
         r"letters, digits, '_' or '-'\)")

FIELD_CASES = [
    # types: no strings, booleans or floats where integers go
    ((*N1, "parent"), "0", r"^steps\[0\]\.nodes\[1\]\.parent: expected an integer, got the string '0'$"),
    ((*N1, "parent"), True, r"nodes\[1\]\.parent: expected an integer, got true"),
    ((*N1, "token"), 6.0, r"nodes\[1\]\.token: expected an integer, got the number 6\.0"),
    ((*N1, "token"), None, r"nodes\[1\]\.token: expected an integer, got null"),
    ((*N1, "score"), "high", r"nodes\[1\]\.score: expected a number, got the string 'high'"),
    ((*N1, "score"), False, r"nodes\[1\]\.score: expected a number, got false"),
    ((*N1, "text"), 12345, r"nodes\[1\]\.text: expected a string, got the integer 12345"),
    ((*N1, "target_text"), ["a"], r"nodes\[1\]\.target_text: expected a string, got a list"),
    ((*S0, "weight"), "w", r"nodes\[1\]\.sources\[0\]\.weight: expected a number, got the string 'w'"),
    ((*S0, "same_image"), "yes", r"sources\[0\]\.same_image: expected true or false, got the string 'yes'"),
    ((*N1, "accepted"), 1, r"nodes\[1\]\.accepted: expected true or false, got the integer 1"),
    (("steps", 0, "draft_s"), "1ms", r"steps\[0\]\.draft_s: expected a number"),
    (("prompt_tokens",), "7", r"^prompt_tokens: expected an integer, got the string '7'$"),
    (("image_key",), 5, r"^image_key: expected a string, got the integer 5$"),
    # ranges
    ((*N1, "fused"), 1.5, r"nodes\[1\]\.fused: expected a number from 0 to 1, got 1\.5"),
    ((*S0, "prob"), -0.1, r"sources\[0\]\.prob: expected a number from 0 to 1, got -0\.1"),
    ((*S0, "entropy"), -2.0, r"sources\[0\]\.entropy: expected a number of at least 0"),
    (("steps", 0, "verify_s"), -1, r"steps\[0\]\.verify_s: expected a number of at least 0, got -1"),
    (("timings",), {"draft": -1.0}, r"^timings\.draft: expected a number of at least 0"),
    (("request",), 10**12, r"^request: expected an integer from -1 to 2147483647, got 1000000000000$"),
    ((*N1, "parent"), -2, r"nodes\[1\]\.parent: expected an integer from -1 to 511, got -2"),
    (("steps", 0, "step"), 0, r"steps\[0\]\.step: expected an integer from 1 to 4096, got 0"),
    (("turn",), 0, r"^turn: expected an integer from 1 to 64, got 0$"),
    (("turn",), "2", r"^turn: expected an integer, got the string '2'$"),
    ((*N1, "token"), -3, r"nodes\[1\]\.token: expected a token id \(an integer of at least 0\), got -3"),
    ((*S0, "top_token"), -5,
     r"sources\[0\]\.top_token: expected a token id \(an integer of at least 0, or -1\)"),
    # identifiers: any method or origin a drafter names, but nothing else (no markup, no paths)
    (("method",), "<img src=x>", rf"^method: {IDENT}, got the string '<img src=x>'$"),
    (("method",), "RECAP", rf"^method: {IDENT}, got the string 'RECAP'$"),
    (("method",), "", rf"^method: {IDENT}, got the string ''$"),
    (("method",), "a" * 33, rf"^method: {IDENT}, got the string 'a{{33}}'$"),
    (("method",), 3, r"^method: expected a string, got the integer 3$"),
    ((*N1, "origin"), "1st", rf"^steps\[0\]\.nodes\[1\]\.origin: {IDENT}, got the string '1st'$"),
    ((*N1, "origin"), "../m1", rf"nodes\[1\]\.origin: {IDENT}, got the string '\.\./m1'$"),
    ((*N1, "origin"), "\ud800", r"nodes\[1\]\.origin: a string that is not valid Unicode"),
    # enumerations (also keeps markup out of what the app shows)
    (("stop_reason",), "<b>done</b>",
     r"^stop_reason: expected one of '', 'eos', 'max_new_tokens', 'stopped'"),
    ((*S0, "kind"), "m9", r"sources\[0\]\.kind: expected one of 'm1', 'm2', 'm3', 'suffix'"),
    # containers and sizes
    (("steps",), {}, r"^steps: expected a list, got an object$"),
    (N1, [1, 2], r"^steps\[0\]\.nodes\[1\]: expected an object, got a list of 2 entries$"),
    ((*N1, "sources"), "x", r"nodes\[1\]\.sources: expected a list, got the string 'x'"),
    ((*N1, "sources"), [{}] * 5, r"nodes\[1\]\.sources: 5 entries; at most 4 are allowed"),
    ((*N1, "text"), "x" * 300, r"nodes\[1\]\.text: a string of 300 characters; at most 256 are allowed"),
    (("config",), "fast", r"^config: expected an object, got the string 'fast'$"),
    (("config",), {"budget": [[[[[1]]]]]},
     r"^config\.budget\[0\]\[0\]\[0\]\[0\]: nested more than 4 levels deep$"),
    (("token_ids",), [6, 8, "9", 10], r"^token_ids\[2\]: expected an integer, got the string '9'$"),
    # text the app's responses cannot carry (JSON's "\ud800" escape decodes to a lone surrogate)
    ((*N1, "text"), "\ud800", r"nodes\[1\]\.text: a string that is not valid Unicode"),
    (("config",), {"\udfff": 1}, r"^config: key '\\udfff': a string that is not valid Unicode"),
    (("timings",), {"x" * 300: 1.0}, r"^timings: key 'x{40}'…: a string of 300 characters; at most 256"),
    (("config",), {"a": {"\ud800": 1}}, r"^config\.a: key '\\ud800': a string that is not valid Unicode"),
    # missing fields (those with defaults may be absent: see the older-trace test)
    ((*N1, "parent"), DELETE, r"^steps\[0\]\.nodes\[1\]: missing field 'parent'$"),
    (("steps", 1, "bonus_token"), DELETE, r"^steps\[1\]: missing field 'bonus_token'$"),
    (("model",), DELETE, r"^missing field 'model'$"),
    # structure: the tree, the accepted path, the emitted tokens
    ((*N1, "parent"), 3,
     r"nodes\[1\]\.parent: expected an earlier node's index \(0 to 0\), got 3"),  # cycle 1 <-> 3
    ((*N1, "parent"), 1, r"nodes\[1\]\.parent: expected an earlier node's index"),  # its own parent
    (("steps", 0, "nodes", 3, "parent"), 99,
     r"nodes\[3\]\.parent: expected an earlier node's index \(0 to 2\)"),
    (("steps", 0, "nodes", 0, "parent"), 0, r"nodes\[0\]: node 0 is the root, with parent -1 and depth 0"),
    ((*N1, "depth"), 2, r"nodes\[1\]\.depth: expected its parent's depth \+ 1 = 1, got 2"),
    ((*N1, "index"), 2, r"nodes\[1\]\.index: nodes are listed by index; expected 1, got 2"),
    (("steps", 0, "nodes"), [], r"^steps\[0\]\.nodes: a tree has at least its root$"),
    (("steps", 0, "accepted"), [0, 3], r"steps\[0\]\.accepted: \[0, 3\] is not a path down from the root"),
    (("steps", 0, "accepted"), [1, 3], r"steps\[0\]\.accepted: the accepted path starts at the root"),
    (("steps", 0, "accepted"), [], r"steps\[0\]\.accepted: the accepted path starts at the root"),
    (("steps", 0, "accepted"), [0, 600], r"steps\[0\]\.accepted\[1\]: expected an integer from 0 to 511"),
    (("steps", 0, "emitted"), [6, 7, 9],
     r"steps\[0\]\.emitted: expected the accepted path's tokens then the bonus"),
    (("steps", 0, "emitted"), [6, 8, 9, 9], r"steps\[0\]\.emitted: expected"),
    (("steps", 1, "step"), 5,
     r"steps\[1\]\.step: steps are numbered 1, 2, 3 \.\.\. in order; expected 2, got 5"),
    (("token_ids",), [6, 8, 9], r"^token_ids: the steps emit 4 tokens but token_ids holds 3$"),
    (("token_ids",), [6, 8, 9, 11],
     r"^token_ids\[3\]: the steps emitted token 10 there, token_ids holds 11$"),
    (("token_texts",), ["a"] * 5, r"^token_texts: 5 texts for 4 tokens$"),
    # the envelope
    (("version",), True, r"unsupported trace version true"),
    (("schema",), DELETE, r"not a RECAP trace \(schema is null"),
]


@pytest.mark.parametrize("path, value, match", FIELD_CASES, ids=[m for _, _, m in FIELD_CASES])
def test_a_malformed_field_is_refused_naming_it(path, value, match):
    refused(mutated(path, value), match)


@pytest.mark.parametrize(
    "literal, shown",
    [
        ("1e400", "1e400 (too large)"), ("-1e400", "-1e400 (too large)"), ("NaN", "NaN"),
        ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
        ("1" + "0" * 400, "a 401-digit number (too large)"),
    ],
)
def test_numbers_json_allows_but_a_trace_never_holds(literal, shown):
    """10^400 parses to inf in Python's json, NaN and Infinity are accepted by default.

    All are refused by field."""
    text = valid_trace().to_json().replace('"score": 0.5', f'"score": {literal}', 1)
    assert literal in text
    refused(text, rf"^steps\[0\]\.nodes\[1\]\.score: expected a finite number, got {re.escape(shown)}$")


def test_huge_integer_in_an_integer_field():
    text = valid_trace().to_json().replace('"prompt_tokens": 7', '"prompt_tokens": ' + "9" * 5000)
    refused(text, r"^prompt_tokens: expected an integer, got a 5000-digit number \(too large\)$")


def test_token_ids_outside_the_vocabulary_when_it_is_known():
    text = valid_trace().to_json()
    DecodeTrace.from_json(text, vocab_size=11)  # ids 5..10 fit a vocabulary of 11
    refused(text, r"nodes\[0\]\.token: token id 5 is outside the vocabulary \(0 to 4\)", vocab_size=5)
    refused(text, r"^steps\[0\]\.nodes\[3\]\.target_token: token id 9 is outside the vocabulary \(0 to 8\)$",
            vocab_size=9)
    refused(json.dumps(mutated((*S0, "top_token"), 50)),
            r"top_token: token id 50 is outside the vocabulary "
            r"\(0 to 10, or -1\)", vocab_size=11)


# ----------------------------------------------------------------------------- whole documents


@pytest.mark.parametrize(
    "text, match",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"schema": "recap-trace", "version": 1, "config": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "nested too deeply"),
        ("{", r"not a JSON document \(Expecting property name"), ("", "not a JSON document"),
        ("[]", "a trace must be a JSON object, got a list"), ("12", "got the integer 12"),
        ('{"schema": "recap-trace", "version": 99}', "unsupported trace version the integer 99"),
        ('{"schema": "' + "x" * 10_000 + '"}', r"schema is the string 'x{40}'…"),
    ],
)
def test_malformed_documents(text, match):
    refused(text, match)


def test_bytes_utf8_with_or_without_bom_and_not_utf8():
    text = valid_trace().to_json()
    assert DecodeTrace.from_json(text.encode()) == valid_trace()
    assert DecodeTrace.from_json(b"\xef\xbb\xbf" + text.encode()) == valid_trace()
    with pytest.raises(TraceError, match="not UTF-8 text"):
        DecodeTrace.from_json(b"\xff\xfe{}")
    with pytest.raises(TraceError, match="a trace is JSON text, got an object"):
        DecodeTrace.from_json({"schema": "recap-trace"})  # type: ignore[arg-type]


def test_a_document_over_the_byte_limit_is_refused_before_parsing():
    refused(" " * (F.MAX_TRACE_BYTES + 1), r"^the trace is 50\.3 MB; at most 50 MB are read$")


def nodes_json(n: int) -> str:
    """A chain of n nodes, as JSON text (built by string joins: fast for 10^5 nodes)."""
    one = json.dumps({**valid_dict()["steps"][0]["nodes"][1], "sources": []})
    return ", ".join(one.replace('"index": 1', f'"index": {i}', 1) for i in range(n))


def test_a_100k_node_step_is_refused_by_the_node_count_before_parsing():
    """The issue's 20 MB / 10^5-node upload: refused by counting "parent" keys, nothing parsed or built."""
    d = valid_dict()
    d["steps"][0]["nodes"] = "NODES"
    text = json.dumps(d).replace('"NODES"', "[" + nodes_json(100_000) + "]")
    assert len(text) < F.MAX_TRACE_BYTES  # under the byte limit: the node count is what refuses it
    refused(text, rf"^the trace has about 100001 nodes; at most {F.MAX_TOTAL_NODES} are read$")


def test_a_step_over_the_per_step_limit_is_refused_before_building_nodes():
    d = valid_dict()
    d["steps"][0]["nodes"] = [d["steps"][0]["nodes"][1]] * (F.MAX_NODES_PER_STEP + 1)
    refused(d, rf"^steps\[0\]\.nodes: 513 nodes; a step holds at most {F.MAX_NODES_PER_STEP}$")


def test_too_many_nodes_in_all_is_refused_before_building_nodes():
    d = valid_dict()
    many = [d["steps"][0]["nodes"][1]] * F.MAX_NODES_PER_STEP
    d["steps"] = [
        dict(d["steps"][0], nodes=many) for _ in range(F.MAX_TOTAL_NODES // F.MAX_NODES_PER_STEP + 1)
    ]
    with pytest.raises(TraceError, match=r"^steps: 50176 nodes in all; at most 50000 are read$"):
        DecodeTrace.from_dict(d)  # from parsed JSON: the count is checked before any object is built


def test_limits_hold_every_trace_the_engine_can_write():
    assert F.MAX_TOKENS >= recap.engine.loop.MAX_NEW_TOKENS_LIMIT
    assert F.MAX_STEPS >= F.MAX_TOKENS  # every step emits at least one token
    assert F.MAX_NODES_PER_STEP >= recap.RecapConfig.MAX_BUDGET + 1  # drafted nodes plus the root
    assert F.MAX_SOURCES_PER_NODE >= len(F.SOURCE_KINDS)
    # every method's trace loads
    assert all(re.fullmatch(F.IDENTIFIER_PATTERN, name) for name in recap.METHODS)


# ----------------------------------------------------------------------------- files


def test_load_names_the_file_but_never_its_folder(tmp_path):
    with pytest.raises(TraceError, match=r"^trace file not found: nope\.json$") as info:
        DecodeTrace.load(tmp_path / "nope.json")
    assert str(tmp_path) not in str(info.value)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(F.MAX_TRACE_BYTES + 1)  # sparse: refused from its size, never read
    with pytest.raises(TraceError, match=r"^big\.json is 50\.3 MB; traces up to 50 MB are read$"):
        DecodeTrace.load(big)
    with pytest.raises(TraceError, match="is not a file"):
        DecodeTrace.load(tmp_path)


def test_load_round_trip(tmp_path):
    path = tmp_path / "t.json"
    valid_trace().to_json(path)
    assert DecodeTrace.load(path, vocab_size=11) == valid_trace()
