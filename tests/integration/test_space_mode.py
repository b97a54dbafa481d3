"""The app as it runs on a shared Space: visitors, two signed-in users and the Space's owner, through the real API.

One app process for the module, launched with the platform's settings (tests/helpers/apps.py); every caller is a
gradio_client carrying a session cookie signed exactly as Gradio checks it.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client.exceptions import AppError

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import wait_status
from tests.helpers.apps import SPACE_OWNER, app_fixture, session_cookie
from tests.integration.test_app import _form, _job_id

pytestmark = pytest.mark.slow

SIGN_IN = "Sign in with Hugging Face first"
TINY_SPEC = (
    '{"method": "sft", "model": {"name_or_path": "builtin:tiny-qwen3"}, '
    '"training": {"max_steps": 2, "batch_size": 2, "max_length": 128}}'
)


MERGED = "Merged model (safetensors)"  # the Export panel's first format

space = app_fixture(space=True)


@pytest.fixture(scope="module")
def store(space) -> JobStore:
    """The module Space's store (its data dir, not the test's own): the conftest ``store`` is the test's."""
    return JobStore(DataPaths(space.data_dir).db)


@pytest.fixture(scope="module")
def alices_job(space, store) -> str:
    """A finished job of alice's (the other user's target in the isolation tests)."""
    job_id = space.client("alice").predict(TINY_SPEC, api_name="/submit_spec")
    done = wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed})
    assert done.status is JobStatus.succeeded, done.error
    return job_id


def _refused(call, *args, api_name: str, expect: str = SIGN_IN) -> str:
    with pytest.raises(AppError) as refused:
        call.predict(*args, api_name=api_name)
    assert expect in str(refused.value), (api_name, str(refused.value))
    return str(refused.value)


def test_a_visitor_can_look_but_not_queue_check_preview_bench_or_dry_run(space, store):
    visitor = space.client()
    forged_cookie = session_cookie("mallory", secret="not-the-space-secret")
    forged = type(visitor)(space.url, verbose=False, headers={"Cookie": f"session={forged_cookie}"})
    for caller in (visitor, forged):  # a cookie signed with another key is no sign-in at all
        assert caller.predict(api_name="/status").startswith("Not signed in")
        rows, _ = caller.predict(None, api_name="/list_jobs")
        assert rows["data"] == [] or rows["data"] == [[""] * len(rows["headers"])]
        for api_name in ("/submit_job", "/check_job", "/dry_run", "/preview_dataset"):
            _refused(caller, *_form(), api_name=api_name)
        _refused(caller, TINY_SPEC, api_name="/submit_spec")
        _refused(caller, "- name: length\n  target_length: 3\n", "a b c", "", api_name="/score_rewards")
        _refused(caller, "x", api_name="/cancel_job")
        _refused(caller, "x", MERGED, False, "", True, api_name="/export")
        _refused(caller, "x", "", ["studio_arith"], 8, api_name="/evaluate")
        _refused(caller, "x", "Hi", [], [], "", 0.0, 8, 0, api_name="/chat_send")
    assert store.list() == []
    assert space.serving()


def test_a_signed_in_user_checks_previews_and_queues_from_the_train_tab(space, store):
    alice = space.client("alice")
    assert alice.predict(api_name="/status").startswith("Signed in as **alice**")
    checked, *boxes = alice.predict(*_form(), api_name="/check_job")
    assert checked.startswith("✅ Pre-flight passed."), (checked, boxes)
    preview, *boxes = alice.predict(*_form(), api_name="/preview_dataset")
    assert "rows**" in preview and not any(boxes), boxes
    queued, *boxes = alice.predict(*_form(max_steps=2), api_name="/submit_job")
    job = store.get(_job_id(queued))
    assert job.owner == "alice" and not any(boxes)
    assert store.get(alice.predict(TINY_SPEC, api_name="/submit_spec")).owner == "alice"


def test_a_signed_in_user_dry_runs_an_environment(space):
    transcript, *boxes = space.client("alice").predict(
        *_form(
            method="grpo",
            builtin_dataset="echo-demo",
            env_name="builtin:echo",
            rollout_rewards="",
            rollout_max_completion_length=32,
            env_max_iterations=1,
            batch_size=4,
        ),
        api_name="/dry_run",
    )
    assert not any(boxes), boxes
    assert "reward" in transcript.lower(), transcript


def test_another_user_can_see_or_touch_none_of_it(space, store, alices_job):
    bob = space.client("bob")
    rows, picker = bob.predict(None, api_name="/list_jobs")
    assert alices_job not in str(rows) and alices_job not in str(picker)
    assert bob.predict(alices_job, api_name="/show_job")[0] == "Job not found."
    for api_name in ("/cancel_job", "/resume_job", "/clone_job"):
        _refused(bob, alices_job, api_name=api_name, expect="Pick one of your jobs")
    _refused(bob, alices_job, "bob/stolen", True, api_name="/push_to_hub", expect="Pick one of your jobs")
    _refused(bob, alices_job, MERGED, True, "bob/stolen", True, api_name="/export", expect="Pick one of your jobs")
    _refused(bob, alices_job, "Hi", [], [], "", 0.0, 8, 0, api_name="/chat_send", expect="not yours")
    assert all(not c.startswith(alices_job) for c in bob.predict(api_name="/chat_jobs"))
    # Continuing from her adapter, through the form's picker or a spec, is refused as if the job did not exist.
    _, *boxes = bob.predict(*_form(parent_job=alices_job), api_name="/submit_job")
    assert "there is no job" in "\n".join(boxes)
    continued = {**json.loads(TINY_SPEC), "model": {"parent_job_id": alices_job}}
    _refused(bob, json.dumps(continued), api_name="/submit_spec", expect="there is no job")
    # Benchmarking her adapter, by the Evaluate button or a spec, likewise: her job is no job of his.
    said = bob.predict(alices_job, "", ["studio_arith"], 8, api_name="/evaluate")
    assert not said.startswith("Queued") and "adapter" not in said, said
    scored = {**json.loads(TINY_SPEC), "evaluate": {"job_id": alices_job}, "benchmarks": {"tasks": ["studio_arith"]}}
    _refused(bob, json.dumps(scored), api_name="/submit_spec", expect="evaluate.job_id: there is no job")
    assert [j.owner for j in store.list()].count("bob") == 0
    # The Space's owner is an admin: sees everyone's jobs.
    rows, _ = space.client(SPACE_OWNER).predict(None, api_name="/list_jobs")
    assert alices_job in str(rows)
    assert space.serving()


def _rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_thumbs_are_each_signed_in_users_own_and_a_visitor_records_none(space, alices_job):
    """The Chat tab's 👍/👎 on a shared Space: a visitor is told to sign in and nothing is written; alice's thumbs are
    in her export only; bob's export holds his own thumb and none of hers."""
    thumbs = DataPaths(space.data_dir).root / "thumbs"
    visitor = space.client()
    _refused(visitor, alices_job, [], [], "", api_name="/thumb_base_up")
    _refused(visitor, api_name="/export_thumbs")
    assert not thumbs.exists()

    alice = space.client("alice")
    base, tuned, _ = alice.predict(alices_job, "Hello", [], [], "", 0.0, 8, 0, api_name="/chat_send")
    alice.predict(alices_job, base, tuned, "", api_name="/thumb_base_up")
    note, ready = alice.predict(alices_job, base, tuned, "", api_name="/thumb_tuned_down")
    assert "2 KTO rows so far" in note and ready
    exported = alice.predict(api_name="/export_thumbs")
    assert exported.endswith("alice-kto.jsonl")
    rows = _rows(exported)
    assert [r["label"] for r in rows] == [True, False]
    answers = [side[-1]["content"][0]["text"] for side in (base, tuned)]  # the client gets typed text parts
    assert [r["completion"][0]["content"] for r in rows] == answers

    bob = space.client("bob")
    _refused(bob, api_name="/export_thumbs", expect="no thumbs recorded yet")
    his = [
        {"role": role, "content": [{"type": "text", "text": text}]}
        for role, text in (("user", "Hi"), ("assistant", "bob's own answer"))
    ]
    note, _ = bob.predict("", his, his, "", api_name="/thumb_tuned_up")
    assert "1 KTO row so far" in note
    assert [r["completion"][0]["content"] for r in _rows(bob.predict(api_name="/export_thumbs"))] == [
        "bob's own answer"
    ]
    assert sorted(p.name for p in thumbs.iterdir()) == ["alice.jsonl", "bob.jsonl"]
    assert len(_rows(alice.predict(api_name="/export_thumbs"))) == 2, "bob's thumb is not in alice's export"


def _exported(store: JobStore, owner: str, job_id: str):
    """The newest export job of ``job_id`` once it has ended."""
    export = store.latest_export(job_id)
    assert export is not None and export.owner == owner
    return wait_status(store, export.id, {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}, timeout=300)


def test_a_user_exports_her_job_merged_into_its_own_folder_and_downloads_it(space, store, alices_job):
    alice = space.client("alice")
    _, note, *_ = alice.predict(alices_job, MERGED, False, "", True, api_name="/export")
    assert note.startswith("Export ") and str(space.data_dir) not in note, note
    done = _exported(store, "alice", alices_job)
    assert done.status is JobStatus.succeeded, done.error
    folder = DataPaths(space.data_dir).job_dir(alices_job) / "merged"
    assert (folder / "model.safetensors").is_file() and not (folder / "adapter_config.json").exists()
    outcome = done.artifacts.export
    assert outcome.sentence.startswith(f"Merged job {alices_job} into ") and outcome.download.endswith(".zip")
    assert list(outcome.seconds) == ["merging", "packing"]
    assert space.serving()


def test_two_users_export_side_by_side_and_a_second_export_of_one_is_refused_at_once(space, store, alices_job):
    """Issue 49: exports are jobs with their own lane; one per user at once, refused within a second."""
    alice, bob = space.client("alice"), space.client("bob")
    bobs_job = bob.predict(TINY_SPEC, api_name="/submit_spec")
    assert wait_status(store, bobs_job, {JobStatus.succeeded, JobStatus.failed}).status is JobStatus.succeeded
    with ThreadPoolExecutor(2) as both:  # the two clicks at once
        list(
            both.map(
                lambda c: c[0].predict(c[1], MERGED, False, "", True, api_name="/export"),
                [(alice, alices_job), (bob, bobs_job)],
            )
        )
    asked = time.monotonic()
    refused = _refused(
        alice, alices_job, "Adapter (zip)", False, "", True, api_name="/export", expect="is still queued"
    )
    assert time.monotonic() - asked < 1.0 and "wait for it to end" in refused
    ends = [_exported(store, owner, job_id) for owner, job_id in (("alice", alices_job), ("bob", bobs_job))]
    assert all(e.status is JobStatus.succeeded for e in ends), [e.error for e in ends]
    # Side by side: each started before the other ended (one Space-wide export at a time would run them in turn).
    assert max(e.started_at for e in ends) < min(e.finished_at for e in ends), [
        (e.started_at, e.finished_at) for e in ends
    ]
    assert [j.spec.export.format for j in store.list(owner="alice") if j.spec.export].count("adapter") == 0
    assert space.serving()
