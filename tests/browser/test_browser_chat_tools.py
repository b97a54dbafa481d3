"""Tool calls in the Chat tab, in a real browser: a tuned answer with a tool call shows as a "Tool call" block (not the
call's raw markup), "Run tool calls" plays it in the job's environment (the built-in arithmetic server) and shows the
environment's answer as the next turn, and a 👍 on that answer records the answer as it streamed.

The job is stored as finished before the app starts (no training): builtin:tiny-qwen3-arith with an adapter taught to
answer the question with a submit_answer call (tests/unit/chat/test_chat_tool_calls.py ``build_tool_adapter``)."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from backend.api import StudioAPI
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, open_chat_tab, type_job
from tests.unit.chat.test_chat_tool_calls import QUESTION, SAID, build_tool_adapter, environment_spec, finished_job

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def app(tmp_path_factory, models_dir):
    root = data_dir_with_models(tmp_path_factory.mktemp("browser-chat-tools") / "data", models_dir)
    adapter = build_tool_adapter(tmp_path_factory.mktemp("tool-adapter") / "adapter")
    api = StudioAPI(root, scheduler="none")  # stored before the app's scheduler starts, so it never claims it
    try:
        job_id = finished_job(api, environment_spec(), adapter)
    finally:
        api.close()
    with launch_app(root) as running:
        running.job_id = job_id
        yield running


@pytest.fixture(scope="module")
def page(app):
    with open_chat_tab(app.url) as page:
        yield page


def test_a_tool_call_shows_as_a_block_runs_in_the_environment_and_a_thumb_records_the_answer(page, app):
    # Compare, the Chat tab's mode, answers greedily: the temperature is off, and needs no setting.
    expect(page.locator("#chat-tools")).to_be_hidden()
    type_job(page, "#chat-job", app.job_id)
    expect(page.locator("#chat-job input")).to_have_value(re.compile(rf"^{app.job_id} · grpo"))
    expect(page.locator("#chat-tools")).to_be_visible()
    expect(page.locator("#chat-tools-info")).to_contain_text("builtin:arithmetic")

    page.locator("#chat-input textarea").fill(QUESTION)
    page.locator("#chat-send").click()
    tuned, base = page.locator("#chat-tuned"), page.locator("#chat-base")
    expect(tuned).to_contain_text("Tool call: submit_answer", timeout=120_000)
    expect(tuned).to_contain_text(SAID.replace("\\boxed{50}", ""))  # the answer's text, apart from its call
    expect(tuned).to_contain_text('"answer": 50')  # the arguments, pretty-printed
    expect(tuned).not_to_contain_text('"name"')  # not the call as the model wrote it
    expect(tuned).not_to_contain_text("<tool_call>")
    expect(base).not_to_contain_text("Tool call")
    expect(page.locator("#chat-run-tools")).to_be_enabled(timeout=30_000)

    page.locator("#chat-run-tools").click()
    expect(tuned).to_contain_text("submit_answer answered", timeout=60_000)
    expect(tuned).to_contain_text("Correct! 25 + 25 = 50.")  # the environment's own answer
    expect(tuned).to_contain_text("New episode")
    note = page.locator("#chat-note")
    expect(note).to_contain_text("Ran the tuned side's 1 tool call in a new episode; the episode is over (reward 1)")
    page.screenshot(path=ARTIFACTS / "chat-tool-calls.png", full_page=True)

    page.locator("#chat-run-tools").click()  # the calls ran: nothing is run twice
    expect(note).to_contain_text("No tool calls to run")

    page.locator("#right-up").click()
    expect(note).to_contain_text("👍 on the tuned answer (1 KTO row so far")
    (row,) = [json.loads(line) for line in (app.data_dir / "thumbs" / "local.jsonl").read_text().splitlines()]
    answer = row["completion"][0]["content"]
    assert answer.startswith(SAID) and '"name": "submit_answer"' in answer, answer  # as it streamed
    assert row["prompt"] == [{"role": "user", "content": QUESTION}]
    assert "Tool call" not in answer and "Correct!" not in answer
    assert "Traceback" not in app.log_tail(20_000)


def test_gradio_client_gets_the_blocks_runs_the_calls_and_a_second_turn_reads_them(app):
    """The same through the API, as a script drives it: the client's session keeps each side's conversation (a
    gr.State, which the client never sends), so the judging and the next turn see the answers and the tool's."""
    client = app.client()
    base, tuned, _ = client.predict(app.job_id, QUESTION, [], [], "", 0.0, 64, 0, api_name="/chat_send")
    titles = [(m.get("metadata") or {}).get("title") for m in tuned]
    assert titles[-1] == "🛠 Tool call: submit_answer" and '"answer": 50' in str(tuned[-1]["content"])
    base, tuned, note = client.predict(app.job_id, "tuned", base, tuned, api_name="/chat_run_tools")
    assert (tuned[-1]["metadata"] or {})["title"] == "🔧 submit_answer answered"
    assert "Correct! 25 + 25 = 50." in str(tuned[-1]["content"]) and "Ran the tuned side's 1 tool call" in note
    note, _ = client.predict(app.job_id, base, tuned, "", api_name="/thumb_tuned_down")
    assert "👎 on the tuned answer" in note
    rows = [json.loads(line) for line in (app.data_dir / "thumbs" / "local.jsonl").read_text().splitlines()]
    assert rows[-1]["completion"][0]["content"].startswith(SAID) and rows[-1]["label"] is False

    # The next turn: each side's model reads its own call and the tool's answer (rendered by its chat template).
    base, tuned, _ = client.predict(
        app.job_id, "Thanks!", base, tuned, "", 0.0, 16, 0, "conversation", api_name="/chat_send"
    )
    assert [m["role"] for m in tuned][-2:] == ["user", "assistant"] and tuned[-1]["content"]
    assert "Traceback" not in app.log_tail(20_000)
