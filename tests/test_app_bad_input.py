"""Hostile files and values through the API (issue 16): each gets a clear sentence, and the session stays as
it was.

Traces: nested 100,000 levels deep, wrong types and out-of-range numbers in nodes and sources.
Memory files: ids outside the vocabulary, NaN probabilities, a k of "0" or 10^12. /run: values
no widget can send (None, "x", "Infinity", "NaN"). The library's schema checks
(``recap.trace.format``, ``TokenMemory.load``) name the field; the app shows their message and
keeps what the session had.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest_app import advanced_values, example
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from safetensors import safe_open
from safetensors.torch import save_file

import recap
from recap.memory.file import MemoryFileError
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url

D = recap.RecapConfig()
ADVANCED = advanced_values()
GENERIC = ("upstream", "raised an exception", "Traceback")


@pytest.fixture()
def client(app_url: str) -> Client:
    return Client(app_url, verbose=False)


@pytest.fixture(scope="module")
def good_trace(app_url) -> str:
    image, prompt = example()
    return Client(app_url, verbose=False).predict(handle_file(image), prompt, "recap", 16, api_name="/decode")


@pytest.fixture(scope="module")
def saved_memory(app_url, tmp_path_factory) -> str:
    """A memory file of this app's model with filled rows (from one decode)."""
    import shutil

    client = Client(app_url, verbose=False)
    image, prompt = example()
    client.predict(handle_file(image), prompt, "recap", 12, api_name="/decode")
    path = tmp_path_factory.mktemp("memory") / "saved.safetensors"
    shutil.copy(client.predict("recap", D.top_k, api_name="/save_memory"), path)
    return str(path)


def clear(message: str) -> bool:
    return bool(message.strip()) and not any(g in message for g in GENERIC) and len(message) < 400


def mutated(text: str, change) -> str:
    data = json.loads(text)
    change(data)
    return json.dumps(data)


def set_node(field, value):
    def change(data):
        data["steps"][0]["nodes"][-1][field] = value
    return change


def set_source(field, value):
    def change(data):
        for step in data["steps"]:
            for node in step["nodes"]:
                if node["sources"]:
                    node["sources"][0][field] = value
                    return
        raise AssertionError("the trace has no node with a source")
    return change


TRACE_CASES = {
    "nested 100,000 levels": lambda t: '{"schema": "recap-trace", "version": 1, "steps": ' + "[" * 100_000
    + "]" * 100_000 + "}",
    "parent '0'": lambda t: mutated(t, set_node("parent", "0")),
    "parent out of the tree": lambda t: mutated(t, set_node("parent", 10**6)),
    "score 10^400": lambda t: mutated(t, set_node("score", 1e400)).replace("Infinity", "1e400"),
    "score 'high'": lambda t: mutated(t, set_node("score", "high")),
    "text 12345": lambda t: mutated(t, set_node("text", 12345)),
    "source weight 'w'": lambda t: mutated(t, set_source("weight", "w")),
    "source kind unknown": lambda t: mutated(t, set_source("kind", "<b>m9</b>")),
}


@pytest.mark.parametrize("case", list(TRACE_CASES))
def test_a_hostile_trace_is_refused_or_shown_never_a_generic_error(client, good_trace, tmp_path, case):
    good = tmp_path / "good.json"
    good.write_text(good_trace)
    client.predict(handle_file(str(good)), api_name="/load_trace")
    before = client.predict(1, api_name="/show_step")[0]  # what the session shows now (the good run)
    text = TRACE_CASES[case](good_trace)
    # accepted, these would leave a run the views cannot draw: the library refuses them
    if case in DRAWS_BADLY:
        assert not library_accepts_trace(text), f"recap.trace.format accepts a trace with {case}"
    path = tmp_path / "hostile.json"
    path.write_text(text)
    status, error, *_ = client.predict(handle_file(str(path)), api_name="/load_trace")
    if error:  # refused: a sentence, and the session still shows its own run
        assert "cannot be shown" in error and clear(error), error
        assert client.predict(1, api_name="/show_step")[0] == before
        return
    # accepted (the value was harmless): every step of it draws
    n = len(DecodeTrace.from_json(good_trace).steps)
    for k in range(1, n + 1):
        _, error, *_ = client.predict(k, api_name="/show_step")
        assert not error or clear(error)


# accepted by a library without the schema check, then undrawable
DRAWS_BADLY = ("text 12345", "source weight 'w'")


def library_accepts_trace(text: str) -> bool:
    try:
        DecodeTrace.from_json(text)
    except (recap.TraceError, RecursionError):
        return False
    return True


def hostile_memory(saved: str, out, tensors=None, meta=None) -> str:
    with safe_open(saved, "pt") as f:
        data = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no iteration
        metadata = dict(f.metadata())
    for name, edit in (tensors or {}).items():
        data[name] = edit(data[name].clone())
    metadata.update(meta or {})
    save_file(data, str(out), metadata=metadata)
    return str(out)


def set_first(value):
    def edit(t: torch.Tensor) -> torch.Tensor:
        t.view(-1)[0] = value
        return t
    return edit


MEMORY_CASES = {
    "id 10^6": ({"ids": set_first(10**6)}, None),
    "id -3": ({"ids": set_first(-3)}, None),
    "probability NaN": ({"probs": set_first(math.nan)}, None),
    "k '0'": (None, {"k": "0"}),
    "k 10^12": (None, {"k": str(10**12)}),
    "k 'lots'": (None, {"k": "lots"}),
    "requests not JSON": (None, {"requests": "[{"}),
}


@pytest.mark.parametrize("case", list(MEMORY_CASES))
def test_a_hostile_memory_file_is_refused_and_the_session_keeps_its_memory(
    client, target, saved_memory, tmp_path, case
):
    saved = saved_memory
    client.predict(handle_file(saved), "recap", D.top_k, api_name="/load_memory")  # the session's memory
    before = recap.TokenMemory.load(saved)
    tensors, meta = MEMORY_CASES[case]
    path = hostile_memory(saved, tmp_path / "hostile.safetensors", tensors, meta)
    with pytest.raises(MemoryFileError):  # the library names the field before allocating anything
        recap.TokenMemory.load(path, vocab_size=target.vocab_size)
    info = client.predict(handle_file(path), "recap", D.top_k, api_name="/load_memory")
    assert "memory unchanged" in info and clear(info), info
    assert f"**{before.filled}** of" in info  # the memory kept its rows
    after = recap.TokenMemory.load(client.predict("recap", D.top_k, api_name="/save_memory"))
    assert torch.equal(after.ids, before.ids)
    image, prompt = example()
    trace = DecodeTrace.from_json(client.predict(handle_file(image), prompt, "recap", 4, api_name="/decode"))
    assert trace.token_ids  # every RECAP decode of the session still works


def test_a_file_that_is_no_safetensors_is_named_before_the_library_reads_it(tmp_path) -> None:
    from app.boundary.errors import UserError
    from app.tabs.decode.panels import check_memory_k

    junk = tmp_path / "memory.safetensors"
    junk.write_bytes(b"not a memory" * 100)
    with pytest.raises(UserError, match="not a safetensors file"):
        check_memory_k(str(junk), 8)
    with pytest.raises(UserError, match="cannot be read"):
        check_memory_k(str(tmp_path), 8)  # a folder: the OS refuses it, and that is said
    real = tmp_path / "k.safetensors"
    save_file({"ids": torch.zeros(2, 3, dtype=torch.int64)}, str(real), metadata={"k": "3"})
    check_memory_k(str(real), 8)  # within the ceiling: nothing to say


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("budget", "x", "budget"),
        ("budget", "Infinity", "budget"),
        ("budget", None, "budget"),
        ("top_k", "NaN", "top_k"),
        ("max_depth", [1], "max_depth"),
        ("eps", "inf", "eps"),
        ("fusion", {"a": 1}, "fusion"),
        ("specificity_1", "-0", "specificity"),
        ("cost_aware", "false", "cost-aware"),
        ("use_m2", 1, "use_m2"),
    ],
)
def test_run_with_values_no_widget_sends(client, name, value, field):
    image, prompt = example()
    advanced = advanced_values(**{"auto_budget": False, name: value})  # a number budget is read unticked
    status, error, *_ = client.predict(handle_file(image), prompt, "recap", 8, *advanced, api_name="/run")
    assert field in error and clear(error), error


@pytest.mark.parametrize("n", [None, "x", "Infinity", "NaN", 1e30, [3]])
def test_max_new_tokens_no_widget_sends(client, n):
    image, prompt = example()
    status, error, *_ = client.predict(handle_file(image), prompt, "ar", n, *ADVANCED, api_name="/run")
    assert "max new tokens" in error and clear(error), error
    with pytest.raises(AppError, match="max new tokens"):
        client.predict(handle_file(image), prompt, "ar", n, api_name="/decode")


def test_method_and_prompt_of_the_wrong_type(client):
    image, _ = example()
    for method in (None, 3, "<b>ar</b>"):
        _, error, *_ = client.predict(handle_file(image), "Describe.", method, 8, *ADVANCED, api_name="/run")
        assert "unknown method" in error and "<b>" not in error  # the visitor's text is escaped
    with pytest.raises(AppError, match="prompt is empty"):
        client.predict(handle_file(image), None, "ar", 8, api_name="/decode")
