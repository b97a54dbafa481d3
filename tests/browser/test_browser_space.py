"""The Train tab in a real browser on an emulated Space: a signed-in stranger checks, dry-runs and queues; a visitor
who has not signed in is told to.

The sign-in is Gradio's own session cookie, signed as the Space's OAuth callback would sign it (tests/helpers/apps.py),
set in Chromium before the page loads.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.store import JobStore
from tests.helpers.apps import app_fixture, session_cookie
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, chromium, fill_settings, pick_base_model, watch_errors

pytestmark = BROWSER_MARKS


space = app_fixture(space=True)


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


PAGE_ERRORS: list[str] = []  # what this test's pages logged as errors (``no_page_errors``)


@pytest.fixture(autouse=True)
def no_page_errors():
    """Every page a test opens logs no error (issue 24)."""
    PAGE_ERRORS.clear()
    yield
    assert not PAGE_ERRORS, f"the page logged errors: {PAGE_ERRORS[:5]}"


def _page(browser, url: str, username: str | None):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    if username:
        context.add_cookies([{"name": "session", "value": session_cookie(username), "url": url}])
    page = context.new_page()
    page.set_default_timeout(30_000)
    watch_errors(page, PAGE_ERRORS)
    page.goto(url)
    return page


def test_a_signed_in_stranger_checks_and_queues_from_the_train_tab(space, browser):
    page = _page(browser, space.url, "alice")
    expect(page.locator("#header-status")).to_contain_text("Signed in as alice", timeout=30_000)
    fill_settings(page, **{"Max steps": "3", "Batch size": "2", "Max length": "128"})
    page.locator("#check-button").click()
    result = page.locator("#queue-result")
    expect(result).to_contain_text("Pre-flight passed", timeout=60_000)
    page.locator("#queue-button").click()
    expect(result).to_contain_text("Queued", timeout=30_000)
    job_id = re.search(r"Queued (\S+)", result.inner_text()).group(1)
    expect(page.locator("#general-error")).to_have_text("")
    job = JobStore(DataPaths(space.data_dir).db).get(job_id)
    assert job.owner == "alice" and job.spec.training.max_steps == 3
    page.screenshot(path=ARTIFACTS / "space-train-signed-in.png", full_page=True)


def _pick_echo_environment(page) -> None:
    """GRPO of the random demo model (plumbing) on the echo prompts against the built-in echo environment, picked as
    a user does."""
    dataset = page.locator("#builtin-dataset input")
    pick_base_model(page, "builtin:tiny-qwen3")
    # Each pick sends the dataset picker new choices; typing in it before they land races Gradio's dropdown, which
    # then reads a choice past the end of the new list (a CI run's "Cannot read properties of undefined").
    expect(dataset).to_have_value("chat-demo")
    page.locator("#method").get_by_label("grpo").check()
    expect(dataset).to_have_value("math-demo")
    for box, value in (("#builtin-dataset input", "echo-demo"), ("#env-name input", "builtin:echo")):
        page.locator(box).fill(value)
        page.locator(box).press("Enter")
        expect(page.locator(box)).to_have_value(value)


def test_a_signed_in_stranger_dry_runs_an_environment(space, browser):
    page = _page(browser, space.url, "bob")
    expect(page.locator("#header-status")).to_contain_text("Signed in as bob", timeout=30_000)
    _pick_echo_environment(page)
    page.get_by_label("Max completion length", exact=True).fill("32")
    fill_settings(page, **{"Batch size": "4"})
    page.get_by_role("button", name="Dry run: play one episode").click()
    expect(page.locator("#dry-run-transcript")).to_contain_text(re.compile("reward", re.I), timeout=120_000)
    expect(page.locator("#environment-error")).to_have_text("")
    page.screenshot(path=ARTIFACTS / "space-dry-run.png", full_page=True)


def test_a_visitor_is_told_to_sign_in_and_queues_nothing(space, browser):
    store = JobStore(DataPaths(space.data_dir).db)
    before = len(store.list())
    page = _page(browser, space.url, None)
    expect(page.locator("#header-status")).to_contain_text("Not signed in", timeout=30_000)
    page.locator("#queue-button").click()
    expect(page.get_by_text("Sign in with Hugging Face first").first).to_be_visible(timeout=30_000)
    assert len(store.list()) == before


def test_a_signed_in_stranger_warms_up_on_an_environment_in_one_click(space, browser):
    store = JobStore(DataPaths(space.data_dir).db)
    page = _page(browser, space.url, "carol")
    expect(page.locator("#header-status")).to_contain_text("Signed in as carol", timeout=30_000)
    _pick_echo_environment(page)
    page.get_by_label("Max completion length", exact=True).fill("96")
    fill_settings(page, **{"Batch size": "4", "Max steps": "2"})
    page.locator("#warm-up-button").click()
    result = page.locator("#queue-result")
    expect(result).to_contain_text("demonstration episodes of echo_message", timeout=120_000)
    for box in ("#dataset-error", "#environment-error", "#general-error"):
        expect(page.locator(box)).to_have_text("")
    sft_id, grpo_id = re.findall(r"Queued (\S+) \(SFT warm-up\), then (\S+)", result.inner_text())[0]
    for job_id in (grpo_id, sft_id):  # the test needs the queue, not the training
        store.request_cancel(job_id)
    sft, grpo = store.get(sft_id), store.get(grpo_id)
    assert sft.owner == grpo.owner == "carol" and sft.spec.method == "sft"
    assert grpo.spec.model.parent_job_id == sft_id and grpo.spec.training.max_steps == 2
    upload = DataPaths(space.data_dir).uploads("carol") / sft.spec.dataset.name
    assert sft.spec.dataset.source == "upload" and upload.is_file(), "the demonstrations are carol's own upload"
    page.screenshot(path=ARTIFACTS / "space-warm-up.png", full_page=True)
