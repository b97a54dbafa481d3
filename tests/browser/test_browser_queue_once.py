"""Queue once (issue 47), in a real browser against the app process: two clicks on Queue 0.3 s apart queue one job.

The button is busy ("Queuing…", disabled) from the click until the answer, so the second click does nothing; had it
gone through, the facade would still answer it with the first job. Either way the store holds one new job and the
answer names it.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.store import JobStore
from tests.helpers.apps import app_fixture
from tests.helpers.browser import BROWSER_MARKS, fill_settings, page_errors_per_test, page_fixture

pytestmark = BROWSER_MARKS


app = app_fixture()


page = page_fixture(header=True)


no_new_page_errors = page_errors_per_test()


@pytest.fixture(scope="module")
def store(app) -> JobStore:
    """The module app's store (its data dir, not the test's own): the conftest ``store`` is the test's."""
    return JobStore(DataPaths(app.data_dir).db)


# Records every state the Queue button passes through (Gradio may swap the node: the parent is watched).
WATCH_BUTTON = """() => {
    window.queueStates = [];
    const button = () => document.querySelector('#queue-button');
    const note = () => { const b = button(); if (b) window.queueStates.push([b.disabled, b.textContent.trim()]); };
    new MutationObserver(note).observe(button().parentElement, {attributes: true, childList: true, subtree: true,
                                                              characterData: true});
}"""


def test_two_clicks_on_queue_a_moment_apart_queue_one_job(page, store):
    fill_settings(page, **{"Max steps": "2"})  # the job it queues trains briefly: the app shares the 2 cores
    before = {job.id for job in store.list()}
    queue = page.locator("#queue-button")
    queue.scroll_into_view_if_needed()
    box = queue.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.evaluate(WATCH_BUTTON)
    # The mouse, as a person clicks: Playwright's own click() would wait for a disabled button to be enabled again.
    page.mouse.click(x, y)
    page.wait_for_timeout(300)
    page.mouse.click(x, y)

    result = page.locator("#queue-result")
    expect(result).to_contain_text(re.compile(r"(Queued|Already queued) \S+"), timeout=60_000)
    expect(queue).to_be_enabled(timeout=30_000)  # and usable again once the answer is in
    expect(queue).to_have_text("Queue")
    assert [True, "Queuing…"] in page.evaluate("window.queueStates"), "the button was never busy"
    first = re.search(r"queued (\S+)", result.inner_text(), re.I).group(1)

    # Clicked again a moment after the answer (the button is usable then): the same job, said so, nothing new.
    page.mouse.click(x, y)
    expect(result).to_contain_text(f"Already queued {first} a moment ago", timeout=60_000)
    page.wait_for_timeout(1_000)  # a submit that went through anyway has had time to be stored
    new = [job.id for job in store.list() if job.id not in before]
    assert new == [first]
