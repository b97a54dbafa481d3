"""Check forecasts a GRPO job in a real browser: "no signal" with its cause and the change in the form's own labels,
and sample completions, for a broken variant of the grpo demo recipe; "learnable" once the field is fixed. Then the
Jobs tab offers the forecast's answers, and "Clone with the suggested change" fills the Train form with it.

The form starts on builtin:tiny-qwen3-arith; picking GRPO fills in its demo recipe (examples/grpo-demo.yaml:
arith-prompts, the accuracy reward, 24 completion tokens). At 4 tokens no answer gets to its \\boxed{} result, every
group scores 0 alike, and the forecast names the cut. Forecast prompts is set to 8, the fewest "learnable" is said from.
"""

from __future__ import annotations

import re
import time

from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.store import JobStore
from tests.helpers.apps import app_fixture
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, page_fixture, pick_job

pytestmark = BROWSER_MARKS

FORECAST_WITHIN_MS = 120_000  # a worker loads the model and plays 8 prompts x 8 completions (some 10-40 s on a CPU)
FIRST_CHECK_MS = 60_000  # a fresh app's first Check (see the test)

app = app_fixture()
page = page_fixture(header=True)


def _answer(page, note, word: str) -> list[str]:
    """Wait for the forecast panel to say ``word``, collecting what it said on the way (its progress lines)."""
    said: list[str] = []
    deadline = time.monotonic() + FORECAST_WITHIN_MS / 1000
    while time.monotonic() < deadline:
        text = note.inner_text()
        if text and (not said or said[-1] != text):
            said.append(text)
        if f"Forecast: {word}" in text or "did not finish" in text or "not queued" in text:
            break
        page.wait_for_timeout(200)
    assert f"Forecast: {word}" in said[-1], said
    return said


def test_check_forecasts_no_signal_names_the_field_to_change_then_learnable_once_it_is_fixed(app, page):
    store = JobStore(DataPaths(app.data_dir).db)
    page.locator("#method").get_by_label("grpo").check()
    expect(page.locator("#builtin-dataset input")).to_have_value("arith-prompts")
    completion = page.get_by_label("Max completion length", exact=True)
    expect(completion).to_have_value("24")
    completion.fill("4")
    page.get_by_label("Forecast prompts", exact=True).fill("8")  # the fewest a "learnable" may be promised from
    expect(page.get_by_label("Train even with no signal", exact=True)).not_to_be_checked()

    page.locator("#check-button").click()
    # A fresh app's first Check imports transformers' tokenizer stack: 9.6 of its 10.3 s on an idle machine
    # (py-spy), and CI's run 61 saw it pass 20 s with the other test process training beside it.
    expect(page.locator("#queue-result")).to_contain_text("Pre-flight passed", timeout=FIRST_CHECK_MS)
    note = page.locator("#forecast-note")
    said = _answer(page, note, "no signal")
    assert any(re.search(r"🔮 (Forecast \S+ queued|Forecasting…)", text) for text in said[:-1]), said
    answer = said[-1]
    assert "cut at 4 tokens" in answer and "raise Max completion length to 96" in answer, answer
    assert "0 of 8 groups scored differently" in answer, answer
    samples = page.locator("#forecast-samples")
    expect(samples).to_be_visible()
    expect(samples).to_contain_text("reward")
    expect(samples.locator("tbody tr").first).to_contain_text(re.compile(r"\d"))
    page.screenshot(path=ARTIFACTS / "train-forecast-no-signal.png", full_page=True)
    (stopped,) = [job for job in store.list() if job.spec.forecast.only]
    assert stopped.artifacts.forecast.forecast == "no_signal" and stopped.spec.rollout.max_completion_length == 4

    completion.fill("24")
    page.locator("#check-button").click()
    answer = _answer(page, note, "learnable")[-1]
    assert "enough groups scored differently" in answer and "cut at 24 tokens" in answer, answer
    page.screenshot(path=ARTIFACTS / "train-forecast-learnable.png", full_page=True)

    # The first forecast in the Jobs tab: its line, and the change it suggests cloned into the Train form.
    page.get_by_role("tab", name="Jobs").click()
    pick_job(page, stopped.id)
    summary = page.locator("#job-summary")
    expect(summary).to_contain_text("Forecast: no signal")
    expect(summary).to_contain_text("raise Max completion length to 96")
    expect(page.locator("#train-anyway-button")).to_be_visible()
    page.locator("#clone-suggested-button").click()
    expect(page.locator("#job-action-note")).to_contain_text(
        "with the forecast's suggested change: raise Max completion length to 96"
    )
    page.get_by_role("tab", name="Train").click()
    expect(completion).to_have_value("96")
