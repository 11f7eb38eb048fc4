"""The unload hook finds a visitor's session through the app's own registry, never Gradio's internals.

Every handler (``guarded``) asks Gradio for its request with a ``gr.Request`` parameter Gradio fills
and leaves out of the API; the session among its inputs is recorded under the request's session hash
(``app.boundary.visitors``), weakly; ``close_session`` (the unload hook) closes and forgets it. A
launched app's disconnecting client: ``tests/test_app_public.py`` (a closed client leaves no session).
"""

from __future__ import annotations

import gc
import inspect

import gradio as gr
from gradio import utils
from gradio.helpers import special_args

from app.boundary.guard import guarded
from app.boundary.visitors import VISITORS, Visitors
from app.state.session import Session
from app.ui import close_session


def request(session_hash: str) -> gr.Request:
    return gr.Request(session_hash=session_hash)


def test_gradio_hands_a_guarded_handler_its_request_first_and_the_api_does_not_show_it():
    def handler(session: Session, text: str, evt: gr.EventData) -> str:
        return f"{type(session).__name__} {text} {type(evt).__name__}"

    wrapped = guarded(handler)
    assert [name for name, *_ in utils.get_function_params(wrapped)] == ["session", "text"]
    session = Session()
    try:
        event = gr.EventData(None, {})
        inputs, *_ = special_args(wrapped, [session, "hi"], request("visitor-a"), event)
        assert isinstance(inputs[0], gr.Request) and inputs[1:3] == [session, "hi"]
        assert isinstance(inputs[3], gr.EventData)  # the handler's own special parameter, in its place
        assert wrapped(*inputs) == "Session hi EventData"
        assert VISITORS.get("visitor-a") is session  # recorded under its hash
        assert wrapped(session, "direct", event) == "Session direct EventData"  # from Python: the handler
        assert inspect.signature(handler).parameters.keys() == {"session", "text", "evt"}  # untouched
    finally:
        VISITORS.close("visitor-a")
    assert session.closed and VISITORS.get("visitor-a") is None


def test_generators_are_handed_their_request_too():
    def stream(session: Session, n: int):
        yield from range(n)

    session = Session()
    try:
        inputs, *_ = special_args(guarded(stream), [session, 3], request("visitor-b"))
        assert list(guarded(stream)(*inputs)) == [0, 1, 2] and VISITORS.get("visitor-b") is session
    finally:
        VISITORS.close("visitor-b")


def test_the_unload_hook_closes_the_visitors_session_and_forgets_it():
    session, other = Session(), Session()
    guarded(lambda s: None)(request("visitor-c"), session)
    guarded(lambda s: None)(request("visitor-d"), other)
    hook = guarded(close_session)
    inputs, *_ = special_args(hook, [], request("visitor-c"))
    hook(*inputs)
    assert session.closed and VISITORS.get("visitor-c") is None
    assert not other.closed and VISITORS.get("visitor-d") is other  # another visitor's stays
    close_session(request("visitor-d"))
    close_session(request("never-seen"))  # a visitor without a session: nothing to close
    assert other.closed


def test_the_registry_does_not_keep_a_session_gradio_let_go_of():
    visitors = Visitors()
    session = Session()
    visitors.seen("visitor-e", ["text", session])
    assert visitors.get("visitor-e") is session and len(visitors) == 1
    files = session.files.tmpdir
    del session
    gc.collect()
    assert visitors.get("visitor-e") is None and len(visitors) == 0
    assert not files.exists()  # its files went with it


def test_a_visitor_back_after_the_close_has_a_new_visitors_session():
    """A reconnect under the same session hash (Gradio keeps the closed state an hour): the session is
    reopened in place, as the one Gradio would make for a new visitor, and recorded again."""
    shown = []
    session = Session(start=shown.append)
    session.view_step = 3
    handler = guarded(lambda s: s.view_step)
    handler(request("visitor-f"), session)
    old_files = session.files.tmpdir
    close_session(request("visitor-f"))
    assert session.closed and not old_files.exists() and VISITORS.get("visitor-f") is None
    try:
        assert handler(request("visitor-f"), session) is None  # a fresh session: nothing picked
        assert not session.closed and VISITORS.get("visitor-f") is session
        assert shown == [session, session]  # what a new session shows, shown again
    finally:
        VISITORS.close("visitor-f")
