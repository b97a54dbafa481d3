"""The app launched as a real process on 127.0.0.1, driven through gradio_client.

One app for the module (its own data dir): the tests run in order on it, each reading only the jobs it queued.
"""

import json
import os
import time
from pathlib import Path

import pytest

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import wait_for, wait_status
from tests.helpers.apps import app_fixture, launch_app

pytestmark = pytest.mark.slow


app = app_fixture()


@pytest.fixture(scope="module")
def app_url(app):
    return app.url


@pytest.fixture()
def store(app) -> JobStore:
    """The module app's store (not the test's own data dir)."""
    return JobStore(DataPaths(app.data_dir).db)


def _form(**values):
    from components.train.form import FIELDS

    # Plumbing: the random demo model on its own chats, as the form has them without the arith model's recipe.
    merged = {
        **FIELDS,
        "base_model": "builtin:tiny-qwen3",
        "builtin_dataset": "chat-demo",
        "holdout_rows": 0,
        "max_steps": 4,
        "learning_rate": 1e-3,
        "batch_size": 2,
        "max_length": 128,
        **values,
    }
    return [merged[name] for name in FIELDS]


def _job_id(result_markdown: str) -> str:
    """The id in "Queued [**<id>**](?job=<id>) ...": bold, and a link that opens it in the Jobs tab."""
    assert result_markdown.startswith("Queued [**"), result_markdown
    job_id = result_markdown.split("**")[1]
    assert f"](?job={job_id})" in result_markdown, result_markdown
    return job_id


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_app_nobody_uses_takes_under_4_percent_of_a_core(app):
    """Gradio's queue looked for events every 1 ms and for progress every 10 ms: 0.58 CPU s in 10 s, 6% of a core,
    for an app with no page open and no job, on a Space and beside its training (0.17-0.25 CPU s now, idle or
    beside two busy processes). Runs first, on the module's fresh app: nothing is queued, no page is open."""
    time.sleep(2)  # the app has answered its first request; its start-up threads settle
    before = _cpu_seconds(app.proc.pid)
    time.sleep(10)
    spent = _cpu_seconds(app.proc.pid) - before
    assert spent < 0.4, f"the idle app took {spent:.2f} CPU s in 10 s"


def test_app_queues_runs_shows_and_chats_through_the_api(app_url, store):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    assert "Device:" in client.predict(api_name="/status")
    result, *errors = client.predict(*_form(), api_name="/submit_job")
    job_id = _job_id(result)
    assert not any(errors)
    rows, picker = client.predict(None, api_name="/list_jobs")
    assert rows["data"][0][0] == job_id
    done = wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed})
    assert done.status is JobStatus.succeeded, done.error
    detail = client.predict(job_id, api_name="/show_job")
    summary, progress, loss_plot = detail[0], detail[1], detail[2]
    assert "succeeded" in summary and 'data-fraction="1.000"' in progress
    assert loss_plot is not None and "loss" in str(loss_plot)

    # Chat: both sides answer, streamed, from one finished job.
    choices = client.predict(api_name="/chat_jobs")
    job_choice = next((c for c in choices if c.startswith(job_id)), None)
    assert job_choice, choices
    base, tuned, _ = client.predict(job_choice, "Hello!", [], [], "", 0.0, 16, 0, api_name="/chat_send")
    assert base[-1]["role"] == tuned[-1]["role"] == "assistant"
    # Gradio 6 chatbots hand back message content as a list of typed parts.
    assert "Hello!" in str(base[0]["content"]) and "Hello!" in str(tuned[0]["content"])
    assert base[-1]["content"] and tuned[-1]["content"]


def test_app_cancels_a_running_job(app_url, store):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    job_id = client.predict(
        '{"method": "sft", "model": {"name_or_path": "builtin:tiny-qwen3"}, '
        '"training": {"max_steps": 5000, "batch_size": 2, "max_length": 128}}',
        api_name="/submit_spec",
    )
    wait_for(lambda: store.get(job_id).status is JobStatus.running, 120, what="the job to start")
    note = client.predict(job_id, api_name="/cancel_job")
    assert "stop" in note.lower() or "cancelled" in note.lower()
    done = wait_status(store, job_id, {JobStatus.cancelled, JobStatus.failed}, timeout=90)
    assert done.status is JobStatus.cancelled, done.error


def test_app_shows_spec_errors_next_to_their_fields(app_url, store):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    queued_before = [job.id for job in store.list()]
    result, model_error, dataset_error, method_error, env_error, settings_error, general, *boxes = client.predict(
        *_form(learning_rate=-1), api_name="/submit_job"
    )
    assert result.startswith("⚠️ Not queued: see **Learning rate** (4. Training settings)"), result
    assert "Learning rate must be above 0; you gave -1 (`training.learning_rate`)" in "\n".join(
        str(box) for box in boxes
    )
    assert not settings_error and not model_error  # said once, at the field
    result, *boxes = client.predict(*_form(base_model="nobody/missing-model"), api_name="/submit_job")
    assert result.startswith("⚠️ Not queued") and "the Hub is not reachable from this machine" in "\n".join(
        map(str, boxes)
    )
    assert [job.id for job in store.list()] == queued_before


def test_app_second_chat_turn_and_a_preference_round_trip(app_url, store):
    """Gradio hands chat history back as typed parts; a second turn and a saved preference must still work."""
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    job_id = client.predict(
        '{"method": "sft", "model": {"name_or_path": "builtin:tiny-qwen3"}, '
        '"training": {"max_steps": 2, "batch_size": 2, "max_length": 128}}',
        api_name="/submit_spec",
    )
    assert wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed}).status is JobStatus.succeeded
    chat = ("Be brief.", 0.9, 12, 1, "conversation")  # the history carries over (the default, "compare", asks anew)
    base, tuned, _ = client.predict(job_id, "Hi", [], [], *chat, api_name="/chat_send")
    base, tuned, _ = client.predict(job_id, "And again?", base, tuned, *chat, api_name="/chat_send")
    assert len(base) == len(tuned) == 4
    note, ready = client.predict(job_id, base, tuned, "Be brief.", api_name="/prefer_tuned")
    assert "(1 preference row so far" in note and ready  # the export is ready for the button's one click
    exported = client.predict(api_name="/export_preferences")
    rows = [json.loads(line) for line in open(exported, encoding="utf-8")]
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert rows[0]["prompt"][-1] == {"role": "user", "content": "And again?"}
    assert isinstance(rows[0]["chosen"][0]["content"], str)


def test_a_user_error_logs_one_line_and_no_traceback(data_dir):
    """A gr.Error is a sentence for the user: the app's log gets that sentence once, not Gradio's traceback."""
    from gradio_client import Client

    with launch_app(data_dir) as app:
        client = Client(app.url, verbose=False)
        with pytest.raises(Exception, match="Pick one of your jobs first"):
            client.predict(None, api_name="/cancel_job")  # no job picked
        log = wait_for(
            lambda: (text := app.log_path.read_text(errors="replace")) and "Pick one" in text and text,
            10,
            what="the refusal in the app's log",
        )
    lines = [line for line in log.splitlines() if "Pick one of your jobs first" in line]
    assert lines == ["cancel_job refused: Pick one of your jobs first."], log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_a_real_bug_in_a_handler_still_logs_its_traceback(capfd, caplog):
    import gradio as gr
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from app import StudioBlocks
    from backend.environments.launcher import free_port

    def broken():
        raise RuntimeError("a real bug")

    def refused():
        raise gr.Error("a sentence for the user")

    with StudioBlocks() as demo:
        out = gr.Textbox()
        gr.Button("a").click(broken, None, out, api_name="broken")
        gr.Button("b").click(refused, None, out, api_name="refused")
    demo.queue().launch(server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        client = Client(demo.local_url, verbose=False)
        with pytest.raises(AppError):
            client.predict(api_name="/refused")
        with pytest.raises(AppError):
            client.predict(api_name="/broken")
    finally:
        demo.close()
    err = capfd.readouterr().err
    assert "refused refused: a sentence for the user" in [r.getMessage() for r in caplog.records]
    assert err.count("Traceback") == 1 and "RuntimeError: a real bug" in err


def test_the_app_keeps_an_upload_by_id_previews_it_and_scores_the_bench(app_url, tmp_path):
    """(From tests/unit/api/test_access.py: an upload kept by id, previewed and scored on the bench through the app.)"""
    from gradio_client import Client, handle_file

    from backend.core.uploads import is_upload_id
    from tests.unit.api.test_access import CHAT_ROWS, write_jsonl

    client = Client(app_url, verbose=False)
    rows = write_jsonl(tmp_path / "chats.jsonl", CHAT_ROWS)
    upload_id, note, error, _ = client.predict(handle_file(str(rows)), "sft", api_name="/upload_dataset")
    assert is_upload_id(upload_id) and "12 rows" in note["value"] and not error
    preview, *_ = client.predict(*_form(dataset_source="upload", upload_id=upload_id), api_name="/preview_dataset")
    assert preview.startswith("**12 rows**"), preview
    table, note = client.predict(
        "- name: exact_match\n  column: answer\n- name: accuracy\n",
        "Paris\nLyon",
        '{"answer": "paris", "solution": "no math"}',
        api_name="/score_rewards",
    )
    assert note == "Scored against the row typed above."
    assert table["headers"] == ["completion", "exact_match", "accuracy", "total", "notes"]
    assert table["data"] == [["Paris", "1.000", "-", "1.000", ""], ["Lyon", "0.000", "-", "0.000", ""]]
