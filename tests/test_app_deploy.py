"""Deployment settings and the app's boundary pieces, without a server: public mode, limits, bind address,
escaping, output records, guarded handlers, bounded sessions."""

from __future__ import annotations

import dataclasses

import gradio as gr
import pytest

from app.boundary.errors import UserError, redact
from app.boundary.guard import guarded
from app.presenters.text import md_text
from app.state.runs import Run
from app.state.session import Session
from app.state.settings import PUBLIC_LIMITS, REPO_ROOT, Limits, Settings, load_limits, public_mode
from app.ui import server_name
from app.widgets.config_form import default_values, parse_config
from app.widgets.records import KEEP, Record
from recap.trace.format import DecodeTrace

pytest_plugins = ["conftest_app"]  # fixtures: model_dir


@pytest.mark.parametrize(
    ("env", "public"),
    [({}, False), ({"SPACE_ID": "user/space"}, True), ({"RECAP_PUBLIC": "1"}, True),
     ({"SPACE_ID": "user/space", "RECAP_PUBLIC": "0"}, False), ({"RECAP_PUBLIC": "yes"}, True)],
)
def test_public_mode_is_on_on_a_space_or_when_asked(monkeypatch, env, public):
    for name in ("SPACE_ID", "RECAP_PUBLIC"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert public_mode() is public


@pytest.mark.parametrize(
    ("env", "host"),
    [({}, "127.0.0.1"), ({"SPACE_ID": "u/s"}, "0.0.0.0"), ({"GRADIO_SERVER_NAME": "10.0.0.5"}, "10.0.0.5"),
     ({"SPACE_ID": "u/s", "GRADIO_SERVER_NAME": "127.0.0.1"}, "127.0.0.1")],
)
def test_bind_address_local_space_and_override(monkeypatch, env, host):
    for name in ("SPACE_ID", "GRADIO_SERVER_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert server_name() == host


def test_every_limit_has_an_environment_variable_clamped_into_its_bounds(monkeypatch):
    monkeypatch.setenv("RECAP_MAX_BUDGET", "100000")  # a typo must not open the app up
    monkeypatch.setenv("RECAP_MAX_NEW_TOKENS", "64")
    monkeypatch.setenv("RECAP_MAX_TOP_K", "not a number")
    lim = load_limits(public=True)
    assert lim.max_budget == 256 and lim.max_new_tokens == 64 and lim.max_top_k == PUBLIC_LIMITS.max_top_k
    assert load_limits(public=False).max_top_k == Limits().max_top_k
    for f in dataclasses.fields(Limits):  # public defaults are never looser than local ones
        public, local = getattr(PUBLIC_LIMITS, f.name), getattr(Limits(), f.name)
        if f.name == "max_queue":  # 0 is "unbounded"
            assert public > 0 and local == 0
        else:
            assert public <= local, f.name


def test_tree_work_ceiling_names_the_product():
    settings = Settings(default_model="m", public=True, limits=PUBLIC_LIMITS)
    values = {**default_values(), "budget": 64, "max_depth": 16, "max_children": 16, "suffix_max_tokens": 8}
    with pytest.raises(UserError, match="budget x max_depth x max_children is 16384"):
        parse_config(values, settings)
    values["max_children"] = 8
    assert parse_config(values, settings).max_children == 8


@pytest.mark.parametrize(
    "text",
    ["<img src=x onerror=alert(1)>", "[link](http://evil.example)", "![pic](http://evil.example/p.png)",
     "**bold** _em_ `code`", "www.evil.example and https://evil.example", "$$x^2$$", "a | b\n---|---"],
)
def test_md_text_leaves_no_markup(text):
    import markdown_it

    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md_text(text))
    for tag in ("<img", "<a ", "<strong", "<em", "<code", "<table", "<script"):
        assert tag not in rendered, (text, rendered)


def test_redact_hides_the_servers_folders():
    message = f"cannot read {REPO_ROOT}/assets/x and /tmp/gradio/abc/file.png"
    assert str(REPO_ROOT) not in redact(message) and "<app>/assets/x" in redact(message)


def test_records_line_up_with_their_components_and_refuse_another_type():
    @dataclass_record
    class A(Record):
        x: object = KEEP
        y: object = KEEP

    @dataclass_record
    class B(Record):
        x: object = KEEP

    ui = A(x="component x", y="component y")
    assert ui.outputs() == ["component x", "component y"]
    assert A(y=3).to(ui) == [gr.skip(), 3]
    with pytest.raises(TypeError, match="B values wired to A components"):
        B(x=1).to(ui)


def dataclass_record(cls):
    return dataclasses.dataclass(cls)


def test_guarded_turns_any_exception_into_one_sentence():
    def broken(x):
        raise RecursionError("maximum recursion depth exceeded")

    def gen(x):
        yield 1
        raise KeyError("value")

    with pytest.raises(gr.Error, match="nested too deeply"):
        guarded(broken)(1)
    with pytest.raises(gr.Error, match="KeyError"):
        list(guarded(gen)(1))
    def refused():
        raise UserError("the prompt <b> is empty")

    # escaped: Gradio's modal renders HTML
    with pytest.raises(gr.Error, match="the prompt &lt;b&gt; is empty"):
        guarded(refused)()


def tiny_trace(n: int) -> DecodeTrace:
    return DecodeTrace(
        method="ar",
        model="m",
        prompt=f"p{n}",
        request=n,
        image_key=None,
        config={},
        prompt_tokens=1,
        stop_reason="eos",
    )


def test_a_session_keeps_few_uploads_packed_and_bounded_runs():
    session = Session(dataclasses.replace(Limits(), max_runs=5, max_uploaded_traces=2))
    for i in range(4):
        session.add_run(Run(session.next_run_id(), tiny_trace(i), source="upload"))
    for i in range(6):
        session.add_run(Run(session.next_run_id(), tiny_trace(10 + i)))
    assert len(session.runs) == 5 and sum(r.source == "upload" for r in session.runs) == 0
    session = Session(dataclasses.replace(Limits(), max_uploaded_traces=2))
    runs = [Run(session.next_run_id(), tiny_trace(i), source="upload") for i in range(3)]
    for run in runs:
        session.add_run(run)
    assert session.runs == runs[1:] and runs[1].packed and not runs[2].packed
    assert runs[1].trace.prompt == "p1"  # unpacks intact
    tmp = session.files.tmpdir
    session.close()
    assert not tmp.exists() and not session.runs and session.current is None


def test_every_event_of_the_app_is_guarded(model_dir):
    """Every handler, visible or private (and the session's initialiser and close hook), turns errors into
    a sentence."""
    from app.state.settings import load_settings
    from app.ui import build_demo

    for public in (False, True):
        demo = build_demo(settings=dataclasses.replace(load_settings(model_dir), public=public))
        server_side = [f for f in demo.fns.values() if f.fn is not None]
        browser_only = [f for f in demo.fns.values() if f.fn is None]
        # no handler at all: only a browser-side script (the "new seed" button)
        assert all(f.js for f in browser_only)
        unguarded = [f.name for f in server_side if not getattr(f.fn, "recap_guarded", False)]
        assert unguarded == []


def test_the_queue_bounds_are_set_when_the_app_is_built_not_only_at_launch(model_dir):
    """`gradio app.py` launches the module's demo itself: the bounded queue must already be there."""
    from app.state.settings import load_settings
    from app.ui import build_demo

    settings = dataclasses.replace(load_settings(model_dir), public=True)
    demo = build_demo(settings=settings)
    assert demo._queue is not None and demo._queue.max_size == (settings.limits.max_queue or None)
    assert demo._queue.default_concurrency_limit == 1
