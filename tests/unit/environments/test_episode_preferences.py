"""The agent arena's "this side played better" as DPO rows of two whole episodes, with their tool calls and tools:
recorded, replaced, refused, exported, loaded with ``datasets``, rendered as TRL's DPOTrainer tokenizes them, scored
with the tools in the template, and trained on by a real DPO job."""

import json

import pytest

from backend.chat.episode_feedback import EPISODE_COLUMNS, EpisodePreferenceLog
from backend.chat.feedback import export_feedback, feedback_log
from backend.core.paths import FEEDBACK_KINDS
from backend.core.spec import DatasetSpec, Method, SpecError, parse_spec
from backend.environments.episodes import Episode
from backend.jobs.records import JobStatus
from backend.models.demo import ARITH_MODEL_DIR
from tests.helpers import job_data, tiny_spec, wait_status

# What transformers' get_json_schema makes of ``def submit_answer(answer: int)`` with its docstring.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "submit_answer",
            "description": "Submit the answer to the problem.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "integer", "description": "The answer."}},
                "required": ["answer"],
            },
        },
    }
]
PROMPT = [{"role": "user", "content": "What is 2 + 3? Submit it with submit_answer.\n\nproblem: 2 + 3"}]
ARITH = "builtin:tiny-qwen3-arith"


def call(arguments, content: str = "") -> dict:
    """A model turn that calls submit_answer, as TRL's parse_response reads it (arguments as an object)."""
    function = {"name": "submit_answer", "arguments": arguments}
    return {"role": "assistant", "content": content, "tool_calls": [{"type": "function", "function": function}]}


def answer(content) -> dict:
    return {"role": "tool", "name": "submit_answer", "content": content}


def played(*turns: dict, prompt: list[dict] = PROMPT, over: bool = True) -> dict:
    """One side's episode as the arena keeps it (``Episode.to_dict()``)."""
    episode = Episode(
        messages=[*prompt, *turns],
        prompt_messages=len(prompt),
        reward=0.0,
        success=False,
        done=True,
        tool_calls=sum(bool(t.get("tool_calls")) for t in turns),
        tool_failures=0,
        completion_tokens=20,
        stop_reason="the episode ended",
        seed=7,
    ).to_dict()
    return {**episode, "over": over}


RIGHT = played(call({"answer": 5}), answer("correct"), {"role": "assistant", "content": "5"})
WRONG = played(call({"answer": "6"}, "I think 6."), answer("wrong"))


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)


def test_a_pick_keeps_both_whole_episodes_and_the_tools_and_a_second_click_replaces_it(tmp_path):
    log = EpisodePreferenceLog(tmp_path / "arena.jsonl")
    row = log.record_episodes(WRONG, RIGHT, TOOLS, "tuned", "job-1", 3)
    assert row["replaced"] is False and (row["job_id"], row["episode"], row["better"]) == ("job-1", 3, "tuned")
    assert row["prompt"] == PROMPT
    # Every message after the prompt; arguments as the JSON text the template writes for an object.
    assert row["chosen"] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "submit_answer", "arguments": '{"answer": 5}'}}],
        },
        {"role": "tool", "content": "correct", "name": "submit_answer"},
        {"role": "assistant", "content": "5"},
    ]
    assert row["rejected"][0]["tool_calls"][0]["function"]["arguments"] == '{"answer": "6"}'
    assert row["rejected"][0]["content"] == "I think 6." and len(row["rejected"]) == 2
    assert isinstance(row["tools"], str) and json.loads(row["tools"]) == TOOLS

    changed = log.record_episodes(WRONG, RIGHT, TOOLS, "base", "job-1", 3)  # the same episode: the last click wins
    assert changed["replaced"] is True and changed["chosen"] == row["rejected"]
    assert log.record_episodes(WRONG, RIGHT, TOOLS, "tuned", "job-1", 4)["replaced"] is False
    assert log.record_episodes(WRONG, RIGHT, TOOLS, "tuned", "job-2", 3)["replaced"] is False
    assert [(r["job_id"], r["episode"], r["better"]) for r in log.rows()] == [
        ("job-1", 3, "base"),
        ("job-1", 4, "tuned"),
        ("job-2", 3, "tuned"),
    ]


def test_prompts_that_differ_identical_play_and_an_empty_side_are_refused_and_nothing_is_kept(tmp_path):
    log = EpisodePreferenceLog(tmp_path / "arena.jsonl")
    other = [{"role": "user", "content": "What is 4 + 4?"}]
    cases = [
        (played(call({"answer": 8}), prompt=other), RIGHT, "different prompts"),
        (RIGHT, played(*RIGHT["messages"][1:]), "both sides played the same episode, so neither is better"),
        (played(), RIGHT, "the base side played no turn"),
        (RIGHT, played({"role": "assistant", "content": "  "}), "the tuned side played no turn"),
        (RIGHT, played(call({"answer": 1}), over=False), "still being played"),
        ({"messages": PROMPT}, RIGHT, "not a played episode"),
    ]
    for base, tuned, refusal in cases:
        with pytest.raises(ValueError, match=refusal):
            log.record_episodes(base, tuned, TOOLS, "base", "job-1", 1)
    with pytest.raises(ValueError, match="'base' or 'tuned'"):
        log.record_episodes(WRONG, RIGHT, TOOLS, "left", "job-1", 1)
    with pytest.raises(ValueError, match="numbered"):
        log.record_episodes(WRONG, RIGHT, TOOLS, "base", "job-1", True)
    assert not log.path.exists()


def test_the_export_has_trls_columns_and_rows_with_differently_typed_arguments_load_as_a_dpo_dataset(paths):
    from datasets import load_dataset

    from backend.data.loading import load_training_dataset

    log = feedback_log(paths, "alice", "episodes")
    assert "arena-preferences" in FEEDBACK_KINDS and log.path == paths.feedback("arena-preferences", "alice")
    with pytest.raises(ValueError, match="no arena picks recorded yet"):
        export_feedback(paths, "alice", "episodes")
    # The same tool called with an integer, a string, and an object of another shape: Arrow cannot unify those.
    for i, arguments in enumerate(({"answer": 42}, {"answer": "42"}, {"answer": [4, 2], "note": {"why": None}})):
        log.record_episodes(played(call(arguments), answer("wrong")), RIGHT, TOOLS, "tuned", "job-1", i)
    exported = export_feedback(paths, "alice", "episodes")
    assert exported.name == "alice-episodes.jsonl" and exported.parent.parent == paths.downloads
    rows = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert [list(r) for r in rows] == [["prompt", "chosen", "rejected", "tools"]] * 3

    dataset = load_dataset("json", data_files=str(exported), split="train")
    assert dataset.column_names == ["prompt", "chosen", "rejected", "tools"] and dataset.num_rows == 3
    arguments = [json.loads(r["rejected"][0]["tool_calls"][0]["function"]["arguments"]) for r in dataset]
    assert arguments == [{"answer": 42}, {"answer": "42"}, {"answer": [4, 2], "note": {"why": None}}]

    trained, fmt = load_training_dataset(DatasetSpec(source="file", name=str(exported)), Method.dpo)
    assert fmt == "preference" and trained.column_names == ["prompt", "chosen", "rejected", "tools"]
    bad = paths.root / "bad-tools.jsonl"
    bad.write_text(json.dumps({**rows[0], "tools": "[not json"}) + "\n")
    with pytest.raises(SpecError, match="row 0 has a 'tools' value that is not a list of tool schemas"):
        load_training_dataset(DatasetSpec(source="file", name=str(bad)), Method.dpo)


def test_a_row_renders_through_the_qwen3_template_exactly_as_the_episode_was_played(tmp_path):
    """Qwen3's template writes text arguments as they are and object arguments with tojson (json.dumps), so the
    row's text arguments render the played call token for token; a tool's list answer renders as nothing there."""
    tok = tokenizer()
    log = EpisodePreferenceLog(tmp_path / "arena.jsonl")
    odd = {"answer": 5, "note": 'é "quoted"', "steps": [1.5, None, True]}
    listed = played(call(odd), answer([{"type": "text", "text": "correct"}]))
    row = log.record_episodes(listed, WRONG, TOOLS, "base", "job-1", 1)

    def ids(messages):
        return tok.apply_chat_template(messages, tools=TOOLS, tokenize=True, return_dict=True)["input_ids"]

    assert ids(row["prompt"] + row["chosen"]) == ids(listed["messages"])
    assert ids(row["prompt"] + row["rejected"]) == ids(WRONG["messages"])
    assert row["chosen"][1]["content"] == ""  # what the model read: Qwen3's template renders a list as nothing

    # A template that renders a list's text parts keeps them as text; one that quotes text arguments is refused.
    parts_template = tok.chat_template.replace(
        "{%- set content = '' %}", "{%- set content = message.content | map(attribute='text') | join('') %}"
    )
    kept = log.record_episodes(listed, WRONG, TOOLS, "base", "job-1", 2, chat_template=parts_template)
    assert kept["chosen"][1]["content"] == "correct"
    quoting = tok.chat_template.replace("{%- if tool_call.arguments is string %}", "{%- if false %}")
    with pytest.raises(ValueError, match="cannot be kept as a training row that renders as it was played"):
        log.record_episodes(listed, WRONG, TOOLS, "base", "job-1", 3, chat_template=quoting)

    from backend.methods.rendering import TEXT_ARGUMENTS_QUOTED, Renderer, render_preference_row

    tok.chat_template = quoting  # the same rows, offered to a model whose template would quote them
    with pytest.raises(SpecError, match="quotes the text"):
        render_preference_row(row, Renderer(tok, {}), 1024)
    assert "Qwen3" in TEXT_ARGUMENTS_QUOTED


def test_dpo_scores_both_sides_with_the_tools_in_the_template(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from backend.methods import dpo

    log = EpisodePreferenceLog(tmp_path / "arena.jsonl")
    row = {
        k: v for k, v in log.record_episodes(WRONG, RIGHT, TOOLS, "tuned", "job-1", 1).items() if k in EPISODE_COLUMNS
    }
    scored: list[tuple[str, str]] = []

    def logprobs(model, tok, items, sides):
        scored.extend(items)
        return [-1.0 if i % 2 == 0 else -2.0 for i in range(len(items))]

    monkeypatch.setattr(dpo, "mixed_logprobs", logprobs)
    trainer = SimpleNamespace(model=None, processing_class=tokenizer())
    scores = dpo.preference_scores(trainer, parse_spec(tiny_spec(method="dpo")), [row], [None, "tuned"])
    assert len(scored) == 4 and scores["tuned"]["preference_accuracy"] == 1.0
    assert "exact_match" not in scores["tuned"]  # a whole episode has no single answer to match
    schema = json.dumps(TOOLS[0], ensure_ascii=False)
    for prompt_text, full_text in scored:
        assert schema in prompt_text and full_text.startswith(prompt_text)
    assert '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": 5}}\n</tool_call>' in scored[0][1]


@pytest.mark.slow
def test_trls_dpo_trainer_tokenizes_exported_rows_as_the_preview_renders_them_and_a_job_trains_on_them(
    paths, store, scheduler_factory
):
    from backend.api import StudioAPI
    from backend.data.loading import load_training_dataset
    from backend.training.preview import preview_dataset
    from backend.worker import build_trainer

    log = feedback_log(paths, "alice", "episodes")
    for i in range(6):  # rows whose calls carry integers and strings alike
        right = played(call({"answer": 5 + i}), answer("correct"), {"role": "assistant", "content": str(5 + i)})
        wrong = played(call({"answer": str(i)}, f"maybe {i}"), answer("wrong"))
        log.record_episodes(wrong, right, TOOLS, "tuned", "job-1", i)
    exported = export_feedback(paths, "alice", "episodes")
    spec_dict = tiny_spec(
        method="dpo",
        model={"name_or_path": ARITH},
        dataset={"source": "file", "name": str(exported)},
        training={"max_steps": 2, "batch_size": 2, "max_length": 512, "learning_rate": 5e-3, "save_steps": 100},
        eval={"holdout_rows": 2},
    )
    spec = parse_spec(spec_dict)

    # What DPOTrainer tokenized is what the preview shows: the schema in the system turn, every call as written.
    trainer, held_out = build_trainer(spec, paths, store.add(spec).id, [], None, job_data(spec, paths))
    tok = trainer.processing_class
    example = trainer.train_dataset[0]
    sequence = example["prompt_ids"] + example["chosen_ids"]
    preview = preview_dataset(spec, tok, load_training_dataset(spec.dataset, spec.method), rows=6).rows
    shown = next(p for p in preview if p.rendered_chosen == tok.decode(sequence))
    assert shown.n_tokens_chosen == len(sequence)
    assert json.dumps(TOOLS[0]) in shown.rendered_chosen
    assert '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": ' in shown.rendered_chosen
    assert '"arguments": {"answer": "' in shown.rendered_rejected  # a string argument stays a string
    assert held_out.num_rows == 2
    del trainer

    job = StudioAPI(paths.root, scheduler="none").jobs.submit(spec_dict).job
    scheduler_factory()
    done = wait_status(store, job.id, {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})
    assert done.status is JobStatus.succeeded, done.error
    evaluation = done.artifacts.evaluation
    # Whole episodes have no one answer to match: the margins and the chosen episodes' likelihood (a guard).
    assert evaluation["rows"] == 2 and set(evaluation["tuned"]) == {
        "preference_accuracy",
        "logprob_margin",
        "reference_logprob",
    }
