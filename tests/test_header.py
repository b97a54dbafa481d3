"""The header's queue line, from a real scheduler's health: ok, retrying after a failed tick, stopped."""

from __future__ import annotations

from backend.api import StudioAPI
from backend.core.users import local_user
from components.header import queue_status, status_text
from tests.conftest import wait_for


def test_the_header_says_how_the_queue_is_doing(paths, monkeypatch):
    api = StudioAPI(paths.root, scheduler="thread", poll_interval=0.05)
    try:
        wait_for(lambda: (h := api.scheduler_health()) and h.ok and h.last_tick_at, 20, what="a first tick")
        assert "Queue: ok, 0 running" in status_text(local_user(), api.scheduler_health())

        def broken_claim():
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(api.scheduler.store, "claim_next", broken_claim)
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
    from tests.faults import read_only

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
