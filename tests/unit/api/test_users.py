"""Per-user scoping at the backend facade (not only hidden in the UI) and the per-user queue limit."""

import pytest

from backend.core.spec import SpecError
from backend.core.users import User, hub_user, local_user
from backend.jobs.records import JobStatus
from backend.jobs.store_errors import JobNotFound
from tests.helpers import tiny_spec

ALICE, BOB = User("alice"), User("bob")


def test_a_user_sees_and_touches_only_their_own_jobs(api):
    mine = api.jobs.submit(tiny_spec(), user=ALICE).job
    theirs = api.jobs.submit(tiny_spec(), user=BOB).job
    assert mine.owner == "alice" and theirs.owner == "bob"
    assert [j.id for j in api.jobs.list_jobs(user=ALICE)] == [mine.id]
    assert api.jobs.get_job(mine.id, ALICE).id == mine.id
    for call in (
        lambda: api.jobs.get_job(theirs.id, ALICE),
        lambda: api.jobs.cancel(theirs.id, ALICE),
        lambda: api.jobs.resume(theirs.id, ALICE),
        lambda: api.jobs.metrics(theirs.id, user=ALICE),
        lambda: api.jobs.samples(theirs.id, user=ALICE),
        lambda: api.jobs.log_tail(theirs.id, user=ALICE),
    ):
        with pytest.raises(JobNotFound):
            call()
    assert api.jobs.get_job(theirs.id).status is JobStatus.queued, "bob's job is untouched"
    # Nor can alice train on top of bob's job.
    with pytest.raises(SpecError, match="there is no job"):
        api.jobs.submit(tiny_spec(model={"parent_job_id": theirs.id}), user=ALICE)


def test_an_admin_sees_everyone_and_the_space_owner_is_an_admin(api, monkeypatch):
    a = api.jobs.submit(tiny_spec(), user=ALICE).job
    b = api.jobs.submit(tiny_spec(), user=BOB).job
    monkeypatch.setenv("SPACE_AUTHOR_NAME", "owner")
    admin = hub_user("owner")
    assert admin.is_admin and not hub_user("alice").is_admin
    assert {j.id for j in api.jobs.list_jobs(user=admin)} == {a.id, b.id}
    assert api.jobs.cancel(b.id, admin) is JobStatus.cancelled
    assert local_user().is_admin, "on your own machine you own every job"


def test_the_queue_limit_is_per_user(api, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "2")
    seeded = [tiny_spec(training={"seed": seed}) for seed in range(4)]  # one spec twice would be one job (queue once)
    api.jobs.submit(seeded[0], user=ALICE)
    second = api.jobs.submit(seeded[1], user=ALICE).job
    with pytest.raises(SpecError, match="2 job\\(s\\) waiting in the queue and the limit per user is 2"):
        api.jobs.submit(seeded[2], user=ALICE)
    assert len(api.jobs.list_jobs(user=ALICE)) == 2, "the refused job was not stored"
    api.jobs.submit(seeded[0], user=BOB)  # bob is not held up by alice
    api.jobs.cancel(second.id, ALICE)
    api.jobs.submit(seeded[3], user=ALICE)  # a cancelled job frees its place


def test_the_token_never_shows_in_a_users_repr():
    assert "hf_secret" not in repr(User("alice", token="hf_secret"))
