"""Play a step (app/play_view.py): the frames follow the drafter's insertion order, verify
level by level and end on the finished tree."""

from __future__ import annotations

import dataclasses

from conftest_app import example
from test_figures import make_step, make_trace

from app.presenters.play import play_figure, run_play_figure, step_moments
from app.presenters.tree import tree_figure
from recap.trace.format import TraceStep

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target

PARENTS = [-1, 0, 0, 1, 1, 3, 2]
ACCEPTED = [0, 1, 3]


def shown_nodes(frame) -> set[int]:
    return {int(i) for tr in frame.data if tr.customdata is not None for i in tr.customdata}


def with_order(step: TraceStep, order: list[int]) -> TraceStep:
    nodes = [dataclasses.replace(n, order=o) for n, o in zip(step.nodes, order)]
    return dataclasses.replace(step, nodes=nodes)


def traces_json(traces) -> list[dict]:
    return [t.to_plotly_json() for t in traces]


def test_draft_frames_follow_the_insertion_order():
    # The drafter added node 2 before node 1's subtree: order differs from index order.
    order = [0, 2, 1, 4, 5, 6, 3]  # node i was added order[i]-th
    step = with_order(make_step(PARENTS, ACCEPTED), order)
    fig = play_figure(step)
    drafts = [f for f in fig.frames if "-d" in f.name]
    assert len(drafts) == len(PARENTS)
    by_order = sorted(range(len(PARENTS)), key=order.__getitem__)
    assert step.insertion_order() == by_order
    seen: list[int] = []
    for frame in drafts:
        added = shown_nodes(frame) - set(seen)
        assert len(added) == 1
        seen += added
    assert seen == by_order


def test_traces_without_order_play_in_index_order():
    step = make_step(PARENTS, ACCEPTED)  # order -1: a version-1 trace
    assert step.insertion_order() == list(range(len(PARENTS)))
    drafts = [f for f in play_figure(step).frames if "-d" in f.name]
    assert [len(shown_nodes(f)) for f in drafts] == list(range(1, len(PARENTS) + 1))


def test_last_frame_is_the_finished_tree():
    step = make_step(PARENTS, ACCEPTED)
    fig = play_figure(step)
    finished = tree_figure(step)
    assert traces_json(fig.frames[-1].data) == traces_json(finished.data)
    assert traces_json(fig.data) == traces_json(finished.data)  # before Play: today's picture
    # every frame draws the same traces (Plotly replaces traces by position)
    assert {tuple(t.name for t in f.data) for f in fig.frames} == {tuple(t.name for t in finished.data)}


def test_verification_marks_the_path_then_the_bonus_appears():
    step = make_step(PARENTS, ACCEPTED)
    moments = step_moments(step)
    phases = [m.phase for m in moments]
    assert phases == ["draft"] * len(PARENTS) + ["verify"] * (len(ACCEPTED)) + ["accept"]
    verify = [m for m in moments if m.phase == "verify"]
    assert all(not m.state.bonus for m in moments[:-1]) and moments[-1].state.bonus
    # depth by depth: the first verify frame decides depth 1, the last one every node
    assert verify[0].state.verified == frozenset(i for i, n in enumerate(step.nodes) if n.depth <= 1)
    assert verify[-1].state.verified == frozenset(range(len(PARENTS)))
    assert "wants" in verify[-1].caption and "bonus" in verify[-1].caption
    # the accepted path's edges are bright only once verified
    fig = play_figure(step)
    acc = {f.name: next(t for t in f.data if t.name == "accepted path") for f in fig.frames}
    assert len(acc[f"s{step.step}-d{len(PARENTS) - 1}"].x) == 0
    assert len(acc[f"s{step.step}-a"].x) == 5 * (len(ACCEPTED) - 1)


def test_play_controls_and_speed():
    fig = play_figure(make_step(PARENTS, ACCEPTED), frame_ms=120)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label.split()[-1] for b in buttons] == ["play", "pause"]
    assert buttons[0].args[1]["frame"]["duration"] == 120
    assert len(fig.layout.sliders[0].steps) == len(fig.frames)


def test_play_the_run():
    steps = [make_step(PARENTS, ACCEPTED, step=1), make_step([-1, 0], [0, 1], step=2),
             make_step([-1], [0], step=3)]
    trace = make_trace(steps)
    fig = run_play_figure(trace)
    assert len({len(f.data) for f in fig.frames}) == 1  # every frame carries the same number of traces
    names = [f.name for f in fig.frames]
    assert [n for n in names if n.endswith("-a")] == ["s1-a", "s2-a", "s3-a"]
    # the run ends on the last step finished: the same traces as its tree (hover texts shortened)
    last = tree_figure(steps[-1])
    ended = fig.frames[-1].data
    for mine, want in zip(ended, last.data):
        a, b = mine.to_plotly_json(), want.to_plotly_json()
        a.pop("hovertext", None), b.pop("hovertext", None)
        assert a == b
    assert all(len(t.x) == 0 for t in ended[len(last.data) :])  # padding traces stay empty


def test_a_real_step_plays(target):
    import recap

    image, prompt = example()
    trace = recap.generate(target, image, prompt, method="recap", max_new_tokens=24, trace=True).trace
    for step in trace.steps:
        fig = play_figure(step)
        assert traces_json(fig.frames[-1].data) == traces_json(tree_figure(step).data)
        assert len([f for f in fig.frames if "-d" in f.name]) == len(step.nodes)
