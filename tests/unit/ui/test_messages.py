"""Messages a newcomer reads (issue 37): the Queue result's place in the queue, a broken or non-dataset upload, the
pre-flight's warnings in the form's words, a push to the Hub that cannot happen, the Hub-offline refusal's
suggestion, a CLI whose reader went away, and the arena's stop reason when the environment ended the episode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.core.spec import Method, SpecError, load_spec_text, parse_spec
from backend.core.users import User
from backend.data.uploads import keep_upload
from components.train.form import FORM_FIELDS, labelled_warning, queue_place
from tests.helpers import ROOT, tiny_spec


# --- the Queue result -----------------------------------------------------------------------------------------
def test_queued_says_starting_now_only_when_a_worker_is_free(api, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_CONCURRENT_JOBS", "1")
    first = api.jobs.submit(tiny_spec())
    assert first.free_workers == 1 and queue_place(first.queue_position, first.free_workers) == "starting now"
    assert api.core.store.claim_next().id == first.job.id  # it runs now, in the only worker
    second = api.jobs.submit(tiny_spec())
    third = api.jobs.submit(tiny_spec())
    assert second.queue_position == 1 and second.free_workers == 0
    assert queue_place(second.queue_position, second.free_workers) == "next in the queue"
    assert queue_place(third.queue_position, third.free_workers) == "place 2 in the queue"


def test_queue_place_wording():
    assert queue_place(None, 0) == "starting now"  # already claimed by the scheduler: it started
    assert queue_place(1, 2) == queue_place(2, 2) == "starting now"
    assert queue_place(3, 2) == "place 3 in the queue"
    assert queue_place(1, None) == "next in the queue"  # not known to be free: no promise


# --- uploads ----------------------------------------------------------------------------------------------------
def test_a_broken_jsonl_names_its_first_bad_line(tmp_path):
    rows = [json.dumps({"prompt": f"q{i}", "completion": "a"}) for i in range(6)]
    broken = tmp_path / "chats.jsonl"
    broken.write_text("\n".join([*rows, '{"prompt": "x", oops', rows[0]]) + "\n")
    with pytest.raises(SpecError) as refused:
        keep_upload(broken, "chats.jsonl", Method.sft, tmp_path / "uploads")
    [problem] = refused.value.problems
    assert "chats.jsonl could not be read as JSONL: line 7 is not valid JSON: Expecting property name" in problem
    assert "An error occurred" not in problem
    # Issue 47: the box under the upload says it as a sentence, not as "dataset.name: ..."
    from components.train.views import problems_markdown

    shown = problems_markdown(refused.value.problems)
    assert shown.startswith("⚠️ chats.jsonl could not be read as JSONL: line 7"), shown
    assert shown.endswith("(`dataset.name`)") and "dataset.name:" not in shown, shown


@pytest.mark.parametrize("name", ["picture.png", "picture.jsonl", "archive.csv"])
def test_a_file_that_is_not_a_dataset_is_a_sentence(tmp_path, name):
    binary = tmp_path / name
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    with pytest.raises(SpecError) as refused:
        keep_upload(binary, name, Method.sft, tmp_path / "uploads")
    [problem] = refused.value.problems
    assert problem.startswith(("dataset: ", "dataset.name: ")) and name in problem, problem
    assert "Error" not in problem and "error occurred" not in problem, problem
    assert not any((tmp_path / "uploads").glob("*.*")), "nothing kept"


# --- warnings in the form's words -----------------------------------------------------------------------------
def test_preflight_warnings_speak_in_field_labels_with_the_spec_path_in_brackets():
    said = labelled_warning(
        "3 of the first 8 rows are longer than training.max_length (128 tokens) and will be cut; raise it if the "
        "ends of the examples matter"
    )
    assert said.startswith("3 of the first 8 rows are longer than Max length (128 tokens)")
    assert said.endswith("(`training.max_length`)")
    said = labelled_warning("rollout.max_completion_length (24) is below a typical episode; raise it to at least 96")
    assert said.startswith("Max completion length (24) is below") and said.endswith("(`rollout.max_completion_length`)")
    assert labelled_warning("memory is tight") == "memory is tight"


def test_the_jobs_tab_shows_a_stored_warning_in_the_forms_words_as_check_did(api):
    """Issue 37: Check said the warning in field labels, but the job's summary still showed the spec path."""
    from components.jobs.views import summary_markdown

    job = api.core.store.add(parse_spec(tiny_spec()))
    said = "rollout.max_completion_length (24) is below a typical episode; raise it to at least 96"
    api.core.store.merge_artifacts(job.id, preflight_warnings=[said, "memory is tight"])
    summary = summary_markdown(api, api.jobs.get_job(job.id), [])
    assert "⚠️ Max completion length (24) is below a typical episode" in summary, summary
    assert "(`rollout.max_completion_length`)" in summary and "⚠️ memory is tight" in summary


# --- a push to the Hub that cannot happen -------------------------------------------------------------------------
def test_check_warns_about_a_push_with_no_token_or_no_hub(api):
    pushing = tiny_spec(output={"push_to_hub": True, "hub_repo_id": "you/run"})
    warnings, _ = api.jobs.check(pushing, user=User("local", token=None))  # conftest sets HF_HUB_OFFLINE
    pushes = [w for w in warnings if w.startswith("output.push_to_hub: ")]
    assert any("no Hugging Face token" in w for w in pushes), warnings
    assert any("the Hub is not reachable from this machine (HF_HUB_OFFLINE is set)" in w for w in pushes), warnings
    assert labelled_warning(pushes[0]).startswith("Push to the Hub when done: ")
    quiet, _ = api.jobs.check(tiny_spec(), user=User("local", token=None))
    assert not any("push_to_hub" in w for w in quiet)


def test_the_hub_offline_refusal_suggests_the_arithmetic_demo_model(api):
    with pytest.raises(SpecError) as refused:
        api.jobs.check(tiny_spec(model={"name_or_path": "nobody/does-not-exist"}))
    assert "pick a local folder or builtin:tiny-qwen3-arith" in str(refused.value)


# --- the CLI ----------------------------------------------------------------------------------------------------
def test_cli_output_into_a_closed_pipe_ends_quietly(api, data_dir):
    job = api.jobs.submit(tiny_spec()).job
    read, write = os.pipe()
    os.close(read)  # the reader went away, as head does after its lines
    try:
        done = subprocess.run(
            [sys.executable, "-m", "backend", "show", job.id],
            cwd=ROOT,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141, done.stderr


# --- the arena's stop reason ------------------------------------------------------------------------------------
def test_an_episode_the_environment_ended_says_so_whatever_limit_came_after(monkeypatch):
    """The model answers right (the environment ends the episode), then calls the tool again past its tool-round
    limit: the episode stopped because it was over, not because of the limit."""
    from transformers import AutoTokenizer

    from backend.environments import episodes
    from backend.environments.runtime import open_environment
    from backend.models.demo import ARITH_MODEL_DIR

    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    call = '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": 5}}\n</tool_call><|im_end|>'
    turn = tokenizer(call, add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(episodes, "_generate", lambda model, tok, prompts, *a, **k: [list(turn) for _ in prompts])

    class Model:
        device = "cpu"

    spec = parse_spec(load_spec_text((ROOT / "examples" / "grpo-env-demo.yaml").read_text(), "grpo-env-demo.yaml"))
    settings = episodes.EpisodeSettings(max_completion_length=1024, max_iterations=1, temperature=0)
    with open_environment(spec, sessions=1) as environment:
        [episode] = episodes.play_episodes(
            Model(), tokenizer, [environment.factory()], [{"prompt": "Add.", "a": 2, "b": 3, "op": "+"}], settings, [0]
        )
    assert episode.done and episode.success, episode.messages
    assert episode.stop_reason == "the episode ended"


# --- held-out rows that fit the data ----------------------------------------------------------------------------
def _dpo_form_on_upload(api, tmp_path, rows: int, user: User) -> dict:
    """The Train form as a newcomer leaves it: the arithmetic model, DPO picked (its recipe filled in), and their
    own file of ``rows`` preference rows uploaded."""
    from components.train.fields import ARITH_MODEL_ID
    from components.train.recipes import FIELDS, recipe_updates

    path = tmp_path / "my-chats.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": f"What is {i} plus 1?", "chosen": str(i + 1), "rejected": str(i)}) + "\n"
            for i in range(rows)
        )
    )
    upload_id, _ = api.datasets.upload_dataset(path, path.name, "dpo", user)
    values = {**FIELDS, "base_model": ARITH_MODEL_ID, "method": "dpo"}
    values.update(recipe_updates(values, (ARITH_MODEL_ID, FIELDS["method"]), (ARITH_MODEL_ID, "dpo")))
    assert values["holdout_rows"] == 128, "the DPO recipe's own count, measured on arith-preferences"
    return {**values, "dataset_source": "upload", "upload_id": upload_id}


def test_dpo_on_a_one_row_upload_says_so_at_held_out_rows(api, tmp_path):
    from components.train.form import field_problems, field_warnings, form_to_spec

    user = User("local")
    values = _dpo_form_on_upload(api, tmp_path, 1, user)
    warnings, _ = api.jobs.check(form_to_spec(values), user=user)  # not refused: the recipe's 128 was not the user's
    at = field_warnings(warnings, FORM_FIELDS)
    assert list(at) == ["holdout_rows"], warnings
    [said] = at["holdout_rows"]
    assert said.startswith("Held-out rows: the dataset has 1 row, too few to hold any out"), said
    # A count the user typed is theirs: too many is refused at the field, saying what to set.
    with pytest.raises(SpecError) as refused:
        api.jobs.check(form_to_spec({**values, "holdout_rows": 5}), user=user)
    at, rest = field_problems(refused.value.problems, values, FORM_FIELDS)
    assert rest == [] and list(at) == ["holdout_rows"], refused.value.problems
    assert at["holdout_rows"] == [
        "Held-out rows: holding out 5 rows leaves none of the 1 to train on; set it to 0 (no before/after evaluation)"
    ]


def test_a_thousand_row_upload_holds_out_a_tenth(api, tmp_path):
    from backend.data.loading import holdout_size
    from components.train.form import FIELDS, form_to_spec

    user = User("local")
    spec = form_to_spec(_dpo_form_on_upload(api, tmp_path, 1000, user))
    assert spec["eval"]["holdout_rows"] == "auto"
    warnings, _ = api.jobs.check(spec, user=user)
    assert not any("holdout" in w for w in warnings), warnings
    assert holdout_size(1000, 0.0, parse_spec(spec).eval.holdout_rows) == 100
    # On the recipe's own dataset the recipe's count stands.
    own = form_to_spec({**FIELDS, "holdout_rows": 256})
    assert own["dataset"]["name"] == "arith-sft" and own["eval"]["holdout_rows"] == 256
    # The box emptied is auto too (as an empty batch size is), and 0 is none.
    assert form_to_spec({**FIELDS, "holdout_rows": None})["eval"]["holdout_rows"] == "auto"
    assert "eval" not in form_to_spec({**FIELDS, "holdout_rows": 0})
