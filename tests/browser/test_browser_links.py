"""Deep links in a real browser: ``?job=<id>`` opens the Jobs tab on that job, and a reload keeps the tab and the job.

The jobs are written to the store before the app starts (cancelled before they ran), so nothing trains here.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.core.spec import parse_spec
from backend.jobs.store import JobStore
from tests.helpers import tiny_spec
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.browser import BROWSER_MARKS, goto, jobs_tab_ticks, open_page, reload, wait_until

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def app_with_jobs(tmp_path_factory, models_dir):
    root = data_dir_with_models(tmp_path_factory.mktemp("links") / "data", models_dir)
    store = JobStore(DataPaths(root).ensure().db)
    first = store.add(parse_spec(tiny_spec(output={"run_name": "first-run"})))
    second = store.add(parse_spec(tiny_spec(output={"run_name": "second-run"})))
    for job in (first, second):
        store.request_cancel(job.id)
    with launch_app(root) as running, open_page(running.url) as page:
        yield running, page, first.id, second.id


def _selected_tab(page) -> str:
    return page.locator("[role='tab'][aria-selected='true']").first.inner_text().strip()


def test_a_job_link_opens_the_jobs_tab_on_that_job_not_the_newest(app_with_jobs):
    running, page, first, _second = app_with_jobs
    goto(page, f"{running.url}?job={first}")
    expect(page.locator("#job-picker input")).to_have_value(re.compile(rf"^{first}"), timeout=30_000)
    expect(page.locator("#job-summary")).to_contain_text(first)
    assert _selected_tab(page) == "Jobs"
    # The Jobs tab the link opened (not a click) follows its jobs, and the timer's refresh keeps the linked job
    # rather than jumping to the newest one.
    with jobs_tab_ticks(page, running.url) as ticks:
        wait_until(page, lambda: ticks.sent >= 2, 15, "the linked Jobs tab to follow its jobs")
    expect(page.locator("#job-picker input")).to_have_value(re.compile(rf"^{first}"))


def test_a_reload_keeps_the_tab_and_the_job(app_with_jobs):
    running, page, first, second = app_with_jobs
    goto(page, running.url)
    expect(page.locator("#header-status")).to_contain_text("Device:")
    assert _selected_tab(page) == "Train"
    page.get_by_role("tab", name="Jobs").click()
    picker = page.locator("#job-picker input")
    expect(picker).to_have_value(re.compile(rf"^{second}"), timeout=15_000)  # the newest, picked by the tab
    picker.click()
    page.get_by_role("option", name=re.compile(rf"^{first}")).click()
    expect(page.locator("#job-summary")).to_contain_text(first)
    expect(page).to_have_url(re.compile(rf"job={first}"))
    reload(page)
    expect(page.locator("#job-picker input")).to_have_value(re.compile(rf"^{first}"), timeout=30_000)
    assert _selected_tab(page) == "Jobs"

    page.get_by_role("tab", name="Chat").click()
    expect(page).to_have_url(re.compile(r"tab=chat"))
    reload(page)
    expect(page.locator("#header-status")).to_contain_text("Device:")
    expect(page.locator("[role='tab'][aria-selected='true']").first).to_have_text("Chat")


def test_a_bad_link_lands_on_the_train_tab(app_with_jobs):
    running, page, _first, _second = app_with_jobs
    goto(page, f"{running.url}?tab=nowhere&job=../../etc")
    expect(page.locator("#header-status")).to_contain_text("Device:")
    expect(page.locator("[role='tab'][aria-selected='true']").first).to_have_text("Train")
    assert "Traceback" not in running.log_tail(20_000)
