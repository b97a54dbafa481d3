"""The Chat tab's 👍/👎 in a real browser: a thumb on either side's answer is a KTO row (one per side per turn), the A/B
"better" buttons still save DPO pairs, and each format downloads in one click as the file of what was clicked.

One app process and one page; a tiny SFT job (2 steps) is queued through the app's own API (/submit_spec) so the Chat
tab has a tuned model. The tests run in order and share the page.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.store import JobStore
from tests.helpers.apps import app_fixture
from tests.helpers.browser import (
    ARTIFACTS,
    BROWSER_MARKS,
    fill_settings,
    follow_job_link,
    open_chat_tab,
    pick_option,
    queue_job,
    reload,
    type_job,
    wait_in_jobs_tab,
)

pytestmark = BROWSER_MARKS

TINY_SFT = {
    "method": "sft",
    "model": {"name_or_path": "builtin:tiny-qwen3"},
    "training": {"max_steps": 2, "batch_size": 2, "max_length": 128},
}


app = app_fixture(finished_job=TINY_SFT)


@pytest.fixture(scope="module")
def page(app):
    with open_chat_tab(app.url) as page:
        # Sampled answers that differ, and turns that follow one another: Conversation (Compare answers greedily).
        page.locator("#chat-mode").get_by_text("Conversation").click()
        yield page


def _ask(page, text: str) -> None:
    """Send ``text`` to both models and wait until both answers have finished streaming."""
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()
    for side in ("base", "tuned"):
        expect(page.locator(f"#chat-{side} [data-testid='user']").last).to_have_text(text, timeout=15_000)
        expect(page.locator(f"#chat-{side} [data-testid='bot']").last).not_to_have_text("", timeout=120_000)
    expect(page.locator("#chat-tuned [data-testid='status-tracker']")).to_have_class(
        re.compile("hide"), timeout=120_000
    )


def _download(page, button: str) -> tuple[str, list[dict]]:
    """Click an export button once: the downloaded file's name and its rows."""
    with page.expect_download(timeout=15_000) as download:
        page.locator(button).click()
    with open(download.value.path(), encoding="utf-8") as fh:
        return download.value.suggested_filename, [json.loads(line) for line in fh]


def test_a_thumb_before_any_answer_records_nothing_and_says_so(page, app):
    expect(page.locator("#export-thumbs")).to_be_disabled()
    page.locator("#left-up").click()
    expect(page.locator("#chat-note")).to_contain_text("Nothing recorded: there is no answer yet; ask something first")
    assert not (app.data_dir / "thumbs").exists()
    expect(page.locator("#export-thumbs")).to_be_disabled()


def test_thumbs_on_both_sides_are_kto_rows_and_the_export_is_what_was_clicked(page, app):
    page.get_by_text("System prompt and sampling (the same for both sides)").click()
    max_tokens = page.get_by_label("number input for Max new tokens")
    max_tokens.fill("8")  # the demo model is random: it always talks until max tokens
    max_tokens.press("Tab")
    type_job(page, "#chat-job", app.job_id)
    expect(page.locator("#chat-job input")).to_have_value(re.compile(rf"^{app.job_id} · sft"))
    _ask(page, "Hi")

    note = page.locator("#chat-note")
    page.locator("#right-up").click()
    expect(note).to_contain_text("👍 on the tuned answer (1 KTO row so far: 1 👍, 0 👎; one thumb per side per turn)")
    expect(page.locator("#export-thumbs")).to_be_enabled()
    page.locator("#left-down").click()
    expect(note).to_contain_text("👎 on the base answer (2 KTO rows so far: 1 👍, 1 👎")
    page.locator("#right-down").click()  # the same answer again: the second thumb replaces the first
    expect(note).to_contain_text("Changed to 👎 on the tuned answer, replacing your 👍 (2 KTO rows so far: 0 👍, 2 👎")
    page.locator("#right-better").click()  # the A/B buttons still save a DPO pair, in their own file
    expect(note).to_contain_text("the tuned answer is better (1 preference row so far")

    _ask(page, "And again?")  # a new turn: its thumb is a new row, its prompt the conversation so far
    page.locator("#left-up").click()
    expect(note).to_contain_text("👍 on the base answer (3 KTO rows so far: 1 👍, 2 👎")

    name, exported = _download(page, "#export-thumbs")
    assert name == "local-kto.jsonl"
    assert [set(row) for row in exported] == [{"prompt", "completion", "label"}] * 3
    kept = [json.loads(line) for line in (app.data_dir / "thumbs" / "local.jsonl").read_text().splitlines()]
    assert [(r["side"], r["label"]) for r in kept] == [("tuned", False), ("base", False), ("base", True)]
    assert exported == [{k: r[k] for k in ("prompt", "completion", "label")} for r in kept]
    assert exported[0]["prompt"] == exported[1]["prompt"] == [{"role": "user", "content": "Hi"}]
    assert [m["role"] for m in exported[2]["prompt"]] == ["user", "assistant", "user"]
    assert exported[2]["prompt"][-1] == {"role": "user", "content": "And again?"}
    # Each completion is that side's answer: the base one also sits in the base side's next prompt.
    assert exported[2]["prompt"][1]["content"] == exported[1]["completion"][0]["content"]
    assert all(r["completion"][0]["role"] == "assistant" and r["completion"][0]["content"] for r in exported)

    name, pairs = _download(page, "#export-preferences")
    assert name == "local-dpo.jsonl" and len(pairs) == 1 and set(pairs[0]) == {"prompt", "chosen", "rejected"}
    assert pairs[0]["chosen"] == exported[0]["completion"] and pairs[0]["rejected"] == exported[1]["completion"]
    page.screenshot(path=ARTIFACTS / "chat-thumbs.png", full_page=True)


def test_while_the_answers_stream_the_judging_buttons_are_off(page, app):
    """A 👍 or a "better" pick on a half-written answer would record it: the buttons wait until both answers end.

    The page itself watches: every change to either answer's text while it streams is recorded with the judging
    buttons' state at that moment, so the check does not depend on how fast this machine streams (a sequential
    look at six buttons raced the stream's end on a loaded CI machine)."""
    max_tokens = page.get_by_label("number input for Max new tokens")
    max_tokens.fill("96")
    max_tokens.press("Tab")
    judges = ("#left-up", "#left-down", "#right-up", "#right-down", "#left-better", "#right-better")
    page.evaluate(
        """(judges) => {
        window.__judgeLog = [];
        const observer = new MutationObserver(() => {
            const turns = [...document.querySelectorAll(
                "#chat-base [data-testid='user'], #chat-base [data-testid='bot'], "
                + "#chat-tuned [data-testid='user'], #chat-tuned [data-testid='bot']")];
            const text = turns.map(t => t.textContent).join("\\n");
            const log = window.__judgeLog;
            if (log.length && log[log.length - 1].text === text) return;
            log.push({text, enabled: judges.filter(j => !document.querySelector(j).disabled)});
        });
        observer.observe(document.querySelector("#chat-base"), {subtree: true, childList: true, characterData: true});
        observer.observe(document.querySelector("#chat-tuned"), {subtree: true, childList: true, characterData: true});
        window.__judgeObserver = observer;
    }""",
        list(judges),
    )
    before = page.evaluate("""() => [...document.querySelectorAll("#chat-tuned [data-testid='bot']")].length""")
    page.locator("#chat-input textarea").fill("Tell me more")
    page.locator("#chat-send").click()
    expect(page.locator("#chat-tuned [data-testid='bot']")).to_have_count(before + 1, timeout=60_000)
    expect(page.locator("#chat-tuned [data-testid='bot']").last).not_to_have_text("", timeout=120_000)
    expect(page.locator("#chat-tuned [data-testid='status-tracker']")).to_have_class(
        re.compile("hide"), timeout=120_000
    )
    for button in judges:
        expect(page.locator(button)).to_be_enabled(timeout=30_000)
    log = page.evaluate("() => { window.__judgeObserver.disconnect(); return window.__judgeLog; }")
    streamed = [entry for entry in log if "Tell me more" in entry["text"]]
    assert len(streamed) >= 2, f"the question and the answers were seen on the page: {log}"
    on_while_streaming = [entry["enabled"] for entry in streamed if entry["enabled"]]
    assert not on_while_streaming, (
        f"judging buttons were on at {len(on_while_streaming)} of {len(streamed)} "
        f"changes of the answers, first {on_while_streaming[0]}"
    )


def test_a_returning_user_finds_both_exports_ready(page, app):
    reload(page)
    expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#export-thumbs")).to_be_enabled()
    expect(page.locator("#export-preferences")).to_be_enabled()
    name, exported = _download(page, "#export-thumbs")
    assert name == "local-kto.jsonl" and len(exported) == 3


def test_gradio_client_records_a_thumb_and_downloads_the_kto_file(app):
    client = app.client()
    base, tuned, _ = client.predict(app.job_id, "Hello", [], [], "", 0.7, 8, 0, api_name="/chat_send")
    note, ready = client.predict(app.job_id, base, tuned, "", api_name="/thumb_tuned_up")
    assert "👍 on the tuned answer (4 KTO rows so far: 2 👍, 2 👎" in note and ready
    with open(client.predict(api_name="/export_thumbs"), encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert rows[-1]["prompt"] == [{"role": "user", "content": "Hello"}] and rows[-1]["label"] is True


def test_the_thumbs_file_uploaded_in_the_train_tab_trains_a_kto_job_on_the_sft_adapter(page, app, tmp_path):
    """The loop closed in the browser: the thumbs export, uploaded as downloaded, is the data of a KTO job staged on
    the chatted-with SFT adapter; it runs to success and the Jobs tab draws its KTO loss."""
    reload(page)
    expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
    page.get_by_role("tab", name="Chat").click()
    with page.expect_download(timeout=15_000) as download:
        page.locator("#export-thumbs").click()
    exported = tmp_path / "local-kto.jsonl"
    download.value.save_as(exported)
    assert {json.loads(line)["label"] for line in exported.read_text(encoding="utf-8").splitlines()} == {True, False}

    page.get_by_role("tab", name="Train").click()
    pick_option(page, "#parent-job", app.job_id)
    page.locator("#method").get_by_label("kto").check()
    page.locator("#dataset-source").get_by_label("upload").check()
    page.locator("#dataset-upload input[type=file]").set_input_files(exported)
    # (the widget writes the name as stem and suffix apart: "local-kto .jsonl")
    expect(page.locator("#dataset-upload")).to_contain_text(re.compile(r"local-kto\s*\.jsonl"), timeout=30_000)
    expect(page.locator("#upload-note")).to_contain_text(
        "local-kto.jsonl: 4 rows, unpaired-preference format", timeout=30_000
    )
    expect(page.locator("#dataset-error")).to_have_text("")
    fill_settings(page, **{"Max steps": "2", "Batch size": "2", "Max length": "128"})
    kto_id = queue_job(page)
    store = JobStore(DataPaths(app.data_dir).db)
    job = store.get(kto_id)
    assert job.spec.method.value == "kto" and job.spec.model.parent_job_id == app.job_id
    follow_job_link(page, kto_id)
    wait_in_jobs_tab(page, store, kto_id, timeout_ms=300_000)
    expect(page.locator("#job-summary")).to_contain_text(f"Continues job {app.job_id}")
    expect(page.locator("#plot-main svg .axis-title").filter(has_text="KTO loss (nats)")).to_be_visible(
        timeout=30_000
    )  # (a margin needs good and bad rows in one batch: with 4 rows, batches may lack one)
    page.screenshot(path=ARTIFACTS / "chat-thumbs-kto-job.png", full_page=True)
