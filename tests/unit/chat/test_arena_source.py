"""The arena's "Episodes from" follows what the picked job's own evaluation played.

A job whose environment evaluation played the environment's held-out test split opens the arena on that split, so
Play N repeats the stored success rate without a click; a job evaluated on its dataset's rows opens on the rows. The
rows choice never claims to be the evaluation's episodes when they were not.
"""

from __future__ import annotations

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import local_user
from backend.jobs.records import JobStatus
from components.chat import arena_handlers
from components.chat.arena_layout import SOURCE_CHOICES
from tests.helpers import tiny_spec

TEST_SPLIT = {"episodes_from": "test split", "held_out": True, "split": "test", "task_indexes": [0, 1]}
HELD_OUT_ROWS = {"episodes_from": "held-out rows", "held_out": False, "split": None}


def evaluated_job(api: StudioAPI, played: dict) -> str:
    """A succeeded environment job, stored without running, whose evaluation played ``played``."""
    spec = parse_spec(tiny_spec(method="grpo", environment={"name": "builtin:arithmetic"}, training={"batch_size": 4}))
    job = api.core.store.add(spec.model_copy(update={"owner": "local"}))
    assert api.core.store.claim_next().id == job.id
    api.core.store.merge_artifacts(job.id, environment_evaluation=played)
    api.core.store.finish(job.id, JobStatus.succeeded)
    return job.id


def test_the_arena_opens_on_the_episodes_the_jobs_evaluation_played(api):
    user = local_user()
    on_test, on_rows = evaluated_job(api, TEST_SPLIT), evaluated_job(api, HELD_OUT_ROWS)
    assert api.arena.setup(on_test, user).evaluation_split == "test"
    assert api.arena.setup(on_rows, user).evaluation_split is None

    panel, info, _, source = arena_handlers.on_job(api, user, f"{on_test} · grpo · x")
    assert panel["visible"] and source["value"] == "test"
    assert "the test split's tasks" in info
    panel, info, _, source = arena_handlers.on_job(api, user, f"{on_rows} · grpo · x")
    assert panel["visible"] and source["value"] == "rows"
    assert "the rows and seeds of the job's evaluation" in info
    assert not any("evaluation" in label for label, _ in SOURCE_CHOICES), "rows are not always the evaluation's"
