"""A job sent to Hugging Face Jobs is in the Jobs tab's table beside the local ones: its status (from the last stage
read), its method, where it runs; and a user whose only jobs are remote ones sees the table, not "no jobs yet"."""

from __future__ import annotations

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import User
from components.jobs import handlers
from components.jobs import views as job_views
from tests.helpers import tiny_spec


def _remote(api: StudioAPI, hf_id: str, owner: str = "ann") -> None:
    spec = parse_spec(tiny_spec(output={"push_to_hub": True, "run_name": "big one"}))
    api.core.remote.add(hf_id, owner, spec.to_json(), "a100-large")


def test_a_remote_job_is_a_row_of_the_jobs_table_with_its_status(api):
    ann = User("ann", token="hf_ann")
    _remote(api, "68a1")
    _, rows, _, picked = handlers.listing(api, ann, None)
    assert picked is None, "the picker holds this machine's jobs only"
    (row,) = rows
    columns = dict(zip(job_views.TABLE_COLUMNS, row))
    assert (columns["id"], columns["status"], columns["method"], columns["run name"]) == (
        "68a1",
        "queued",
        "sft",
        "big one",
    )
    assert columns["queue"] == "HF Jobs · a100-large"

    api.core.remote.record_status("68a1", "RUNNING", "Training on Hugging Face Jobs.")
    assert dict(zip(job_views.TABLE_COLUMNS, handlers.listing(api, ann, None)[1][0]))["status"] == "running"
    api.core.remote.record_status("68a1", "COMPLETED", "Finished.")
    local = api.core.store.add(parse_spec(tiny_spec()).model_copy(update={"owner": "ann"}))
    rows = handlers.listing(api, ann, None)[1]
    assert [row[0] for row in rows] == [local.id, "68a1"], "newest first, local and remote together"
    assert dict(zip(job_views.TABLE_COLUMNS, rows[1]))["status"] == "succeeded"


def test_only_remote_jobs_still_show_the_table_and_not_anothers(api):
    _remote(api, "68b2", owner="ann")
    values, _ = handlers.listed(api, User("ann"), None)
    empty_note, jobs_list, _, rows = values[:4]
    assert empty_note["visible"] is False and jobs_list["visible"] is True and rows[0][0] == "68b2"
    values, _ = handlers.listed(api, User("bob"), None)
    assert values[0]["visible"] is True and values[3] == []
