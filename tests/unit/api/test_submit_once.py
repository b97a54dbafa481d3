"""Queue once (issue 47): a user's second submit of the same spec a moment after the first is answered with the first
job, whichever door it comes through; another user, another spec or a later submit queues a new job."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from backend.api import SpecError
from backend.api.jobs import SUBMIT_ONCE_WINDOW_S
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.platform.once import OnceWithin
from tests.helpers import tiny_spec

ALICE, BOB = User("alice"), User("bob")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture(autouse=True)
def on_the_clock(request, clock) -> None:
    """The shared ``api`` (jobs stay queued), where a test uses it, counts its submit window on ``clock``."""
    if "api" in request.fixturenames:
        request.getfixturevalue("api").jobs.once.clock = clock


def test_the_same_spec_twice_within_the_window_queues_one_job_and_answers_its_id(api, clock):
    first = api.jobs.submit(tiny_spec(), user=ALICE)
    clock.now += SUBMIT_ONCE_WINDOW_S - 1
    again = api.jobs.submit(tiny_spec(), user=ALICE)
    assert again.job.id == first.job.id and again.repeated and not first.repeated
    assert again.queue_position == 1
    assert len(api.jobs.list_jobs()) == 1


def test_the_same_spec_in_another_key_order_or_as_json_text_is_the_same_submit(api):
    import json

    spec = tiny_spec()
    first = api.jobs.submit(spec, user=ALICE).job.id
    reordered = json.dumps(dict(reversed(list(spec.items()))))
    assert api.jobs.submit(reordered, user=ALICE).job.id == first
    assert len(api.jobs.list_jobs()) == 1


def test_another_spec_or_another_user_is_queued(api):
    first = api.jobs.submit(tiny_spec(), user=ALICE).job.id
    other_spec = api.jobs.submit(tiny_spec(training={"seed": 7}), user=ALICE).job.id
    other_user = api.jobs.submit(tiny_spec(), user=BOB)
    assert len({first, other_spec, other_user.job.id}) == 3 and not other_user.repeated
    assert other_user.job.owner == "bob"


def test_after_the_window_the_same_spec_is_queued_again(api, clock):
    first = api.jobs.submit(tiny_spec(), user=ALICE).job.id
    clock.now += SUBMIT_ONCE_WINDOW_S + 0.1
    again = api.jobs.submit(tiny_spec(), user=ALICE)
    assert again.job.id != first and not again.repeated
    assert len(api.jobs.list_jobs()) == 2


def test_a_job_that_ended_may_be_queued_again_at_once(api):
    first = api.jobs.submit(tiny_spec(), user=ALICE).job.id
    assert api.jobs.cancel(first, ALICE) is JobStatus.cancelled
    again = api.jobs.submit(tiny_spec(), user=ALICE).job.id
    assert again != first


def test_a_refused_submit_is_not_remembered(api, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "1")
    api.jobs.submit(tiny_spec(training={"seed": 1}), user=ALICE)
    with pytest.raises(Exception, match="limit per user is 1"):
        api.jobs.submit(tiny_spec(), user=ALICE)
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "2")
    assert not api.jobs.submit(tiny_spec(), user=ALICE).repeated  # tried again: queued, not the refusal recalled


def test_a_trusted_caller_queues_what_it_asks(api):
    """The CLI and scripts (no user) are not people double-clicking: each submit is a job."""
    assert api.jobs.submit(tiny_spec()).job.id != api.jobs.submit(tiny_spec()).job.id


def test_concurrent_identical_submits_queue_one_job_and_wait_for_nothing(api, monkeypatch):
    """Eight threads at once (a script's retries, two tabs): one job, the pre-flight ran once, and the seven that came
    while it ran were answered at once with a sentence, not held until it ended (issue 47: seven requests waiting on
    one user's slow check held the server's slots, and another user's submit waited 14 s)."""
    started = threading.Barrier(8)
    prepared = api.jobs.core.prepared
    calls = []

    @contextlib.contextmanager
    def slow_preflight(named, token=None):
        calls.append(named)
        time.sleep(1.0)  # the slow part of a submit, while the other seven arrive
        with prepared(named, token) as job:
            yield job

    monkeypatch.setattr(api.jobs.core, "prepared", slow_preflight)

    def submit(_):
        started.wait()
        begun = time.monotonic()
        try:
            return api.jobs.submit(tiny_spec(), user=ALICE).job.id, time.monotonic() - begun
        except SpecError as exc:
            return " ".join(exc.problems), time.monotonic() - begun

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(submit, range(8)))
    assert len(api.jobs.list_jobs()) == 1 and len(calls) == 1
    (job_id,) = [job.id for job in api.jobs.list_jobs()]
    refused = [(text, took) for text, took in answers if text != job_id]
    assert len(refused) == 7, answers
    for text, took in refused:
        assert "is being checked and queued from your submit a moment ago" in text, text
        assert took < 0.5, f"a repeat waited {took:.2f} s for the first submit's check"


def test_the_ui_and_the_api_share_the_window(api):
    """Queue in the Train tab, then /submit_spec with the same spec: the same job."""
    import json

    from components.train.handlers import submit_spec

    first = api.jobs.submit(tiny_spec(), user=ALICE).job.id
    assert submit_spec(api, ALICE, json.dumps(tiny_spec())) == first
    assert len(api.jobs.list_jobs()) == 1


def test_the_answer_to_a_repeat_says_it_is_the_job_already_queued(api):
    from components.train.views import queued_markdown

    first = api.jobs.submit(tiny_spec(), user=ALICE)
    text = queued_markdown(api.jobs.submit(tiny_spec(), user=ALICE))
    assert text.startswith(f"Already queued [**{first.job.id}**](?job={first.job.id}) a moment ago"), text
    assert "nothing new was queued" in text and "next in the queue" in text
    assert queued_markdown(first).startswith(f"Queued [**{first.job.id}**]")


# --- OnceWithin on its own ------------------------------------------------------------------------------------------


def test_once_within_forgets_errors_and_old_answers_and_stays_bounded():
    clock = Clock()
    once: OnceWithin[int] = OnceWithin(10.0, clock=clock, capacity=3)
    keep = lambda first: first  # noqa: E731
    busy = lambda: -1  # noqa: E731
    assert once.run("a", lambda: 1, keep, busy) == (1, False)
    assert once.run("a", lambda: 2, keep, busy) == (1, True)
    with pytest.raises(ValueError):
        once.run("b", lambda: int("x"), keep, busy)
    assert once.run("b", lambda: 3, keep, busy) == (3, False), "an error is not remembered"
    assert once.run("a", lambda: 4, lambda first: None, busy) == (4, False), "recall said the first no longer stands"
    assert once.run("g", lambda: once.run("g", lambda: 8, keep, busy)[0], keep, busy) == (-1, False), "in flight: busy"
    for key in "cdef":
        once.run(key, lambda: 5, keep, busy)
    assert len(once._entries) <= 3
    clock.now += 10.5
    assert once.run("f", lambda: 6, keep, busy) == (6, False)
    assert len(once._entries) == 1
