"""Who may read what, at the facade: paths, uploads, Hub names and the user-code endpoints on a shared Space."""

import json
import os
import threading
import time
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError, parse_spec, quote_input
from backend.core.users import User, local_user
from backend.hub.hf_jobs import remote_problems
from backend.platform.limits import RateLimited, RateLimiter, TimedOut, TimeLimit
from tests.helpers import tiny_spec

ALICE, BOB = User("alice"), User("bob")
SPACE_ADMIN = User("owner", is_admin=True)
CHAT_ROWS = [
    {"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"hello {i}"}]}
    for i in range(12)
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(call, *fragments: str) -> str:
    with pytest.raises(SpecError) as caught:
        call()
    text = "\n".join(caught.value.problems)
    for fragment in fragments:
        assert fragment in text, text
    return text


def files_under(*folders: Path) -> set[Path]:
    """Files below the folders, but the store's own database files (SQLite opens and drops -wal/-shm as it likes)."""
    return {
        p
        for folder in folders
        if folder.exists()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith("studio.sqlite3")
    }


def uploaded(api: StudioAPI, user: User | None, tmp_path: Path, name: str = "chats.jsonl") -> str:
    temp_copy = write_jsonl(tmp_path / "gradio" / "abc123" / name, CHAT_ROWS)
    upload_id, summary = api.datasets.upload_dataset(temp_copy, name, "sft", user)
    assert "12 rows" in summary and "/" not in upload_id
    return upload_id


# --- server files ------------------------------------------------------------------------------------------------


def test_a_space_user_cannot_train_on_a_server_file_and_the_local_admin_can(api, tmp_path):
    server_file = write_jsonl(tmp_path / "secrets" / "rows.jsonl", CHAT_ROWS)
    spec = tiny_spec(dataset={"source": "file", "name": str(server_file)})
    for user in (ALICE, SPACE_ADMIN):
        for call in (  # each is called within the loop, so the user it reads is this one
            lambda: api.jobs.submit(spec, user=user),  # noqa: B023
            lambda: api.jobs.check(spec, user=user),  # noqa: B023
            lambda: api.datasets.preview(spec, user=user),  # noqa: B023
        ):
            # Quoted as every refusal quotes input (cut at 80 characters), so the check holds for any tmp path.
            refused(
                call,
                f"dataset.name: {quote_input(str(server_file))} is a path on the server; "
                "upload the file instead (Dataset -> Upload)",
            )
    assert api.jobs.list_jobs() == [], "nothing was stored"
    assert api.jobs.submit(spec, user=local_user()).job.spec.dataset.name == str(server_file)
    assert api.datasets.preview(spec, rows=1).total_rows == 12, "trusted in-process callers keep their reach"


def test_refusals_echo_at_most_80_characters_of_the_input(api):
    long_path = "/" + "x" * 500 + ".jsonl"
    text = refused(lambda: api.jobs.check(tiny_spec(dataset={"source": "file", "name": long_path}), user=ALICE))
    assert "x" * 79 not in text and len(text) < 200


@pytest.mark.parametrize("name", ["/etc", "../uploads/bob", "~/data", "data/uploads/bob", "C:\\data", "a/../b"])
def test_a_hub_dataset_name_that_is_a_path_is_refused_on_a_space(api, name):
    refused(lambda: api.jobs.check(tiny_spec(dataset={"source": "hub", "name": name}), user=ALICE), "dataset.name:")


def test_a_hub_name_that_is_also_a_folder_here_is_refused_on_a_space(api, tmp_path, monkeypatch):
    # load_dataset("uploads") reads a folder of that name in the working directory before asking the Hub.
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "uploads" / "bob" / "rows.jsonl", CHAT_ROWS)
    refused(
        lambda: api.datasets.preview(tiny_spec(dataset={"source": "hub", "name": "uploads"}), user=ALICE),
        "dataset.name: 'uploads' names a folder on the server, not a Hub dataset",
    )
    refused(
        lambda: api.jobs.check(tiny_spec(model={"name_or_path": "uploads"}), user=ALICE),
        "model.name_or_path: 'uploads' names a folder on the server",
    )


def test_a_space_user_cannot_load_a_model_from_a_server_folder_or_run_repository_code(api, demo_model_path):
    refused(
        lambda: api.jobs.check(tiny_spec(model={"name_or_path": str(demo_model_path)}), user=ALICE),
        "model.name_or_path:",
        "is a path on the server",
    )
    refused(
        lambda: api.jobs.check(tiny_spec(model={"trust_remote_code": True}), user=ALICE), "model.trust_remote_code:"
    )
    assert api.jobs.check(tiny_spec(model={"name_or_path": str(demo_model_path)}), user=local_user())


# --- uploads -----------------------------------------------------------------------------------------------------


def test_an_upload_id_is_readable_by_its_uploader_only(api, paths, tmp_path):
    upload_id = uploaded(api, ALICE, tmp_path)
    assert (paths.uploads("alice") / upload_id).is_file()
    spec = tiny_spec(dataset={"source": "upload", "name": upload_id})
    assert api.datasets.preview(spec, rows=1, user=ALICE).total_rows == 12
    job = api.jobs.submit(spec, user=ALICE).job
    assert job.spec.dataset.model_dump(include={"source", "name"}) == {"source": "upload", "name": upload_id}
    for call in (
        lambda: api.datasets.preview(spec, user=BOB),
        lambda: api.jobs.submit(spec, user=BOB),
        lambda: api.jobs.check(spec, user=BOB),
    ):
        refused(call, f"dataset.name: there is no upload '{upload_id}' of yours")
    kept = paths.uploads("alice") / upload_id
    for trick in (str(kept), f"../alice/{upload_id}", "../../studio.sqlite3"):
        refused(
            lambda: api.datasets.preview(tiny_spec(dataset={"source": "upload", "name": trick}), user=BOB),  # noqa: B023
            "dataset.name:",
        )


def test_the_worker_trains_on_the_owners_upload_and_leaves_no_copy_of_it(api, paths, tmp_path, monkeypatch):
    """The job's copies of her rows (datasets' Arrow files, the trainer's tokenized rows) lie in alice's own folder
    while it runs and go with it: before issue 48 they stayed in the shared datasets cache (208 MB for a 9.6 MB
    file)."""
    import datasets.config

    from backend.jobs.records import JobStatus
    from backend.worker import run_job

    shared = tmp_path / "hf-datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(shared))
    upload_id = uploaded(api, ALICE, tmp_path)
    job = api.jobs.submit(
        tiny_spec(dataset={"source": "upload", "name": upload_id}, training={"max_steps": 1}), user=ALICE
    ).job
    assert api.core.store.claim_next().id == job.id  # what the scheduler does before it starts the worker
    assert run_job(job.id, paths, threading.Event()) == 0
    done = api.jobs.get_job(job.id)
    assert done.status is JobStatus.succeeded, done.error
    assert (paths.job_adapter(job.id) / "adapter_config.json").is_file()
    assert files_under(shared) == set(), "a copy of alice's rows went to the shared datasets cache"
    assert files_under(paths.uploads("alice")) == {paths.uploads("alice") / upload_id}


def test_a_refused_upload_leaves_nothing_anywhere(api, paths, tmp_path, monkeypatch):
    import datasets.config

    cache = tmp_path / "hf-datasets-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    gradio_temp = tmp_path / "gradio"
    # Large enough that datasets writes an Arrow copy, and every text empty, so it is refused after loading. (Wrong
    # column names are kept instead: a Column mapping fixes them; see test_form.py.)
    temp_copy = write_jsonl(gradio_temp / "f00d" / "notes.jsonl", [{"text": ""}] * 2000 + [{"text": "x" * 200}])
    before = files_under(paths.root, cache)
    refused(
        lambda: api.datasets.upload_dataset(temp_copy, "notes.jsonl", "sft", ALICE),
        "2000 of 2001 rows have an empty 'text'",
    )
    assert files_under(gradio_temp) == set(), "the web server's temporary copy is removed"
    assert files_under(paths.root, cache) == before, "no kept copy, no Arrow files in the datasets cache"


def test_the_hub_jobs_path_refuses_an_upload_like_a_local_file(api, tmp_path):
    upload_id = uploaded(api, ALICE, tmp_path)
    problems = remote_problems(parse_spec(tiny_spec(dataset={"source": "upload", "name": upload_id})))
    assert any(p.startswith("dataset.source: an uploaded file is not on the remote machine") for p in problems)


# --- user code: the reward bench and dry runs ----------------------------------------------------------------------


def test_on_a_space_the_bench_and_dry_runs_need_a_signed_in_user(api, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/studio")
    refused(
        lambda: api.datasets.score_rewards([{"name": "regex", "pattern": "x"}], ["x"]),
        "reward bench: sign in with Hugging Face first",
    )
    refused(lambda: api.environments.dry_run(tiny_spec()), "dry run: sign in with Hugging Face first")
    assert api.datasets.score_rewards([{"name": "regex", "pattern": "x"}], ["x"], user=ALICE)[0]["total"] == 1.0


def test_the_bench_answers_fast_on_a_catastrophic_pattern(api):
    start = time.monotonic()
    scored = api.datasets.score_rewards(
        [{"name": "regex", "pattern": "(a|aa)+$"}, {"name": "regex", "pattern": "(a+)+$"}],
        ["a" * 40 + "b", "a" * 30 + "b"],
        user=ALICE,
    )
    assert time.monotonic() - start < 1.5
    assert [s["total"] for s in scored] == [0.0, 0.0]
    assert "regex: the pattern ran past 0.1 s and scored 0.0" in scored[0]["notes"][0]


def test_the_bench_refuses_oversized_input_with_a_sentence(api):
    refused(
        lambda: api.datasets.score_rewards([{"name": "length", "target_length": 3}], ["x"] * 33, user=ALICE),
        "completions: the bench scores at most 32 completions at once; you gave 33",
    )
    refused(
        lambda: api.datasets.score_rewards([{"name": "length", "target_length": 3}], ["x" * 9000], user=ALICE),
        "completions: each may be at most 8,000 characters",
    )
    refused(
        lambda: api.datasets.score_rewards(
            [{"name": "exact_match", "column": "a"}], ["x"], row={"a": "y" * 20_000}, user=ALICE
        ),
        "row: the dataset row may be at most 16,000 characters",
    )


def test_the_bench_is_rate_limited_per_user(api):
    bench = lambda user: api.datasets.score_rewards([{"name": "regex", "pattern": "x"}], ["x"], user=user)  # noqa: E731
    for _ in range(20):
        bench(ALICE)
    with pytest.raises(RateLimited) as limited:
        bench(ALICE)
    assert "reward bench: you used it 20 times in the last 60 s, the most allowed; try again in" in str(limited.value)
    assert bench(BOB), "bob has his own allowance"


def test_dry_runs_are_rate_limited_per_user(api):
    for _ in range(5):  # refused after the limiter counted it: there is no environment to play
        refused(
            lambda: api.environments.dry_run(tiny_spec(), user=ALICE),
            "environment.name: a dry run needs an environment",
        )
    refused(lambda: api.environments.dry_run(tiny_spec(), user=ALICE), "dry run: you used it 5 times")


def test_the_rate_limiter_frees_calls_as_the_window_slides():
    now = [1000.0]
    limiter = RateLimiter("thing", calls=2, per_s=60, clock=lambda: now[0])
    limiter.check("alice")
    now[0] += 30
    limiter.check("alice")
    with pytest.raises(RateLimited, match="try again in 30 s"):
        limiter.check("alice")
    now[0] += 30.5
    limiter.check("alice")


def test_a_time_limit_answers_on_time_and_says_what_to_do():
    limit = TimeLimit("slow thing", timeout_s=0.2, advice="make it faster")
    try:
        start = time.monotonic()
        with pytest.raises(TimedOut, match="slow thing: it did not finish within 0.2 s; make it faster"):
            limit.run(lambda: time.sleep(2))
        assert time.monotonic() - start < 1.0
        assert limit.run(lambda: 42) == 42, "the other worker thread still serves"
    finally:
        limit.close()


def test_uploads_of_a_user_named_dot_dot_stay_inside_the_uploads_folder(paths):
    assert paths.uploads("..").parent == paths.root / "uploads"
    assert os.sep not in paths.uploads("a/b").name
