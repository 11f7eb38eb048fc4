"""A new drafter is one module plus one registry line.

The drafter below lives in this file only. Registered with ``recap.methods.register``, it runs
through the engine (token for token what the model's own greedy ``generate()`` emits), the
trace (its method name and node origin round-trip through JSON), the benchmark, the command
line and the app's method list, and nothing else is touched: no other file is edited and
nothing is monkeypatched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_lossless import make_image, reference

import recap
import recap.methods
from recap import bench
from recap.drafting.protocol import DraftSetup, DraftState, Verification
from recap.drafting.tree import DraftTree
from recap.memory.store import RequestMemory
from recap.methods import Method

NAME = "echo"
CHAIN = 4  # tokens proposed per step


class EchoDrafter:
    """Proposes, below the root, the chain the target picked after these tokens last time.

    Its memory is its own: one dict, token -> the target's latest pick after it, filled from
    the prefill's top-1 predictions and from every verified node's pick.
    """

    needs_predictions = True  # the prefill's predictions seed the table
    budget = CHAIN
    memory: RequestMemory | None = None  # nothing for the trace's provenance

    def __init__(self) -> None:
        self.after: dict[int, int] = {}

    def draft(self, state: DraftState) -> DraftTree:
        tree = DraftTree.root(state.seq[-1])
        node, tok = 0, state.seq[-1]
        for _ in range(CHAIN):
            nxt = self.after.get(tok)
            if nxt is None:
                break
            node = tree.add(node, nxt, score=0.5, origin="plugin")
            tok = nxt
        return tree

    def update(self, state: DraftState, verified: Verification) -> None:
        if verified.tree is None:  # the prefill: the target's top-1 after each prompt token but the last
            assert verified.top_ids is not None
            self.after.update(zip(state.seq[:-1], verified.top_ids[:, 0].tolist()))
            return
        self.after.update(zip(verified.tree.tokens, verified.picked))


def make_echo(setup: DraftSetup) -> EchoDrafter:
    return EchoDrafter()


@pytest.fixture
def echo() -> Iterator[Method]:
    method = recap.methods.register(Method(NAME, "Echo (a test plugin)", "#0f766e", False, make_echo))
    try:
        yield method
    finally:
        recap.methods.unregister(NAME)
    assert NAME not in recap.methods.method_names()


def test_a_registered_drafter_runs_through_the_engine_losslessly_and_traces(load_tiny, echo) -> None:
    target = load_tiny("qwen2_5_vl")
    assert recap.methods.get_method(NAME) is echo and recap.methods.registered()[-1] is echo
    for seed in (1, 2):
        img, prompt = make_image(seed), "describe the image ."
        out = recap.generate(target, img, prompt, method=NAME, max_new_tokens=24, trace=True)
        assert out.token_ids == reference(target, img, prompt, 24)
        assert out.method == NAME and out.trace is not None
        steps = out.trace.steps
        assert any(n.origin == "plugin" for s in steps for n in s.nodes), "the drafter proposed nothing"
        assert out.decode_steps < len(out.token_ids), "nothing it proposed was accepted"
        back = recap.DecodeTrace.from_json(out.trace.to_json())
        assert back.method == NAME and back.token_ids == out.token_ids and back.budget == CHAIN
        assert [n.origin for s in back.steps for n in s.nodes] == [n.origin for s in steps for n in s.nodes]


def test_a_registered_drafter_runs_in_the_benchmark(load_tiny, echo, tmp_path: Path) -> None:
    target = load_tiny("qwen2_5_vl")
    results = bench.bench(target, suite="quick", methods=[NAME], limit=2, repeats=2, max_new_tokens=12,
                          progress=False)
    assert [a["name"] for a in results["arms"]] == ["hf", NAME]
    assert results["lossless"]["ok"], results["lossless"]["mismatches"]
    assert {r["arm"] for r in results["records"]} == {"hf", NAME}
    assert results["summary"][NAME]["overall"]["lossless"]
    paths = bench.write_results(results, tmp_path, "results")
    assert echo.label in Path(paths["md"]).read_text()
    assert NAME in bench.all_methods()


def test_a_registered_drafter_is_a_command_line_choice(echo) -> None:
    from recap.__main__ import build_parser

    args = build_parser().parse_args(["generate", "--prompt", "hi", "--method", NAME])
    assert args.method == NAME


def test_a_registered_drafter_is_in_the_apps_method_list(echo) -> None:
    from app.state.settings import app_methods

    assert echo in app_methods()


def test_registration_is_loud(echo) -> None:
    def bad(name: str = "plugin", label: str = "Plugin", colour: str = "#123456") -> Method:
        return Method(name, label, colour, False, make_echo)

    for method, says in (
        (bad(NAME), "already registered"),
        (bad("hf"), "already registered"),  # the benchmark's own rows
        (bad("Not An Id"), "lowercase letter"),
        (bad(label=" "), "label"),
        (bad(colour="blue"), "colour"),
    ):
        with pytest.raises(ValueError, match=says):
            recap.methods.register(method)
    with pytest.raises(ValueError, match="built-in"):
        recap.methods.unregister("recap")
    with pytest.raises(ValueError, match="no method named"):
        recap.methods.unregister("plugin")
    assert NAME in recap.methods.method_names() and "plugin" not in recap.methods.method_names()


def test_the_engine_refuses_what_is_not_a_drafter_or_a_tree_off_the_root(load_tiny) -> None:
    target = load_tiny("qwen2_5_vl")

    class NoUpdate:
        needs_predictions, budget, memory = False, 0, None

        def draft(self, state: DraftState) -> DraftTree:
            return DraftTree.root(state.seq[-1])

    class OffRoot(EchoDrafter):
        def draft(self, state: DraftState) -> DraftTree:
            return DraftTree.root(state.seq[-1] + 1)

    for name, factory, error, says in (
        ("no-update", lambda setup: NoUpdate(), TypeError, "lacks update"),
        ("off-root", lambda setup: OffRoot(), ValueError, "grow from the root"),
    ):
        recap.methods.register(Method(name, name, "#000000", False, factory))
        try:
            with pytest.raises(error, match=says):
                recap.generate(target, None, "describe the image .", method=name, max_new_tokens=4)
        finally:
            recap.methods.unregister(name)
