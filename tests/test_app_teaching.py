"""The app's teaching views: warm start, the inside-the-step panel (inspector, play, mask)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accepted import TREES
from conftest_app import EXAMPLES, example
from gradio_client import Client, handle_file

import recap
from app.state.memories import WarmStart
from app.state.runs import Run
from app.state.session import Session
from app.state.settings import load_settings
from app.widgets.anim import figure_json
from app.widgets.step_panel import StepPanel, panel_view
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target, app_url


@pytest.fixture()
def warm(model_dir: str) -> WarmStart:
    settings = load_settings(model_dir)
    if not settings.warm_memory:
        pytest.skip("no warm memory for this test model")
    return WarmStart(Path(settings.warm_memory), settings.default_spec.source)


def test_sessions_start_from_their_own_copies_of_one_warm_memory(warm, target):
    a = Session(warm=warm).slot(warm.model, "recap", 8, target.vocab_size).memory
    b = Session(warm=warm).slot(warm.model, "recap", 8, target.vocab_size).memory
    assert a is not b and torch.equal(a.ids, b.ids) and a.filled == b.filled > 0
    a.reset()  # one visitor's memory changing leaves the other's (and the template) as they were
    assert a.filled == 0 and b.filled > 0
    assert Session(warm=warm).slot(warm.model, "recap", 8, target.vocab_size).memory.filled == b.filled


def test_new_sessions_start_warm_and_one_click_empties(warm, target):
    session = Session(warm=warm)
    slot = session.slot(warm.model, "recap", 8, target.vocab_size)
    assert slot.origin == "warm" and slot.memory.filled > 0
    record = slot.requests[0]
    assert "training scene" in record.label and record.image_path and Path(record.image_path).is_file()
    assert session.slot(warm.model, "recap", 8, target.vocab_size) is slot  # kept across runs
    session.start_from_empty(warm.model)
    assert slot.memory.filled == 0 and slot.origin == "empty"
    assert session.slot(warm.model, "tr", 8, target.vocab_size).origin == "empty"  # new ones start empty too
    session.start_from_warm(warm.model)
    assert session.slot(warm.model, "recap", 8, target.vocab_size).origin == "warm"
    # no warm start configured
    assert Session().slot(warm.model, "recap", 8, target.vocab_size).origin == "empty"
    assert Session(warm=warm).slot("another/model", "recap", 8, target.vocab_size).origin == "empty"


def test_a_first_visitor_drafts_a_tree_from_step_1(app_url, warm):
    entry = json.loads((EXAMPLES / "examples.json").read_text())[0]  # the default example
    image = str(EXAMPLES / entry["file"])
    visitor = Client(app_url, verbose=False)
    first = DecodeTrace.from_json(
        visitor.predict(handle_file(image), entry["prompt"], "recap", 64, api_name="/decode")
    )
    assert len(first.steps[0].nodes) > 1
    text = visitor.predict("recap", 8, api_name="/start_empty_memory")
    assert "started **empty**" in text
    again = DecodeTrace.from_json(
        visitor.predict(handle_file(image), entry["prompt"], "recap", 64, api_name="/decode")
    )
    assert len(again.steps[0].nodes) == 1 and again.token_ids == first.token_ids


def test_the_guided_demo_keeps_its_own_fresh_memories(app_url, warm):
    *_, numbers = Client(app_url, verbose=False).predict(api_name="/guided_demo")
    summary = numbers if isinstance(numbers, dict) else json.loads(numbers)
    runs = summary["runs"]
    # not after the warm requests
    assert runs["recap"]["A"]["request"] == 0 and runs["tr"]["A"]["request"] == 0


def test_panel_views_of_a_run(target):
    image, prompt = example()
    # trees drafted whatever they cost (the size loop's would follow this machine's timings)
    trace = recap.generate(target, image, prompt, method="recap", max_new_tokens=24, trace=True,
                           config=TREES).trace
    session = Session()
    session.add_run(Run(1, trace))
    view = panel_view(session)
    step = trace.steps[-1]
    assert [v for _, v in view.node.constructor_args["choices"]] == list(range(len(step.nodes)))
    play = json.loads(view.play)
    assert len(play["frames"]) > len(step.nodes)  # draft frames, then verify and accept
    assert view.mask.data[0].z and view.fusion.data
    # a click on an output token inspects the node that produced it (a bonus: the last accepted node)
    panel = StepPanel()
    panel.select_token(session, SimpleNamespace(index=len(trace.token_ids) - 1))
    assert session.highlight == (step.step, step.accepted[-1]) and session.view_step == step.step
    long = max(trace.steps, key=lambda s: len(s.accepted))
    assert len(long.accepted) > 1
    first = sum(len(s.emitted) for s in trace.steps if s.step < long.step)  # its first drafted token
    panel.select_token(session, SimpleNamespace(index=first))
    assert session.highlight == (long.step, long.accepted[1])
    assert figure_json(None) == ""
