"""Sweeps in a real browser: the Jobs tab, when a child of a sweep is picked, shows the children's table with the best
marked, their scores against the learning rate, and "Clone the best into Train" fills the form with the best child's
settings; the Train form's sweep panel says a value that does not fit at the values, and queues one job per value.

The sweep's children are stored finished before the app starts (no training): one no change, one improved, one
failed."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from backend.api import StudioAPI
from backend.jobs.records import JobStatus
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.browser import BROWSER_MARKS, open_page, page_errors_per_test, pick_job
from tests.unit.jobs.test_sweeps import LR, SPEC, _finish
from tests.unit.ui.test_sweep_views import _rated

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def app(tmp_path_factory, models_dir):
    root = data_dir_with_models(tmp_path_factory.mktemp("browser-sweeps") / "data", models_dir)
    api = StudioAPI(root, scheduler="none")  # stored before the app's scheduler starts, so it never claims them
    try:
        report = api.sweeps.submit(SPEC, [f"{LR}=1e-6,5e-3,1e-3"]).report
        low, best, failed = (c.child.job_id for c in report.children)
        store = api.core.store
        _finish(store, low, JobStatus.succeeded, _rated(0.42, "no_change"))
        _finish(store, best, JobStatus.succeeded, _rated(0.55))
        _finish(store, failed, JobStatus.failed, error="the loss diverged")
    finally:
        api.close()
    with launch_app(root) as running:
        running.sweep_id, running.best, running.low = report.sweep.id, best, low
        yield running


@pytest.fixture(scope="module")
def page(app):
    with open_page(app.url) as page:
        yield page


no_new_page_errors = page_errors_per_test()


def test_a_childs_sweep_shows_its_table_plot_and_best_and_clones_the_best_into_train(page, app):
    page.get_by_role("tab", name="Jobs").click()
    box = page.locator("#sweep-box")
    pick_job(page, app.low)
    expect(box).to_be_visible()
    expect(page.locator("#sweep-summary")).to_contain_text(f"Sweep {app.sweep_id}")
    expect(page.locator("#sweep-summary")).to_contain_text(f"Best so far: {app.best} (learning_rate = 0.005)")
    table = page.locator("#sweep-table")
    expect(table).to_contain_text(re.compile(rf"{app.low}\s+1e-06\s+succeeded\s+no change\s+42.0%"))
    expect(table).to_contain_text(re.compile(rf"★ best\s+{app.best}\s+0.005\s+succeeded\s+improved\s+55.0%"))
    expect(table).to_contain_text(re.compile(r"0.001\s+failed"))
    expect(page.locator("#sweep-plot")).to_contain_text("log10(learning_rate)")
    expect(page.locator("#sweep-plot svg circle.point")).to_have_count(2)
    expect(page.locator("#cancel-sweep-button")).to_be_disabled()  # every child has ended

    page.locator("#clone-best-button").click()
    expect(page.locator("#job-action-note")).to_contain_text(f"Settings of {app.best} copied into the Train tab")
    page.get_by_role("tab", name="Train").click()
    page.get_by_text("4. Training settings, LoRA and quantization").click()
    expect(page.get_by_label("Learning rate", exact=True)).to_have_value("0.005")


def test_the_train_forms_sweep_says_a_bad_value_at_the_values_queues_one_job_per_value_and_cancels(page, app):
    page.get_by_role("tab", name="Train").click()
    page.get_by_text("Sweep: queue this job once per value of a field").click()
    values = page.locator("#sweep-values textarea")
    values.fill("1e-4, abc")
    page.locator("#sweep-button").click()
    note = page.locator("#sweep-note")
    expect(note).to_contain_text('Not queued: Learning rate: "abc" does not fit the field', timeout=30_000)

    field = page.locator("#sweep-field input")
    field.click()
    page.get_by_role("option", name="Max steps (training.max_steps)").click()
    values.fill("100000, 200000")  # long enough to be cancelled while the first one trains
    page.locator("#sweep-button").click()
    expect(note).to_contain_text("Queued sweep", timeout=30_000)
    expect(note).to_contain_text("2 jobs, one per value")
    sweep_id = re.search(r"Queued sweep (\S+):", note.inner_text()).group(1)
    first = re.search(r"(\d{8}-\d{6}-[0-9a-f]{6}): max_steps = 100000", note.inner_text()).group(1)

    page.get_by_role("tab", name="Jobs").click()
    pick_job(page, first)
    summary = page.locator("#sweep-summary")
    # (the panel is read once the pick's answer comes: under load, with the first child training, that takes seconds)
    expect(summary).to_contain_text(
        re.compile(rf"Sweep {sweep_id}: (queued|running), 0 of 2 children ended"), timeout=30_000
    )
    expect(page.locator("#clone-best-button")).to_be_disabled()
    page.locator("#cancel-sweep-button").click()
    expect(page.locator("#sweep-action-note")).to_contain_text(f"Sweep {sweep_id} cancelled")
    # the running child stops at its next step; the panel follows it on its own timer until then
    expect(summary).to_contain_text(f"Sweep {sweep_id}: cancelled, 2 of 2 children ended", timeout=90_000)
    expect(page.locator("#cancel-sweep-button")).to_be_disabled()
    api = StudioAPI(app.data_dir, scheduler="none")
    try:
        report = api.sweeps.get(sweep_id)
        assert [c.child.params["training.max_steps"] for c in report.children] == [100000, 200000]
        assert [c.status for c in report.children] == ["cancelled", "cancelled"]
    finally:
        api.close()


def test_the_sweep_panel_offers_the_picked_methods_fields(page):
    """Issue 47: the field list offered every method's fields on an SFT form, "beta" beside "Beta"."""
    page.get_by_role("tab", name="Train").click()
    field, method = page.locator("#sweep-field input"), page.locator("#method")
    if not field.is_visible():  # the panel is folded on a fresh page
        page.get_by_text("Sweep: queue this job once per value of a field").click()
    method.get_by_label("sft", exact=True).check()
    field.click()
    expect(page.get_by_role("option", name="Learning rate (training.learning_rate)")).to_be_visible()
    expect(page.get_by_role("option", name=re.compile(r"\((dpo|grpo|kto)\.beta\)"))).to_have_count(0)
    page.keyboard.press("Escape")
    method.get_by_label("dpo", exact=True).check()
    field.click()
    expect(page.get_by_role("option", name="Beta (dpo.beta)")).to_be_visible()
    page.get_by_role("option", name="Beta (dpo.beta)").click()
    expect(field).to_have_value("Beta (dpo.beta)")
    method.get_by_label("sft", exact=True).check()  # a field SFT lacks falls back to the learning rate
    expect(field).to_have_value("Learning rate (training.learning_rate)")
