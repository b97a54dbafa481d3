"""The Train and Chat tabs as a new user meets them (issue 13), in a real browser against the app process.

One app process and one page for the module; the tests run in order: an empty Chat tab, help in the UI's words (the
form starts on builtin:tiny-qwen3-arith), the reward bench, an upload with differently named columns queued as SFT of
the random demo model, then chatting with that job (its loss and
evaluation beside the answers, one preference per turn, a one-click export) and continuing from it. Screenshots of
both tabs are left in tests/artifacts/.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import wait_status
from tests.helpers.apps import app_fixture
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, fill_settings, page_fixture, type_job

pytestmark = BROWSER_MARKS

STATE: dict[str, str] = {}
# A dotted spec path as the spec and CLI name fields (model.parent_job_id, dataset.columns, training.max_steps, ...).
SPEC_PATH = re.compile(
    r"\b(model|dataset|columns|sft|dpo|grpo|environment|training|lora|quantization|eval|output)"
    r"\.[a-z_]+"
)


app = app_fixture()


page = page_fixture(header=True)


@pytest.fixture()
def store(app) -> JobStore:
    """The module app's store (its data dir, not the test's own): the conftest ``store`` is the test's."""
    return JobStore(DataPaths(app.data_dir).db)


def _job_id() -> str:
    if "job_id" not in STATE:
        pytest.skip("needs the job queued by test_an_upload_with_other_column_names_is_mapped_and_queued")
    return STATE["job_id"]


def test_an_empty_chat_tab_says_to_train_a_job_first(page):
    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#chat-job-info")).to_contain_text("Train a job first; finished jobs appear here")
    # Said once: the empty chat panes said it too, three times in all (issue 37).
    expect(page.get_by_text("Train a job first")).to_have_count(1)
    expect(page.locator("#export-preferences")).to_be_disabled()
    page.get_by_role("tab", name="Train").click()


def test_a_typed_hub_id_is_kept_on_enter_and_an_arrow_key_still_picks(page, app):
    """Issue 24: Enter swapped a typed id for the nearest curated entry (Tab kept it)."""
    field = page.locator("#base-model input")
    for typed in ("Qwen/Qwen2.5-0.5B-Instruc", "builtin:tiny-qwen3"):  # a prefix of a curated entry, and one exactly
        field.click()
        field.fill(typed)
        field.press("Enter")
        expect(field).to_have_value(typed)
        expect(page.locator("#model-notice")).to_contain_text("random tiny model" if typed.startswith("b") else "")
    field.click()
    field.fill("builtin:tiny-qwen3")
    field.press("ArrowDown")  # the first offered entry, chosen with the keys
    field.press("Enter")
    expect(field).not_to_have_value("builtin:tiny-qwen3")
    page.locator("#base-model input").click()
    field.fill("builtin:tiny-qwen3-arith")
    page.get_by_role("option", name="builtin:tiny-qwen3-arith", exact=True).click()  # as the page started
    expect(field).to_have_value("builtin:tiny-qwen3-arith")


def test_train_tab_help_uses_the_ui_words_and_the_arith_model_is_labelled(page):
    notice = page.locator("#model-notice")
    expect(notice).to_contain_text("builtin:tiny-qwen3-arith is a tiny model pre-trained")
    expect(notice).to_contain_text("about two in five unseen problems right")
    expect(notice).to_contain_text("filled in with ones measured to make it learn")
    dataset = page.locator("#builtin-dataset")
    expect(dataset).to_contain_text("arith-sft: 1000 arithmetic chats")

    # Every method's fields and the settings accordion open: no help text names a spec path.
    page.get_by_text("4. Training settings, LoRA and quantization").click()
    expect(page.get_by_label("Held-out rows (before/after evaluation)")).to_be_visible()
    for method in ("dpo", "grpo"):
        page.locator("#method").get_by_label(method).check()
        expect(page.locator("#method").get_by_label(method)).to_be_checked()
    # The built-in dataset's help follows the pick (grpo on the arith model picks arith-prompts).
    expect(dataset.locator("input")).to_have_value("arith-prompts")
    expect(dataset).to_contain_text("arith-prompts: 1000 arithmetic prompts")
    texts = page.locator(".info-text").all_inner_texts()  # Gradio's help line under each field's label
    assert len(texts) >= 25, texts
    visible_help = "\n".join(texts)
    leaks = sorted(set(m.group(0) for m in SPEC_PATH.finditer(visible_help)))
    assert not leaks, f"help text names spec paths: {leaks}"
    assert "overrides the fraction" not in page.content()
    page.locator("#method").get_by_label("sft").check()
    expect(dataset.locator("input")).to_have_value("arith-sft")
    expect(dataset).to_contain_text("arith-sft: 1000 arithmetic chats")
    page.get_by_text("4. Training settings, LoRA and quantization").click()  # closed again, as fill_settings expects


def test_problems_show_under_their_fields_in_their_words_and_checks_answer_by_its_button(page, store):
    """Issue 24: "training.learning_rate: must be less than 1" sat under the section, a screen from Check, and the
    folded settings hid which field it meant."""
    queued_before = len(store.list())
    page.get_by_text("4. Training settings, LoRA and quantization").click()
    was = {label: page.get_by_label(label, exact=True).input_value() for label in ("Learning rate", "Max steps")}
    fill_settings(page, **{"Learning rate": "1000000000", "Max steps": "0"})
    page.get_by_text("4. Training settings, LoRA and quantization").click()  # folded again: Check must unfold it
    expect(page.get_by_label("Learning rate", exact=True)).to_be_hidden()
    check = page.locator("#check-button")
    check.click()
    answer = page.locator("#queue-result")
    expect(answer).to_contain_text("The pre-flight did not pass: see Max steps (4. Training settings)", timeout=30_000)
    expect(answer).to_contain_text("Learning rate (4. Training settings)")
    rate_box, steps_box = page.locator("#field-error-learning-rate"), page.locator("#field-error-max-steps")
    expect(rate_box).to_contain_text("Learning rate must be below 1; you gave 1000000000 (training.learning_rate)")
    expect(steps_box).to_contain_text("Max steps must be above 0; you gave 0")
    expect(page.locator("#settings-error")).to_have_text("")  # said once, at the field
    # Under its field (the fields unfolded), and the answer right under the button that asked.
    field = page.get_by_label("Learning rate", exact=True).bounding_box()
    box = rate_box.bounding_box()
    assert abs(box["x"] - field["x"]) < 40 and 0 <= box["y"] - (field["y"] + field["height"]) < 60, (field, box)
    button, said = check.bounding_box(), answer.bounding_box()
    assert 0 <= said["y"] - (button["y"] + button["height"]) < 60, (button, said)
    assert len(store.list()) == queued_before

    fill_settings(page, **was)
    check.click()
    expect(answer).to_contain_text("Pre-flight passed", timeout=30_000)
    expect(rate_box).to_be_hidden()
    expect(steps_box).to_be_hidden()
    page.get_by_text("4. Training settings, LoRA and quantization").click()  # closed again, as fill_settings expects


def test_the_reward_bench_scores_typed_completions(page):
    page.locator("#method").get_by_label("grpo").check()
    page.get_by_text("Reward test bench: score completions before training").click()
    page.get_by_label("Completions, one per line").fill("The answer is $32$\nno idea")
    page.get_by_role("button", name="Score", exact=True).click()
    table = page.locator("#bench-scores")
    # The default reward (accuracy) reads the first row of arith-prompts (12 + 20): a number per reward and
    # completion.
    expect(table).to_contain_text("no idea")
    text = table.inner_text()
    assert re.search(r"completion\s+accuracy\s+total", text), text
    assert re.search(r"The answer is \$32\$\s+1\.000\s+1\.000", text), text
    assert re.search(r"no idea\s+(\d\.\d{3}|-)\s+\d\.\d{3}", text), text
    expect(page.locator("#bench-note")).to_contain_text("Scored against the dataset's first row")
    expect(page.get_by_text("Error", exact=True)).to_have_count(0)
    page.locator("#method").get_by_label("sft").check()


def _upload(page, path) -> None:
    page.locator("#dataset-upload input[type=file]").set_input_files(path)


def test_an_upload_with_other_column_names_is_mapped_and_queued(page, store, tmp_path):
    rows = "question,answer\n" + "".join(f"What is {i} plus {i}?,{2 * i}\n" for i in range(16))
    first, second = tmp_path / "qa.csv", tmp_path / "qa2.csv"
    first.write_text(rows)
    second.write_text(rows)
    # Plumbing, not learning: the random demo model (its job trains in seconds), picked as a user does.
    base = page.locator("#base-model input")
    base.click()
    base.fill("builtin:tiny-qwen3")
    page.get_by_role("option", name="builtin:tiny-qwen3", exact=True).click()
    expect(page.locator("#model-notice")).to_contain_text("builtin:tiny-qwen3 is a random tiny model")
    page.locator("#dataset-source").get_by_label("upload").check()
    dataset_error = page.locator("#dataset-error")
    mapping = page.locator("#column-map input, #column-map textarea").first

    # The Column mapping first, then the upload: accepted at once.
    mapping.fill("prompt=question, completion=answer")
    mapping.press("Tab")
    _upload(page, first)
    # While the file is checked (in a child process, seconds), Queue waits: clicked meanwhile, it would read no
    # upload yet, and the check's answer would then clear its refusal (a Queue that silently did nothing).
    queue = page.locator("#queue-button")
    expect(queue).to_be_disabled(timeout=10_000)
    expect(page.get_by_text("qa.csv: 16 rows, prompt-completion format")).to_be_visible(timeout=30_000)
    expect(queue).to_be_enabled()
    expect(dataset_error).to_have_text("")

    # The upload first: kept, with a sentence in the UI's words saying what to fill; filling it makes it usable.
    page.locator("#dataset-upload").get_by_role("button", name=re.compile("clear", re.I)).click()
    mapping.fill("")
    mapping.press("Tab")
    _upload(page, second)
    expect(page.get_by_text("qa2.csv: kept; usable for SFT once its columns are mapped")).to_be_visible(timeout=30_000)
    expect(dataset_error).to_contain_text("“Column mapping”")
    expect(dataset_error).to_contain_text("prompt=question, completion=answer")
    assert not SPEC_PATH.search(dataset_error.inner_text()), dataset_error.inner_text()
    # A wrong mapping, fixed at once while it is still being checked: the fix is answered last, not dropped.
    mapping.fill("prompt=question, completion=nope")
    mapping.press("Tab")
    mapping.fill("prompt=question, completion=answer")
    mapping.press("Tab")
    expect(dataset_error).to_have_text("", timeout=30_000)
    expect(page.get_by_text("qa2.csv: 16 rows, prompt-completion format")).to_be_visible()

    fill_settings(
        page,
        **{"Max steps": "4", "Batch size": "2", "Max length": "128", "Held-out rows (before/after evaluation)": "4"},
    )
    page.locator("#queue-button").click()
    result = page.locator("#queue-result")
    expect(result).to_contain_text("Queued", timeout=60_000)
    job_id = re.search(r"Queued (\S+)", result.inner_text()).group(1)
    link = result.get_by_role("link", name=job_id)
    assert link.get_attribute("href") == f"?job={job_id}"
    spec = store.get(job_id).spec
    assert spec.dataset.source == "upload" and spec.dataset.name.endswith("-qa2.csv")
    assert spec.dataset.columns == {"prompt": "question", "completion": "answer"}
    STATE["job_id"] = job_id
    page.screenshot(path=ARTIFACTS / "forms-train.png", full_page=True)


def _bubble(page, side: str):
    return page.locator(f"#chat-{side} [data-testid='bot']").last


def test_chat_shows_the_jobs_loss_and_evaluation_and_keeps_one_preference_per_turn(page, store, app):
    job_id = _job_id()
    job = wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed}, timeout=300)
    assert job.status is JobStatus.succeeded, job.error
    page.get_by_role("tab", name="Chat").click()
    page.get_by_text("System prompt and sampling (the same for both sides)").click()
    max_tokens = page.get_by_label("number input for Max new tokens")
    max_tokens.fill("8")
    max_tokens.press("Tab")
    type_job(page, "#chat-job", job_id)

    info = page.locator("#chat-job-info")
    expect(info).to_contain_text("random tiny model")
    expect(info).to_contain_text("cannot give sensible answers")
    expect(info).to_contain_text(re.compile("The verdict's metric:|No learning verdict"))
    expect(info).not_to_contain_text("Training loss")
    expect(info).to_contain_text("Before/after on 4 held-out rows")

    # A pick needs answers that differ: sampled ones (Conversation); Compare answers greedily on both sides.
    page.locator("#chat-mode").get_by_text("Conversation").click()
    page.locator("#chat-input textarea").fill("Hi")
    page.locator("#chat-send").click()
    for side in ("base", "tuned"):
        expect(_bubble(page, side)).not_to_have_text("", timeout=120_000)
    expect(page.locator("#chat-tuned [data-testid='status-tracker']")).to_have_class(
        re.compile("hide"), timeout=120_000
    )
    # Layout: a short answer is a wide, low box (not a one-word-wide column), and nothing covers the question.
    pane = page.locator("#chat-base").bounding_box()
    bubble = _bubble(page, "base").bounding_box()
    assert bubble["width"] >= 0.5 * pane["width"], (bubble, pane)
    assert bubble["height"] < bubble["width"], bubble
    question = page.locator("#chat-base [data-testid='user']").last.bounding_box()
    labels = page.locator("#chat-base [data-testid='block-label']")
    for i in range(labels.count()):
        box = labels.nth(i).bounding_box()
        if box:
            assert box["y"] + box["height"] <= question["y"] or box["y"] >= question["y"] + question["height"], (
                box,
                question,
            )

    note = page.locator("#chat-note")
    log = app.data_dir / "preferences" / "local.jsonl"

    def rows() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()]

    page.locator("#left-better").click()
    expect(note).to_contain_text("Saved: the base answer is better (1 preference row so far")
    (base_pick,) = rows()
    page.locator("#right-better").click()
    expect(note).to_contain_text("Changed your pick for this turn: the tuned answer is better (1 preference row so far")
    (tuned_pick,) = rows()  # replaced, not added: the sides swapped
    assert (tuned_pick["chosen"], tuned_pick["rejected"]) == (base_pick["rejected"], base_pick["chosen"])

    with page.expect_download(timeout=15_000) as download:
        page.locator("#export-preferences").click()
    exported = [json.loads(line) for line in open(download.value.path(), encoding="utf-8")]
    assert len(exported) == 1 and set(exported[0]) == {"prompt", "chosen", "rejected"}
    assert exported[0]["prompt"][-1] == {"role": "user", "content": "Hi"}
    files = list((app.data_dir / "downloads").glob("*/local-dpo.jsonl"))
    assert len(files) == 1, files
    page.screenshot(path=ARTIFACTS / "forms-chat.png", full_page=True)


def test_continuing_from_a_job_locks_the_base_model_to_the_parents(page):
    job_id = _job_id()
    page.get_by_role("tab", name="Train").click()
    base = page.locator("#base-model input")
    expect(base).to_be_enabled()
    parent = page.locator("#parent-job input")
    parent.click()
    expect(page.get_by_role("option", name=re.compile(re.escape(job_id)))).to_be_visible()
    parent.fill(job_id)
    parent.press("Enter")
    expect(base).to_be_disabled()
    expect(base).to_have_value("builtin:tiny-qwen3")
    expect(page.locator("#base-model")).to_contain_text(f"The parent job {job_id}'s base model")
    page.screenshot(path=ARTIFACTS / "forms-train-parent.png", full_page=True)
