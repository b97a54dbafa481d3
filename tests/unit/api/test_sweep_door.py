"""Every child of a sweep passes the door a submit passes (issue 48, part 4), at the facade with signed-in users: a TPE
sweep reserves its trials in the queue limits at submit; no sweep varies the owner or a field that names a user, a
job, a server path, the user's Hub token or trusted code; a TPE child queued later by the app's scheduler is judged
as its owner (one the door refuses stops the sweep with a sentence and stores no job); and the queue limit answers
before the slow pre-flight."""

from __future__ import annotations

import json
from contextlib import nullcontext

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError
from backend.core.users import User, local_user
from backend.jobs.store import JobStore
from backend.jobs.sweep_door import rights_of, user_of
from backend.jobs.sweeps import SweepStore
from tests.helpers import wait_for
from tests.unit.jobs.test_sweeps import LR, SPEC

ALICE, BOB = User("alice"), User("bob")


def refused(call) -> str:
    with pytest.raises(SpecError) as caught:
        call()
    return "\n".join(caught.value.problems)


def nothing_stored(store: JobStore) -> bool:
    return store.list() == [] and SweepStore(store).list() == []


def test_twelve_tpe_sweeps_under_a_limit_of_three_are_refused_after_the_first(api, store, paths, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "3")
    monkeypatch.setenv("STUDIO_MAX_QUEUED_TOTAL", "5")
    answers = []
    for _ in range(12):
        try:
            answers.append(api.sweeps.submit(SPEC, [f"{LR}=1e-5..1e-2"], "tpe", 3, user=ALICE).report.sweep.id)
        except SpecError as exc:
            answers.append("\n".join(exc.problems))
    assert answers[0].startswith("sweep-")
    refusal = (
        "this TPE sweep holds a place for each of its 3 trials and you already have 3 waiting; the limit per user "
        "is 3: ask for fewer trials, or wait for some jobs to start"
    )
    assert answers[1:] == [refusal] * 11
    assert [s.id for s in SweepStore(store).list()] == answers[:1] and store.list() == []  # nothing of the refused
    # The trials it holds are alice's waiting jobs for any other submit too, and the Space's.
    assert "you already have 3 job(s) waiting in the queue (3 of them trials your TPE sweep has yet" in refused(
        lambda: api.jobs.submit(SPEC, user=ALICE)
    )
    assert "holds a place for each of its 3 trials and 3 are waiting, the most this Space holds is 5" in refused(
        lambda: api.sweeps.submit(SPEC, [f"{LR}=1e-5..1e-2"], "tpe", 3, user=BOB)
    )
    api.jobs.submit(SPEC, user=BOB)  # 3 held and 1 more: room for bob's one job
    # A child the sweep queues turns one held place into a queued job: alice still has 3 waiting.
    (first,) = SweepStore(store).advance(paths.root / "sweeps", api.core.sweep_door)
    assert "you already have 3 job(s) waiting in the queue (2 of them" in refused(
        lambda: api.jobs.submit(SPEC, user=ALICE)
    )
    assert sorted(job.owner for job in store.list()) == ["alice", "bob"] and store.get(first).owner == "alice"
    api.sweeps.cancel(answers[0], user=ALICE)  # a cancelled sweep holds nothing
    api.jobs.submit(SPEC, user=ALICE)


@pytest.mark.parametrize("user", [ALICE, None], ids=["alice", "trusted"])
@pytest.mark.parametrize("search", ["grid", "tpe"])
def test_a_sweep_cannot_vary_its_owner_and_nothing_is_stored(api, store, user, search):
    trials = 2 if search == "tpe" else None
    answer = refused(lambda: api.sweeps.submit(SPEC, ["owner=alice,bob"], search, trials, user=user))
    assert answer.startswith("--vary owner: a sweep cannot vary owner (who the children belong to"), answer
    assert nothing_stored(store)


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("model.trust_remote_code=true,false", "model.trust_remote_code"),
        ("model.parent_job_id=20261205-154336-934a11,20261205-154336-934a12", "model.parent_job_id"),
        ("evaluate.job_id=20261205-154336-934a11,20261205-154336-934a12", "evaluate.job_id"),
        ("training.resume_from_hub=alice/a,bob/b", "training.resume_from_hub"),
        ("output.hub_repo_id=alice/a,bob/b", "output.hub_repo_id"),
        ("output.push_to_hub=true,false", "output.push_to_hub"),
        ("dataset.source=builtin,file", "dataset.source"),
        ("environment.name=builtin:echo,http://127.0.0.1:1", "environment.name"),
        ("distillation.teacher=alice/a,bob/b", "distillation.teacher"),
        ("model={trust_remote_code: true}", "model"),  # a whole part holds them
    ],
)
def test_no_sweep_varies_a_field_that_names_a_user_a_job_a_path_a_token_or_code(api, store, setting, field):
    answer = refused(lambda: api.sweeps.submit(SPEC, [setting], "tpe", 2, user=ALICE))
    assert answer.startswith(f"--vary {field}: a sweep cannot vary {field}"), answer
    assert nothing_stored(store)


def test_a_tpe_sweep_over_a_server_model_path_is_refused_at_submit_naming_the_field(api, store, tmp_path):
    server_model = tmp_path / "secret-model"
    server_model.mkdir()
    setting = f"model.name_or_path=builtin:tiny-qwen3-arith,{server_model}"
    answer = refused(lambda: api.sweeps.submit(SPEC, [setting], "tpe", 4, user=ALICE))
    assert answer.startswith(f"--vary model.name_or_path={server_model}: model.name_or_path:"), answer
    assert "is a path on the server" in answer
    assert nothing_stored(store)


def test_a_tpe_child_the_door_refuses_later_stops_its_sweep_with_a_sentence_and_stores_no_job(paths, store, tmp_path):
    submitting = StudioAPI(paths.root, scheduler="none")
    rows = tmp_path / "gradio" / "abc123" / "sums.jsonl"
    rows.parent.mkdir(parents=True)
    rows.write_text("".join(json.dumps({"prompt": f"{i}+1=", "completion": str(i + 1)}) + "\n" for i in range(40)))
    upload_id, _ = submitting.datasets.upload_dataset(rows, "sums.jsonl", "sft", ALICE)
    spec = {**SPEC, "dataset": {"source": "upload", "name": upload_id}}
    sweep_id = submitting.sweeps.submit(spec, [f"{LR}=1e-5..1e-2"], "tpe", 2, user=ALICE).report.sweep.id
    submitting.datasets.delete_upload(upload_id, ALICE)  # no job reads it yet: the sweep's next child would
    submitting.close()
    app = StudioAPI(paths.root, scheduler="thread", poll_interval=0.1)  # the app's scheduler, with its door
    try:
        done = wait_for(
            lambda: not (r := app.sweeps.get(sweep_id, ALICE)).sweep.active and r, 30, what="the sweep to stop"
        )
    finally:
        app.close()
    assert done.sweep.stopped is not None and done.sweep.stopped.startswith(f"sweep {sweep_id} stopped: dataset")
    assert "/" not in done.sweep.stopped.partition("stopped: ")[2]  # no server folder in the sentence
    assert done.children == [] and done.status == "failed" and store.list() == []


def test_the_queue_limit_answers_a_sweep_before_its_pre_flight(api, store, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "3")
    for n in range(3):
        api.jobs.submit({**SPEC, "output": {"run_name": f"job {n}"}}, user=ALICE)
    preflights = []
    monkeypatch.setattr(api.core, "prepared", lambda named, token=None: preflights.append(named) or nullcontext())
    answer = refused(lambda: api.sweeps.submit(SPEC, [f"{LR}=1e-4,5e-4"], user=ALICE))  # what the Sweep panel calls
    assert answer == (
        "this sweep queues 2 job(s) and you already have 3 waiting; the limit per user is 3: vary fewer values, or "
        "wait for some jobs to start"
    )
    assert preflights == [] and len(store.list()) == 3 and SweepStore(store).list() == []


def test_a_later_child_is_judged_with_no_more_than_its_submitters_rights(api, store, paths, monkeypatch):
    monkeypatch.setenv("STUDIO_ADMINS", "owner")
    assert [rights_of(u) for u in (None, local_user(), User("owner", is_admin=True), ALICE)] == [
        "trusted",
        "local",
        "admin",
        "user",
    ]
    assert user_of("owner", "admin") == User("owner", is_admin=True)
    monkeypatch.setenv("STUDIO_ADMINS", "")
    assert user_of("owner", "admin") == User("owner")  # an admin no longer
    assert user_of("alice", "user") == user_of("alice", "unknown") == ALICE and user_of("x", "trusted") is None
    assert user_of("me", "local") == User("me", is_admin=True, local=True)
    sweep_id = api.sweeps.submit(SPEC, [f"{LR}=1e-5..1e-2"], "tpe", 2, user=ALICE).report.sweep.id
    sweeps = SweepStore(store)
    # a scheduler without the facade's door (the CLI's detached one) leaves a signed-in user's sweep to the app's
    assert sweeps.advance(paths.root / "sweeps") == [] and sweeps.get(sweep_id).active
    (child,) = sweeps.advance(paths.root / "sweeps", api.core.sweep_door)
    assert store.get(child).owner == "alice" and sweeps.get(sweep_id).rights == "user"


def test_a_tpe_sweeps_trials_hold_a_place_per_training_process(api, store, monkeypatch):
    # Issues 48.1 and 48.4 together: a trial of a 2-process spec holds 2 places, as its job would once queued.
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "5")
    monkeypatch.setenv("STUDIO_MAX_QUEUED_TOTAL", "50")
    two = {**SPEC, "training": {**SPEC["training"], "num_processes": 2, "batch_size": 4}}
    assert "holds places for its 3 trials (6: one per training process)" in refused(
        lambda: api.sweeps.submit(two, [f"{LR}=1e-5..1e-2"], "tpe", 3, user=ALICE)
    )
    assert nothing_stored(store)
    api.sweeps.submit(two, [f"{LR}=1e-5..1e-2"], "tpe", 2, user=ALICE)  # 4 places of 5
    assert "trials your TPE sweep has yet to queue" in refused(lambda: api.jobs.submit(two, user=ALICE))
