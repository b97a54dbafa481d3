"""Chat feedback kept as training data: 👍/👎 as KTO rows (one per side per turn, per user), "better" picks as DPO
pairs, and the exports of both, read back from real files."""

import json
import threading

import pytest

from backend.api import StudioAPI
from backend.chat.feedback import PreferenceLog, ThumbLog
from backend.chat.feedback_log import NoAnswerYet, last_turn
from backend.core.users import User

ALICE, BOB = User("alice"), User("bob")
SYSTEM = "Be brief."
# What the Chat tab hands back: each side its own past answers; Gradio may send content as typed parts.
BASE = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": [{"type": "text", "text": "And again?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "base says again"}]},
]
TUNED = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hi there!"},
    {"role": "user", "content": "And again?"},
    {"role": "assistant", "content": "tuned says again"},
]


def test_a_turn_is_that_sides_conversation_up_to_the_user_message_then_its_answer():
    prompt, answer = last_turn(BASE, SYSTEM)
    assert prompt == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "And again?"},
    ]
    assert answer == "base says again"
    assert last_turn(TUNED, "  ")[0][0] == {"role": "user", "content": "Hi"}  # a blank system prompt is left out
    assert last_turn([], SYSTEM) is None
    assert last_turn(BASE[:3], SYSTEM) is None  # asked, not answered yet


def test_thumbs_are_kto_rows_one_per_side_per_turn_and_each_user_sees_only_theirs(tmp_path):
    api = StudioAPI(tmp_path / "data", scheduler="none")
    log = api.chat.thumb_log(ALICE)
    up_tuned = log.record_turn(TUNED, SYSTEM, True, "tuned", "job-1")
    assert up_tuned["previous"] is None and up_tuned["label"] is True
    assert up_tuned["prompt"] == last_turn(TUNED, SYSTEM)[0]  # the tuned side's own past answers
    assert up_tuned["completion"] == [{"role": "assistant", "content": "tuned says again"}]
    assert log.record_turn(BASE, SYSTEM, False, "base", "job-1")["previous"] is None  # both sides may get one
    # A second thumb on the same answer replaces the first; a regenerated answer is a new turn.
    assert log.record_turn(TUNED, SYSTEM, False, "tuned", "job-1")["previous"] is True
    assert log.record_turn(TUNED, SYSTEM, False, "tuned", "job-1")["previous"] is False
    regenerated = [*TUNED[:-1], {"role": "assistant", "content": "tuned says something else"}]
    assert log.record_turn(regenerated, SYSTEM, True, "tuned", "job-1")["previous"] is None
    assert [(r["side"], r["label"]) for r in log.rows()] == [("tuned", False), ("base", False), ("tuned", True)]
    assert (tmp_path / "data" / "thumbs" / "alice.jsonl").is_file()

    api.chat.thumb_log(BOB).record_turn(BASE, "", True, "base", "job-2")
    assert len(api.chat.thumb_log(BOB).rows()) == 1 and len(api.chat.thumb_log(ALICE).rows()) == 3
    with pytest.raises(ValueError, match="no preferences recorded yet"):  # thumbs are not DPO pairs
        api.chat.export_preferences(ALICE)

    alice_file, bob_file = api.chat.export_preferences(ALICE, "kto"), api.chat.export_preferences(BOB, "kto")
    assert alice_file.parent.parent == bob_file.parent.parent == api.core.paths.downloads
    assert (alice_file.name, bob_file.name) == ("alice-kto.jsonl", "bob-kto.jsonl")
    exported = [json.loads(line) for line in alice_file.read_text(encoding="utf-8").splitlines()]
    assert [set(r) for r in exported] == [{"prompt", "completion", "label"}] * 3
    assert [r["label"] for r in exported] == [False, False, True]
    assert exported[1]["completion"][0]["content"] == "base says again"
    assert "alice" not in bob_file.read_text() and "Hello." in bob_file.read_text()
    first = alice_file.read_text()
    again = api.chat.export_preferences(ALICE, "kto")
    assert again.read_text() == first and not alice_file.exists()  # the earlier export is gone

    from datasets import load_dataset  # TRL's KTOTrainer reads exactly these columns

    dataset = load_dataset("json", data_files=str(again), split="train")
    assert dataset.column_names == ["prompt", "completion", "label"]
    assert dataset.features["label"].dtype == "bool" and dataset[2]["completion"][0]["role"] == "assistant"


def test_nothing_is_recorded_without_an_answer_and_an_empty_log_exports_nothing(tmp_path):
    api = StudioAPI(tmp_path / "data", scheduler="none")
    log = api.chat.thumb_log(ALICE)
    for history in ([], BASE[:3]):
        with pytest.raises(NoAnswerYet, match="no answer yet"):
            log.record_turn(history, SYSTEM, True, "base", "job-1")
    with pytest.raises(ValueError, match="empty"):
        log.record_turn([*BASE[:3], {"role": "assistant", "content": "  "}], SYSTEM, True, "base", "job-1")
    assert not log.path.exists()
    with pytest.raises(ValueError, match="no thumbs recorded yet"):
        api.chat.export_preferences(ALICE, "kto")
    with pytest.raises(ValueError, match="'dpo'.*'kto'"):
        api.chat.export_preferences(ALICE, "orpo")
    with pytest.raises(ValueError, match="'base' or the 'tuned'"):
        log.record(last_turn(BASE)[0], "x", True, "left", "job-1")
    with pytest.raises(ValueError, match="True"):
        log.record(last_turn(BASE)[0], "x", 1, "base", "job-1")


def test_thumbs_from_threads_never_interleave(tmp_path):
    log = ThumbLog(tmp_path / "thumbs" / "log.jsonl")

    def rate_many(worker: int) -> None:
        for i in range(10):
            log.record([{"role": "user", "content": f"q{worker}.{i}"}], "answer " * 300, i % 2 == 0, "tuned", "j")

    threads = [threading.Thread(target=rate_many, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(log.rows()) == 40 and len(log.path.read_text().splitlines()) == 40


def test_a_better_pick_takes_the_preferred_sides_conversation_as_its_prompt(tmp_path):
    log = PreferenceLog(tmp_path / "prefs.jsonl")
    row = log.record_turn(BASE, TUNED, SYSTEM, "tuned", "job-1")
    assert row["prompt"] == last_turn(TUNED, SYSTEM)[0] and row["replaced"] is False
    assert (row["chosen"][0]["content"], row["rejected"][0]["content"]) == ("tuned says again", "base says again")
    assert log.record_turn(BASE[:2], TUNED[:2], SYSTEM, "tuned", "job-1")["replaced"] is False
    assert log.record_turn(BASE[:2], TUNED[:2], SYSTEM, "base", "job-1")["replaced"] is True  # the same turn
    assert [r["chosen"][0]["content"] for r in log.rows()] == ["tuned says again", "Hello."]
    with pytest.raises(NoAnswerYet, match="Ask something first; then pick the better answer."):
        log.record_turn(BASE[:3], TUNED, SYSTEM, "base", "job-1")


def test_changing_the_pick_on_a_later_turn_replaces_it_though_each_side_has_its_own_history(tmp_path):
    # From the second turn on the two prompts differ (each side's earlier answers); the turn is the same one.
    log = PreferenceLog(tmp_path / "prefs.jsonl")
    assert log.record_turn(BASE, TUNED, SYSTEM, "base", "job-1")["replaced"] is False
    changed = log.record_turn(BASE, TUNED, SYSTEM, "tuned", "job-1")
    assert changed["replaced"] is True and changed["prompt"] == last_turn(TUNED, SYSTEM)[0]
    assert [(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in log.rows()] == [
        ("tuned says again", "base says again")
    ]
    # Another question after the same first exchange is another turn, even with the same two answers.
    other = [*BASE[:2], {"role": "user", "content": "Something else?"}, BASE[3]]
    assert log.record_turn(other, [*TUNED[:2], other[2], TUNED[3]], SYSTEM, "base", "job-1")["replaced"] is False
    assert len(log.rows()) == 2
