"""The header's queue line, from a real scheduler's health: ok, retrying after a failed tick, stopped."""

from __future__ import annotations

from backend.api import StudioAPI
from backend.core.users import local_user
from components.header import queue_status, status_text
from tests.helpers import wait_for


def test_the_header_says_how_the_queue_is_doing(paths, monkeypatch):
    api = StudioAPI(paths.root, scheduler="thread", poll_interval=0.05)
    try:
        wait_for(lambda: (h := api.scheduler_health()) and h.ok and h.last_tick_at, 20, what="a first tick")
        assert "Queue: ok, 0 running" in status_text(local_user(), api.scheduler_health())

        def broken_claim():
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(api.core.scheduler.store, "claim_next", broken_claim)
        health = wait_for(lambda: (h := api.scheduler_health()).consecutive_failures and h, 20, what="a failed tick")
        line, notice = queue_status(health)
        assert line == "Queue: retrying" and "keeps retrying" in notice and health.last_error in notice
        assert notice in status_text(local_user(), health)
    finally:
        api.close()
    line, notice = queue_status(api.scheduler_health())
    assert line == "Queue: stopped" and "restart the app" in notice
    assert queue_status(None) == (None, None)  # no scheduler in this process: nothing to say


def test_the_header_says_when_the_data_folder_is_read_only(paths):
    from tests.helpers.faults import read_only

    api = StudioAPI(paths.root, scheduler="none")
    try:
        assert "read-only" not in status_text(local_user(), None, api.storage_notice())
        with read_only(paths.root):
            line = status_text(local_user(), None, api.storage_notice())
            assert f"⚠️ The studio’s data folder ({paths.root}) is read-only" in line and "nothing can be queued" in line
        assert "read-only" not in status_text(local_user(), None, api.storage_notice())
    finally:
        api.close()


def test_the_jobs_refresh_is_answered_directly_not_through_the_queue(paths):
    """Every open Jobs tab lists its jobs every 2 s: a cheap read that must not wait in Gradio's queue behind long
    handlers (benchmarks/latency.py measured it)."""
    from app import build_app

    api = StudioAPI(paths.root, scheduler="none")
    try:
        demo = build_app(api)
        listing = [d for d in demo.config["dependencies"] if d.get("api_name") == "list_jobs"]
        assert listing and all(d["queue"] is False for d in listing)
    finally:
        api.close()


# The events that carry a value the user has just changed. A handler chained after one of them must answer the last
# change: Gradio's default for a chained handler ("once") drops a trigger while the previous one runs, so a Column
# mapping fixed seconds after another edit kept the old refusal, and a job picked while the last one loaded showed
# the last one.
VALUE_EVENTS = {"upload", "blur", "input", "change", "select"}


def test_a_handler_after_a_changed_value_answers_the_last_change(paths):
    from app import build_app

    api = StudioAPI(paths.root, scheduler="none")
    try:
        deps = {d["id"]: d for d in build_app(api).config["dependencies"]}
    finally:
        api.close()

    def root_events(dep):
        while dep["trigger_after"] is not None:
            dep = deps[dep["trigger_after"]]
        return {event for _, event in dep["targets"]}

    chained = [d for d in deps.values() if d["trigger_after"] is not None and d["backend_fn"] and d["inputs"]]
    after_values = [d for d in chained if root_events(d) & VALUE_EVENTS]
    assert len(after_values) >= 3, "the upload and its re-checks chain after a value"
    # The job picker and Compare answer in one event each (issue 47: one event a pick), not a chain.
    direct = [d for d in deps.values() if d["api_name"] in ("show_job", "compare", "compare_1")]
    assert len([d for d in direct if d["api_name"] == "show_job"]) == 1
    dropping = [
        (d["api_name"], sorted(root_events(d))) for d in [*after_values, *direct] if d["trigger_mode"] != "always_last"
    ]
    assert not dropping, f"these drop a change made while the last one is answered: {dropping}"
