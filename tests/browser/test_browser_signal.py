"""A GRPO run with nothing to learn from, in a real browser: the Jobs tab warns while it runs, and says it learned
nothing once it ended.

The rewards are always 0 (a regex that never matches), so every group of completions scores the same: the signal
watch (backend/training/callbacks.py) records its warning after a few logged steps, the page must show it while the
job still runs, and the worker's verdict (backend/worker.py) must be ``no_signal``, which the page reads as
"succeeded - learned nothing". The job is queued through the app's own API (/submit_spec) and followed through its
deep link (``?job=<id>``).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import tiny_spec
from tests.helpers.apps import app_fixture
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, open_page

pytestmark = BROWSER_MARKS

NOTHING_TO_LEARN = tiny_spec(
    method="grpo",
    dataset={"source": "builtin", "name": "math-demo"},
    output={"run_name": "grpo-no-signal"},
    grpo={
        "num_generations": 2,
        "max_completion_length": 8,
        "rewards": [{"name": "regex", "pattern": "^NEVER-MATCHES$"}],
    },
    # About 0.3 s a step on a CPU: the warning comes at step 3 and the run goes on for some 30 s more, many of the
    # Jobs tab's 2 s refreshes, however long the page takes to load (a worker forked from the pre-imported pool
    # starts training within a second of the submit).
    training={"max_steps": 120, "batch_size": 2, "logging_steps": 1, "save_steps": 100},
    eval={"holdout_rows": 4},
    # Its forecast says no signal and would stop it before the first step: trained anyway, the live watch is tested.
    forecast={"train_anyway": True},
)


app = app_fixture()


def _plain(text: str) -> str:
    """Text as the page shows Markdown: no emphasis or code marks, whitespace as single spaces."""
    return " ".join(re.sub(r"[`*]", "", text).split())


def test_the_jobs_tab_warns_while_the_run_has_no_signal_and_ends_saying_it_learned_nothing(app):
    store = JobStore(DataPaths(app.data_dir).db)
    job_id = app.client().predict(json.dumps(NOTHING_TO_LEARN), api_name="/submit_spec")
    with open_page(f"{app.url}?job={job_id}") as page:
        summary = page.locator("#job-summary")
        expect(summary).to_contain_text(job_id, timeout=30_000)

        # Poll the page: the warning must be on it while the job still runs (the page is read before the store, so
        # a job still running after the page showed the warning was running when it did).
        deadline = time.monotonic() + 150
        while True:
            shown = _plain(summary.inner_text())
            job = store.get(job_id)
            if "No learning signal" in shown:
                assert job.status is JobStatus.running, f"the warning showed only once the job was {job.status.value}"
                break
            if job.status.finished or time.monotonic() > deadline:
                signal = job.artifacts.signal
                pytest.fail(
                    f"the job reached {job.status.value} (error: {job.error}) and the page never showed a "
                    f"no-signal warning while it ran; the stored signal watch: "
                    f"{signal.model_dump() if signal else 'none recorded (backend/training/callbacks.py)'}"
                )
            page.wait_for_timeout(250)
        warning = store.get(job_id).artifacts.signal.warning
        assert warning and _plain(warning)[:60] in shown, (warning, shown)
        assert job_id in shown and "running" in shown
        page.screenshot(path=ARTIFACTS / "jobs-no-signal-running.png", full_page=True)

        # Once it ended: a success that learned nothing, in the summary and the table, and so in the record.
        expect(summary).to_contain_text(
            re.compile(rf"{job_id} · (succeeded|failed|cancelled|interrupted)"), timeout=120_000
        )
        job = store.get(job_id)
        assert job.status is JobStatus.succeeded, job.error
        assert job.artifacts.learning is not None, "the worker recorded no learning verdict (backend/worker.py)"
        assert job.artifacts.learning.verdict == "no_signal", job.artifacts.learning
        expect(summary).to_contain_text(f"{job_id} · succeeded - learned nothing")
        expect(summary).to_contain_text(_plain(job.artifacts.learning.sentence)[:60])
        expect(page.locator("#jobs-table")).to_contain_text("succeeded - learned nothing")
        page.screenshot(path=ARTIFACTS / "jobs-no-signal-ended.png", full_page=True)
    assert "Traceback" not in app.log_tail(20_000)
