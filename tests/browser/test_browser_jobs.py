"""The Jobs tab in a real browser as a dashboard: empty state, small-multiple plots with legends, units and whole
steps, the log as rows, buttons by state, "Cancelled at step N", the adapter download, the compare view and GRPO
samples with each reward.

One app process (its data dir outside the working directory and its temp folder, as on a Space), one page; the tests
run in order and pass job ids along in STATE. Jobs are queued through the app's own API (/submit_spec); the Train
form itself is covered by tests/browser/test_browser.py.
"""

from __future__ import annotations

import json
import re
import zipfile

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import tiny_spec, wait_for
from tests.helpers.apps import app_fixture
from tests.helpers.browser import (
    ARTIFACTS,
    BROWSER_MARKS,
    expect_legend,
    jobs_tab_ticks,
    page_errors_per_test,
    page_fixture,
    pick_job,
    wait_until,
)

pytestmark = BROWSER_MARKS

STATE: dict[str, str] = {}


app = app_fixture()


@pytest.fixture(scope="module")
def store(app) -> JobStore:
    """The module app's store (its data dir, not the test's own): the conftest ``store`` is the test's."""
    return JobStore(DataPaths(app.data_dir).db)


page = page_fixture()


# Issue 24: 48 offsetWidth errors while reloading, cancelling, comparing and pushing.
no_new_page_errors = page_errors_per_test()


def _submit(app, spec: dict) -> str:
    return app.client().predict(json.dumps(spec), api_name="/submit_spec")


def _need(*keys: str) -> list[str]:
    if any(k not in STATE for k in keys):
        pytest.skip("needs the jobs queued by the earlier tests")
    return [STATE[k] for k in keys]


def _whole_steps(page, plot_id: str) -> None:
    """The plot's step axis is labelled in whole steps (not 1.0, 1.5, 2.0)."""
    x_ticks = page.locator(f"#{plot_id} svg .axis-x .tick-label")
    expect(x_ticks.first).to_be_attached()
    ticks = x_ticks.all_text_contents()
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), f"{plot_id}: steps not whole: {ticks}"


def test_an_empty_jobs_tab_says_what_to_do_and_draws_no_empty_plots(page):
    page.get_by_role("tab", name="Jobs").click()
    expect(page.locator("#jobs-empty")).to_contain_text("No jobs yet: queue one in the Train tab")
    expect(page.locator("#jobs-table")).to_be_hidden()
    expect(page.locator("#job-detail")).to_be_hidden()
    expect(page.locator("#plot-main")).to_be_hidden()


def test_an_sft_job_reads_like_a_dashboard_and_its_adapter_downloads(page, app, store):
    short = _submit(
        app,
        tiny_spec(
            output={"run_name": "sft-short"},
            training={"max_steps": 6, "batch_size": 2, "max_length": 128, "save_steps": 3},
        ),
    )
    long = _submit(
        app,
        tiny_spec(
            output={"run_name": "sft-long"},
            training={"max_steps": 5000, "batch_size": 2, "max_length": 128, "save_steps": 1},
        ),
    )
    # It continues from the long job's adapter, so it stays queued until that one ends (the next test cancels it),
    # however fast a worker starts: one forked from the pre-imported pool trains within a second of its submit.
    waiting = _submit(
        app,
        tiny_spec(model={"parent_job_id": long}, output={"run_name": "sft-waiting"}, training={"max_steps": 2}),
    )
    STATE.update(short=short, long=long)
    expect(page.locator("#jobs-empty")).to_be_hidden(timeout=10_000)
    table = page.locator("#jobs-table")
    expect(table).to_contain_text("run name")
    expect(table).to_contain_text("sft-short")

    # A queued job: only Cancel makes sense, and it takes the job out of the queue.
    pick_job(page, waiting)
    expect(page.locator("#job-summary")).to_contain_text("· queued ·")
    for button in ("#resume-button", "#push-button", "#prepare-download-button"):
        expect(page.locator(button)).to_be_disabled()
    page.locator("#cancel-button").click()
    expect(page.locator("#job-summary")).to_contain_text("· cancelled ·", timeout=30_000)
    assert store.get(waiting).status is JobStatus.cancelled

    pick_job(page, short)
    summary = page.locator("#job-summary")
    expect(summary).to_contain_text(
        re.compile(r"· (succeeded|failed|cancelled|interrupted)( - [a-z ]+)? ·"), timeout=240_000
    )
    assert store.get(short).status is JobStatus.succeeded, store.get(short).error
    # One read per tick: the table's progress and the detail's agree.
    expect(page.locator("#job-progress .studio-progress")).to_have_attribute("data-fraction", "1.000")
    expect(table).to_contain_text(re.compile(rf"{short}\s+sft-short\s+local\s+succeeded"))
    expect(table).to_contain_text("6/6")
    for button in ("#push-button", "#prepare-download-button"):
        expect(page.locator(button)).to_be_enabled()
    for button in ("#cancel-button", "#resume-button"):
        expect(page.locator(button)).to_be_disabled()

    # One plot per family, each legend readable: the smoothed loss and its faint raw line.
    expect_legend(page, "plot-main", ["loss", "loss (raw)"])
    expect(page.locator("#plot-lr")).to_be_visible()
    expect(page.locator("#plot-token-accuracy")).to_be_visible()
    expect_legend(page, "plot-lr", ["learning rate"])
    expect(page.locator("#plot-main svg .axis-title").filter(has_text="cross-entropy (nats/token)")).to_have_count(1)
    for plot_id in ("plot-main", "plot-lr", "plot-throughput"):  # the last one alone on its row: full width
        _whole_steps(page, plot_id)

    # The log as rows of the metrics that matter for SFT; the raw log one click away.
    rows = page.locator("#job-log-rows")
    for header in ("time", "step", "loss", "token acc", "lr", "grad norm"):
        expect(rows.locator("thead")).to_contain_text(header)
    expect(rows).to_contain_text(re.compile(r"\d\d:\d\d:\d\d\s+6\s+\d"))
    steps = re.findall(r"\d\d:\d\d:\d\d\s+(\d+)\s", rows.inner_text())
    assert steps == ["6", "5", "4", "3", "2", "1"], steps  # newest first
    expect(rows).not_to_contain_text("{'loss'")
    page.get_by_text("Raw log").click()
    expect(page.locator("#job-log textarea")).to_have_value(re.compile("succeeded"))

    # The adapter zip is made on request into the downloads folder, and downloads.
    expect(page.locator("#download-button")).to_be_hidden()
    page.locator("#prepare-download-button").click()
    expect(page.locator("#job-action-note")).to_contain_text("Adapter zip ready")
    with page.expect_download() as download:
        page.locator("#download-button").click()
    path = download.value.path()
    assert "adapter_config.json" in zipfile.ZipFile(path).namelist()
    assert download.value.suggested_filename == "adapter-sft-short.zip"


def test_cancelling_a_running_job_reads_cancelled_at_step_n_and_offers_resume(page, store):
    (long,) = _need("long")
    pick_job(page, long)
    wait_for(lambda: (store.get(long).progress or {}).get("step", 0) >= 2, 180, 0.5, "the long job's second step")
    expect(page.locator("#job-summary")).to_contain_text("· running ·")
    expect(page.locator("#resume-button")).to_be_disabled()
    page.locator("#cancel-button").click()
    summary = page.locator("#job-summary")
    expect(summary).to_contain_text(re.compile(r"Cancelled at step \d+"), timeout=90_000)
    expect(summary).not_to_contain_text("Error")
    expect(summary).not_to_contain_text("stopped by request")
    expect(page.locator("#resume-button")).to_be_enabled()  # it saved a checkpoint every step
    expect(page.locator("#cancel-button")).to_be_disabled()


def test_compare_overlays_the_loss_of_two_jobs(page):
    short, long = _need("short", "long")
    page.get_by_text("Compare jobs").click()
    chooser = page.locator("#compare-jobs input")
    for job_id in (short, long):
        chooser.click()
        page.get_by_role("option", name=re.compile(re.escape(job_id))).click()
    expect_legend(page, "compare-plot", ["sft-short", "sft-long"])
    _whole_steps(page, "compare-plot")


def test_a_grpo_job_shows_its_samples_per_reward_and_no_dead_environment_link(page, app, store):
    grpo = _submit(
        app,
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "echo-demo"},
            output={"run_name": "grpo-echo"},
            environment={"name": "builtin:echo", "eval_episodes": 0, "max_tool_calling_iterations": 1},
            grpo={
                "num_generations": 2,
                "max_completion_length": 16,
                "rewards": [{"name": "length", "target_length": 4, "unit": "chars"}],
            },
            training={"max_steps": 2, "batch_size": 2, "max_length": 256, "save_steps": 100},
            forecast={"train_anyway": True},  # the random model never calls the tool: no signal, trained anyway
        ),
    )
    pick_job(page, grpo)
    summary = page.locator("#job-summary")
    expect(summary).to_contain_text(
        re.compile(r"· (succeeded|failed|cancelled|interrupted)( - [a-z ]+)? ·"), timeout=300_000
    )
    assert store.get(grpo).status is JobStatus.succeeded, store.get(grpo).error
    expect(summary).to_contain_text("Environment: builtin:echo")
    expect(summary).not_to_contain_text("127.0.0.1")
    assert "127.0.0.1" in str(store.get(grpo).artifacts.environment), "the server ran on a local port"

    samples = page.locator("#job-samples")
    expect(samples).to_be_visible()
    headers = [h.strip() for h in samples.locator("thead th").all_inner_texts() if h.strip()]
    assert headers[:3] == ["step", "prompt", "completion"] and headers[-2:] == ["total", "advantage"], headers
    assert "length" in headers and len(headers) >= 7, headers  # the length reward and the environment's
    best = page.locator("#job-samples-best")
    expect(best).to_contain_text("Step 2")
    expect(best).to_contain_text("Best")
    expect(best).to_contain_text("Worst")
    expect(page.locator("#plot-reward .legend-label").first).to_have_text("reward (mean)")
    expect(page.locator("#plot-length")).to_be_visible()
    expect(page.locator("#plot-token-accuracy")).to_be_hidden()
    rows = page.locator("#job-log-rows thead")
    for header in ("reward", "kl", "length (tokens)"):
        expect(rows).to_contain_text(header)


def test_the_jobs_tab_ticks_only_while_open_and_resends_nothing_that_did_not_change(page, app):
    """An open page costs little: the Jobs tab's 2 s refresh runs only while that tab is open, and a finished job's
    plots, samples and log reach the browser once, not at every tick. (Before, an idle page ticked on every tab and
    redrew every plot each time: its Chromium took about a quarter of a core, on the Train tab too.)"""
    with jobs_tab_ticks(page, app.url) as ticks:
        page.get_by_role("tab", name="Jobs").click()
        wait_until(page, lambda: len(ticks.answers) >= 2, 20, "two ticks of the open Jobs tab")
        assert max(ticks.answers) < 2_000, f"a tick resent what the page already shows: {ticks.answers} bytes"
        page.get_by_role("tab", name="Train").click()
        page.wait_for_timeout(3_000)  # the pause reaches the page; a tick sent before it may still be answered
        before = ticks.sent
        page.wait_for_timeout(4_000)
        assert ticks.sent == before, "the Jobs tab ticked while the Train tab was open"
        page.get_by_role("tab", name="Jobs").click()
        wait_until(page, lambda: ticks.sent > before, 15, "the Jobs tab to follow its jobs again")


def test_the_app_log_has_no_traceback_and_a_screenshot_is_left(page, app):
    page.screenshot(path=ARTIFACTS / "jobs-dashboard.png", full_page=True)
    log = app.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "InvalidPathError" not in log, log[-4000:]
