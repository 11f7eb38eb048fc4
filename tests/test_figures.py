"""Figure builder and tree layout (app/figures.py) and the text views (app/views.py)."""

from __future__ import annotations

import json

import pytest
from conftest_app import example
from hypothesis import given, settings
from hypothesis import strategies as st

from app.presenters.charts import accepted_length_figure, compare_lengths_figure, step_time_figure
from app.presenters.text import highlighted, status_markdown, token_spans
from app.presenters.tree import (
    BONUS,
    ORIGIN_COLORS,
    drafted_count,
    empty_figure,
    step_heading,
    token_label,
    tree_figure,
)
from app.presenters.tree_geometry import tree_layout
from app.state.steps import step_of_token, token_steps
from recap.trace.format import DecodeTrace, SourceInfo, TraceNode, TraceStep

pytest_plugins = ["conftest_app"]  # fixtures: model_dir, target


def src(kind: str, prob: float = 0.5, request: int = 0, same_image: bool | None = True) -> SourceInfo:
    return SourceInfo(kind=kind, weight=0.25, entropy=0.7, concentration=0.6, prob=prob, request=request,
                      step=3, depth=1, same_image=same_image)


def make_step(parents: list[int], accepted: list[int], *, step: int = 1, texts: list[str] | None = None,
              origins: list[str] | None = None, target: list[int] | None = None) -> TraceStep:
    """A hand-made step: tokens are 100 + index, texts 'w<i>' unless given."""
    nodes = []
    depth: list[int] = []
    for i, p in enumerate(parents):
        depth.append(0 if p < 0 else depth[p] + 1)
        origin = ((origins or [])[i]
                  if origins
                  else ("root" if p < 0 else ["m1", "m2", "m3", "suffix", "mixed"][i % 5]))
        sources = (
            []
            if p < 0
            else [src("m3"), src("m2"), src("m1", request=1, same_image=False), src("suffix")][: 1 + i % 4]
        )
        nodes.append(
            TraceNode(index=i, token=100 + i, text=(texts or [])[i] if texts else f"w{i}", parent=p,
                      depth=depth[i], score=1.0 / (1 + i), fused=1.0 if p < 0 else 0.5 / (1 + i % 3),
                      origin=origin, target_token=(target or [])[i] if target else 999,
                      target_text="want" if not target else f"w{target[i] - 100}", accepted=i in accepted,
                      sources=sources)
        )
    emitted = [100 + i for i in accepted[1:]] + [999]
    return TraceStep(step=step, nodes=nodes, accepted=accepted, bonus_token=999, bonus_text="BONUS",
                     emitted=emitted, draft_s=0.001, verify_s=0.002, update_s=0.0005)


# A tree: 0 -> 1 -> 3 -> 5 ; 0 -> 2 ; 1 -> 4 ; accepted 0, 1, 3
PARENTS = [-1, 0, 0, 1, 1, 3]
ACCEPTED = [0, 1, 3]


def make_trace(steps: list[TraceStep], method: str = "recap") -> DecodeTrace:
    ids = [t for s in steps for t in s.emitted]
    texts = [("BONUS" if t == 999 else f"w{t - 100}") for t in ids]
    return DecodeTrace(
        method=method, model="hand-made", prompt="q", request=0, image_key=None, config={}, prompt_tokens=5,
        steps=steps, token_ids=ids, text=" ".join(texts), token_texts=texts,
        timings={"prefill": 0.01, "draft": 0.01, "verify": 0.02, "update": 0.01, "total": 0.05},
        stop_reason="eos",
    )


def node_points(fig) -> dict[int, tuple[float, float, str]]:
    """Trace node index -> (x, y, label) from the figure's node traces (customdata = index)."""
    out = {}
    for tr in fig.data:
        if tr.customdata is None:
            continue
        for x, y, label, idx in zip(tr.x, tr.y, tr.text, tr.customdata):
            out[int(idx)] = (x, y, label)
    return out


# --------------------------------------------------------------------------- layout


def check_layout(step: TraceStep) -> None:
    pos = tree_layout(step)
    assert set(pos) == {n.index for n in step.nodes} | {BONUS}
    assert len(set(pos.values())) == len(pos), "two nodes (or a node and the bonus token) share a position"
    last = pos[step.accepted[-1]]
    assert pos[BONUS] == (last[0] + 1, last[1])  # the bonus token right after the accepted path
    del pos[BONUS]
    for n in step.nodes:
        x, _ = pos[n.index]
        assert x == n.depth
        if n.parent >= 0:
            assert x > pos[n.parent][0], "a child is not to the right of its parent"
    assert pos[0] == (0.0, 0.0)
    # The accepted path is one straight row at the top.
    assert {pos[i][1] for i in step.accepted} == {0.0}


def test_layout_hand_made():
    check_layout(make_step(PARENTS, ACCEPTED))
    check_layout(make_step([-1], [0]))


@st.composite
def random_tree(draw):
    n = draw(st.integers(1, 60))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    path = [0]
    while True:
        kids = [i for i, p in enumerate(parents) if p == path[-1]]
        if not kids or not draw(st.booleans()):
            break
        path.append(draw(st.sampled_from(kids)))
    return parents, path


@settings(max_examples=60, deadline=None)
@given(random_tree())
def test_layout_random_trees(tree):
    parents, path = tree
    step = make_step(parents, path)
    check_layout(step)
    fig = tree_figure(step)
    assert len(node_points(fig)) == len(parents)


# --------------------------------------------------------------------------- tree figure


def test_tree_figure_nodes_edges_path_bonus():
    step = make_step(PARENTS, ACCEPTED)
    fig = tree_figure(step)
    points = node_points(fig)
    assert set(points) == set(range(len(PARENTS)))
    assert {label for _, _, label in points.values()} == {f"w{i}" for i in range(len(PARENTS))}
    by_name = {tr.name: tr for tr in fig.data}
    # accepted path edges: one elbow polyline (5 points incl. separator) per accepted edge
    acc = by_name["accepted path"]
    assert len(acc.x) == 5 * (len(ACCEPTED) - 1)
    assert acc.line.width >= 5
    edges = by_name["edges"]
    assert len(edges.x) == 5 * (len(PARENTS) - len(ACCEPTED))
    bonus = by_name["bonus token (target's choice)"]
    assert list(bonus.text) == ["BONUS"]
    last = points[ACCEPTED[-1]]
    columns = list(fig.layout.xaxis.tickvals)  # x of each depth
    assert (
        bonus.y[0] == last[1] and columns.index(bonus.x[0]) == columns.index(last[0]) + 1
    )  # right after the path
    # rejected nodes are faded, accepted ones opaque
    for tr in fig.data:
        if tr.customdata is None:
            continue
        for idx, op in zip(tr.customdata, tr.marker.opacity):
            assert (op == 1.0) == (idx in ACCEPTED)
    assert fig.layout.uirevision  # zoom survives streamed updates


def test_tree_figure_colours_by_origin_and_legend():
    step = make_step(PARENTS, ACCEPTED)
    fig = tree_figure(step)
    colors = {tr.legendgroup: tr.marker.color for tr in fig.data if tr.customdata is not None}
    for origin in ("root", "m1", "m2", "m3", "suffix", "mixed"):
        assert colors[origin] == ORIGIN_COLORS[origin]


def test_hover_has_every_source_kind_and_field():
    step = make_step(PARENTS, ACCEPTED)
    fig = tree_figure(step)
    hovers = " ".join(h for tr in fig.data if tr.customdata is not None for h in tr.hovertext)
    for kind in ("m1", "m2", "m3", "suffix"):
        assert f"<b>{kind}</b>: weight" in hovers
    for field in ("entropy", "p(token)", "from request", "same image: no", "same image: yes", "path score",
                  "fused prob", "depth",):
        assert field in hovers
    node_hover = next(h
                      for tr in fig.data
                      if tr.customdata is not None
                      for i, h in zip(tr.customdata, tr.hovertext)
                      if i == 3)
    assert "w3" in node_hover and "depth 2" in node_hover


def test_target_disagreement_shown():
    # node 1's children are 3 and 4 (tokens 103, 104); the target wanted 999 after node 2 (a leaf) and
    # after node 1 it wanted token 103 (a child): only node 3 (end of the path, children 5) disagrees.
    target = [101, 103, 999, 777, 999, 999]
    step = make_step(PARENTS, ACCEPTED, target=target)
    fig = tree_figure(step)
    hover = {
        i: h for tr in fig.data if tr.customdata is not None for i, h in zip(tr.customdata, tr.hovertext)
    }
    assert "no child had it" in hover[3]
    assert "no child had it" not in hover[1]
    bonus = next(tr for tr in fig.data if tr.name and tr.name.startswith("bonus token"))
    assert "the drafter proposed: w5" in bonus.hovertext[0]


def test_highlight_and_escaping():
    step = make_step([-1, 0], [0, 1], texts=["<|im_start|>", " the"])
    fig = tree_figure(step, highlight=1)
    assert any(tr.name == "selected node" for tr in fig.data)
    labels = [label for _, _, label in node_points(fig).values()]
    assert "&lt;|im_start|&gt;" in labels and "the" in labels
    assert token_label("a\nb") == "a\u21b5b"


def test_token_labels_read_as_text_while_hovers_keep_the_leading_space():
    # a word's own leading space is the word boundary: the label drops it
    assert [token_label(t) for t in (" red", "red", " 中文", "\u2581")] == ["red", "red", "中文", "\u2581"]
    # only spaces: each one shown; further leading / trailing spaces shown too
    assert [token_label(t) for t in (" ", "   ", "  red", " red ")] == [
        "\u2423", "\u2423" * 3, "\u2423red", "red\u2423",
    ]
    assert [token_label(t) for t in ("", "\n", " \n", "\t")] == ["\u2205", "\u21b5", "\u21b5", "\u21e5"]
    assert token_label(" a-very-long-word-indeed", 8) == "a-very-\u2026"
    # exact: the hover (and the memory's rows) keep " red" and "red" apart
    assert [token_label(t, exact=True) for t in (" red", "red", "  red")] == [
        "\u2423red", "red", "\u2423 red",
    ]
    step = make_step([-1, 0], [0, 1], texts=["r", " the"])
    hover = next(tr for tr in tree_figure(step).data if tr.hovertext and "node 1" in "".join(tr.hovertext))
    assert any(h.startswith("<b>\u2423the</b>") for h in hover.hovertext)
    assert empty_figure().layout.annotations


def test_run_charts():
    steps = [make_step(PARENTS, ACCEPTED, step=1), make_step([-1, 0], [0], step=2)]
    trace = make_trace(steps)
    fig = accepted_length_figure(trace, current=2)
    assert list(fig.data[0].y) == [3, 1]
    times = step_time_figure(trace)
    assert [tr.name for tr in times.data] == ["draft", "verify", "update"]
    assert times.layout.barmode == "stack"
    assert times.data[1].y[0] == pytest.approx(2.0)
    comp = compare_lengths_figure({"recap": trace, "ar": trace})
    assert len(comp.data) == 2
    assert accepted_length_figure(None).data == ()


def test_each_step_shows_the_tree_size_it_chose_under_the_runs_cap():
    grown = make_step(PARENTS, ACCEPTED, step=1)
    grown.tree_size = 5  # the drafter's choice (root excluded), here under a cap of 24
    older = make_step([-1, 0], [0], step=2)  # a trace before tree_size: the nodes it holds
    trace = make_trace([grown, older])
    trace.budget = 24
    assert drafted_count(grown) == 5 and drafted_count(older) == 1
    assert step_heading(grown, trace.budget).startswith("Step 1: 5 drafted (cap 24), 2 accepted")
    assert step_heading(older).startswith("Step 2: 1 drafted, 0 accepted")  # no budget recorded: no cap
    assert tree_figure(grown, cap=24).layout.title.text.startswith("Step 1: 5 drafted (cap 24)")
    bars = accepted_length_figure(trace).data[0]
    assert list(bars.customdata) == ["5 drafted (cap 24)", "1 drafted (cap 24)"]
    assert "%{customdata}" in bars.hovertemplate


# --------------------------------------------------------------------------- views


def test_token_spans_and_steps():
    steps = [make_step(PARENTS, ACCEPTED, step=1), make_step([-1, 0], [0], step=2)]
    trace = make_trace(steps)
    assert token_steps(trace) == [(1, False), (1, False), (1, True), (2, True)]
    spans = token_spans(trace)
    assert "".join(s.text for s in spans) == trace.text
    value, colors = highlighted(trace, current=2)
    assert [label for _, label in value] == [
        "step 1 · drafted", "step 1 · drafted", "step 1 · bonus", "step 2 · bonus",
    ]
    assert set(colors) == {label for _, label in value}
    assert step_of_token(trace, 3) == 2 and step_of_token(trace, 99) is None
    md = status_markdown(trace)
    assert "**4** tokens" in md and "**2** steps" in md and "2.00" in md


# --------------------------------------------------------------------------- a real trace


def test_real_trace_from_model(target):
    import recap

    image, prompt = example()
    gen = recap.generate(target, image, prompt, method="recap", max_new_tokens=24, trace=True)
    trace = DecodeTrace.from_json(gen.trace.to_json())
    for step in trace.steps:
        check_layout(step)
        fig = tree_figure(step)
        assert len(node_points(fig)) == len(step.nodes)
        json.dumps(fig.to_plotly_json(), default=str)  # serialisable for gr.Plot
    spans = token_spans(trace)
    assert len(spans) == len(trace.token_ids)
