"""Issue 48: a stranger's answers name a job by its id, never a folder of the server: a job's error and log, and the
"Use this model" snippets of a job that was not pushed (the export's sentence: test_space_mode.py)."""

from __future__ import annotations

import sys

import pytest

from backend.core.spec import parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from tests.helpers import tiny_spec

ALICE = User("alice")
LOCAL = User("local", is_admin=True, local=True)


@pytest.fixture()
def failed_job(api):
    store, paths = api.core.store, api.core.paths
    job = store.add(parse_spec(tiny_spec(owner="alice", output={"run_name": "r1"})))
    store.claim_next()
    adapter = paths.job_output(job.id) / "adapter"
    error = (
        f"OSError: {adapter}/adapter_config.json is missing\n"
        f'  File "{sys.prefix}/lib/python3/site-packages/peft/peft_model.py", line 3, in load\n'
        f"  disk full under {paths.root}/uploads"
    )
    store.finish(job.id, JobStatus.failed, error=error, artifacts={"adapter_dir": str(adapter)})
    paths.job_log(job.id).parent.mkdir(parents=True, exist_ok=True)
    paths.job_log(job.id).write_text(f"saving to {adapter}\n")
    return api, job.id


def test_a_strangers_job_error_log_and_snippets_name_no_server_folder(failed_job):
    api, job_id = failed_job
    root = str(api.core.paths.root)
    for shown in (api.jobs.get_job(job_id, ALICE), api.jobs.list_jobs(user=ALICE)[0]):
        assert root not in shown.error and sys.prefix not in shown.error, shown.error
        assert f"in job {job_id}'s folder" in shown.error and "<python>/lib" in shown.error, shown.error
    log = "\n".join(api.jobs.log_tail(job_id, user=ALICE))
    assert root not in log and f"job {job_id}'s folder" in log, log
    code = "\n".join(s.code for s in api.export.use_snippets(job_id, ALICE))
    assert root not in code and 'adapter_id = "adapter-r1"' in code, code
    # The person at this machine still reads where things are.
    assert root in api.jobs.get_job(job_id, LOCAL).error
    assert root in "\n".join(s.code for s in api.export.use_snippets(job_id, LOCAL))
