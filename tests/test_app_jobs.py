"""The one long-job handler (``app.boundary.guard.long_job``), without a server: every long job of the app
(Run, /decode, Compare, the guided demo, the walkthrough, the benchmark suites) is refused or run here."""

from __future__ import annotations

import gradio as gr
import pytest

from app.boundary.errors import UserError
from app.boundary.guard import ALREADY_RUNNING, long_job
from app.state.session import Session


def shown(message: str) -> str:
    return f"shown: {message}"


@pytest.fixture()
def session():
    s = Session()
    yield s
    s.close()


def test_a_second_job_of_a_running_visitor_is_refused_in_the_tabs_panel(session):
    @long_job(shown)
    def stream(session: Session):
        yield "step 1"
        yield "step 2"

    first = stream(session)
    assert next(first) == "step 1" and session.jobs.running  # the lock is held across the stream
    assert list(stream(session)) == [f"shown: {ALREADY_RUNNING}"]  # refused, not queued behind the first
    assert list(first) == ["step 2"] and not session.jobs.running
    assert list(stream(session)) == ["step 1", "step 2"]  # free again once the first ended


def test_an_api_job_is_refused_with_a_gradio_error(session):
    @long_job()
    def decode(session: Session) -> str:
        with pytest.raises(gr.Error, match="already running"):
            inner(session)
        return "done"

    @long_job()
    def inner(session: Session) -> str:
        return "never"

    assert decode(session) == "done" and not session.jobs.running


def test_a_user_error_is_one_sentence_shown_or_raised(session):
    def bad(session: Session) -> str:
        raise UserError("the prompt is empty")

    assert long_job(shown)(bad)(session) == "shown: the prompt is empty"
    with pytest.raises(gr.Error, match="the prompt is empty"):
        long_job()(bad)(session)
    assert not session.jobs.running


def test_a_job_clears_its_marks_however_it_ends(session):
    @long_job(shown)
    def crash(session: Session) -> str:
        session.jobs.stop.set()
        raise RuntimeError("a bug")

    assert session.jobs.enqueue()  # what the queue's validator does when the job is submitted
    assert not session.jobs.enqueue()  # a second submission is refused before the queue
    with pytest.raises(gr.Error, match="could not be handled"):  # anything unexpected: guarded's sentence
        crash(session)
    assert not session.jobs.running and not session.jobs.stop.is_set() and session.jobs.enqueue()


def test_stop_asks_only_a_running_job(session):
    assert not session.jobs.ask_stop() and not session.jobs.stop.is_set()  # nothing runs: nothing to stop
    with session.jobs.hold() as free:
        assert free and session.jobs.ask_stop() and session.jobs.stop.is_set()
    assert not session.jobs.stop.is_set()  # the next job starts unstopped


def test_a_refused_duplicate_leaves_the_running_jobs_queued_mark(session):
    @long_job(shown)
    def stream(session: Session):
        yield "step 1"
        yield "step 2"

    assert session.jobs.enqueue()  # the first job, marked by the queue's validator
    first = stream(session)
    assert next(first) == "step 1"
    assert list(stream(session)) == [f"shown: {ALREADY_RUNNING}"]  # a duplicate that slipped past it
    assert not session.jobs.enqueue()  # the running job is still marked: a third is refused at the queue
    assert list(first) == ["step 2"] and session.jobs.enqueue()  # cleared once the first ended

    @long_job()
    def call(session: Session) -> str:
        with pytest.raises(gr.Error, match="already running"):
            call(session)
        assert not session.jobs.enqueue()  # the refused inner call kept the mark
        return "done"

    session.jobs.ended()
    assert session.jobs.enqueue() and call(session) == "done" and session.jobs.enqueue()
