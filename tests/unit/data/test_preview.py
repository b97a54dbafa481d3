"""Dataset preview: every format rendered as TRL renders it, token counts, max_length flags and a missing template."""

from __future__ import annotations

import json

import pytest

from backend.core.spec import JobSpec, SpecError
from backend.data.loading import load_training_dataset
from backend.training.preview import preview_dataset
from tests.helpers import tiny_spec

EOS = "<|im_end|>"  # the demo tokenizer's EOS


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


MESSAGES = [
    {"messages": [user("What is 2 + 2?"), assistant("2 + 2 = 4.")]},
    {"messages": [user("Say hello."), assistant("Hello!"), user("Again."), assistant("Hello again!")]},
    {"messages": [user("Capital of France?"), assistant("Paris.")]},
    {"messages": [user("What is 3 + 5?"), assistant("8.")]},
]
PROMPT_COMPLETION_CHAT = [
    {"prompt": [user("What is 2 + 2?")], "completion": [assistant("4.")]},
    {"prompt": [user("Say hello.")], "completion": [assistant("Hello!")]},
]
PROMPT_COMPLETION_TEXT = [
    {"prompt": "Question: 2 + 2? Answer:", "completion": " 4."},
    {"prompt": "Question: capital of France? Answer:", "completion": " Paris." + EOS},
]
TEXT = [{"text": "The sky is blue."}, {"text": "Grass is green." + EOS}]
PREFERENCE_CHAT = [
    {"prompt": [user("What is 7 + 15?")], "chosen": [assistant("22.")], "rejected": [assistant("24.")]},
    {"prompt": [user("Say hello.")], "chosen": [assistant("Hello, nice to meet you!")], "rejected": [assistant("No.")]},
]
PREFERENCE_TEXT = [{"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5"}]
PROMPT_ONLY = [
    {"prompt": [user("What is 12 + 3? Put the final answer in \\boxed{}.")], "solution": "15"},
    {"prompt": [user("What is 4 - 8? Put the final answer in \\boxed{}.")], "solution": "-4"},
]


@pytest.fixture()
def tokenizer(demo_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path)


@pytest.fixture()
def make_spec(tmp_path):
    def make(rows: list[dict], method: str = "sft", **overrides) -> JobSpec:
        path = tmp_path / f"data-{len(list(tmp_path.iterdir()))}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        dataset = {"source": "file", "name": str(path), **overrides.pop("dataset", {})}
        return JobSpec.from_dict(tiny_spec(method=method, dataset=dataset, **overrides))

    return make


def preview_of(spec: JobSpec, tokenizer, rows: int = 3):
    """The preview of ``spec``'s rows, loaded as the Preview button loads them."""
    return preview_dataset(spec, tokenizer, load_training_dataset(spec.dataset, spec.method), rows)


def token_count(tokenizer, rendered: str) -> int:
    # The demo tokenizer adds no BOS, so the rendered text re-tokenizes to exactly the training ids.
    return len(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def assert_counts_match(tokenizer, preview) -> None:
    for row in preview.rows:
        assert row.n_tokens == token_count(tokenizer, row.rendered)
        if row.rendered_rejected is not None:
            assert row.n_tokens_rejected == token_count(tokenizer, row.rendered_rejected)


def test_messages_render_through_the_chat_template(make_spec, tokenizer):
    preview = preview_of(make_spec(MESSAGES), tokenizer, rows=3)
    assert (preview.format, preview.columns, preview.total_rows) == ("conversational", ["messages"], 4)
    assert len(preview.rows) == 3
    first = preview.rows[0].rendered
    assert first.startswith("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    assert first.rstrip().endswith("2 + 2 = 4.<|im_end|>")
    assert_counts_match(tokenizer, preview)
    assert not any(row.over_max_length for row in preview.rows)


def test_assistant_only_loss_uses_trls_training_template(make_spec, tokenizer):
    """Qwen3's stock template drops earlier turns' think blocks; the training template TRL swaps in keeps them."""
    with_mask = preview_of(make_spec(MESSAGES), tokenizer).rows[1].rendered
    without = preview_of(make_spec(MESSAGES, sft={"completion_only_loss": False}), tokenizer).rows[1].rendered
    assert with_mask.count("<think>\n\n</think>") == 2
    assert without.count("<think>\n\n</think>") == 1
    assert without == tokenizer.apply_chat_template(MESSAGES[1]["messages"], tokenize=False)


def test_column_mapping_shows_mapped_columns(make_spec, tokenizer):
    rows = [{"conversation": row["messages"], "source": "x"} for row in MESSAGES]
    preview = preview_of(make_spec(rows, dataset={"columns": {"messages": "conversation"}}), tokenizer, rows=1)
    assert preview.columns == ["messages"]
    assert "<|im_start|>user\nWhat is 2 + 2?<|im_end|>" in preview.rows[0].rendered


def test_conversational_prompt_completion_is_one_conversation(make_spec, tokenizer):
    preview = preview_of(make_spec(PROMPT_COMPLETION_CHAT), tokenizer)
    assert preview.format == "prompt-completion"
    rendered = preview.rows[0].rendered
    example = PROMPT_COMPLETION_CHAT[0]
    prompt = tokenizer.apply_chat_template(example["prompt"], tokenize=False, add_generation_prompt=True)
    assert rendered.startswith(prompt)
    assert rendered == tokenizer.apply_chat_template(example["prompt"] + example["completion"], tokenize=False)
    assert rendered.rstrip().endswith("4.<|im_end|>")
    assert_counts_match(tokenizer, preview)


def test_plain_prompt_completion_and_text_get_one_eos(make_spec, tokenizer):
    pc = preview_of(make_spec(PROMPT_COMPLETION_TEXT), tokenizer)
    assert [row.rendered for row in pc.rows] == [
        "Question: 2 + 2? Answer: 4." + EOS,
        "Question: capital of France? Answer: Paris." + EOS,
    ]
    text = preview_of(make_spec(TEXT), tokenizer)
    assert text.format == "language-modeling"
    assert [row.rendered for row in text.rows] == ["The sky is blue." + EOS, "Grass is green." + EOS]
    assert_counts_match(tokenizer, pc)
    assert_counts_match(tokenizer, text)


def test_preference_renders_both_sides(make_spec, tokenizer):
    preview = preview_of(make_spec(PREFERENCE_CHAT, method="dpo"), tokenizer)
    assert preview.format == "preference"
    row = preview.rows[1]
    assert row.rendered_chosen.startswith("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")
    assert "Hello, nice to meet you!<|im_end|>" in row.rendered_chosen
    assert "No.<|im_end|>" in row.rendered_rejected
    assert row.n_tokens_chosen > row.n_tokens_rejected
    assert preview.summary.max_tokens == max(r.longest for r in preview.rows)
    assert_counts_match(tokenizer, preview)


def test_implicit_preference_matches_explicit_prompt(make_spec, tokenizer):
    implicit = [{"chosen": r["prompt"] + r["chosen"], "rejected": r["prompt"] + r["rejected"]} for r in PREFERENCE_CHAT]
    explicit_rows = preview_of(make_spec(PREFERENCE_CHAT, method="dpo"), tokenizer).rows
    preview = preview_of(make_spec(implicit, method="dpo"), tokenizer)
    assert preview.format == "implicit-preference"
    assert preview.rows == explicit_rows


def test_plain_preference_appends_eos_to_each_side(make_spec, tokenizer):
    row = preview_of(make_spec(PREFERENCE_TEXT, method="dpo"), tokenizer).rows[0]
    assert (row.rendered_chosen, row.rendered_rejected) == ("2 + 2 = 4" + EOS, "2 + 2 = 5" + EOS)


@pytest.mark.parametrize("enable_thinking", [None, True, False])
def test_prompt_only_ends_with_the_generation_prompt(make_spec, tokenizer, enable_thinking):
    spec = make_spec(PROMPT_ONLY, method="grpo", grpo={"enable_thinking": enable_thinking, "num_generations": 2})
    preview = preview_of(spec, tokenizer)
    # the rows' solution is kept where present: the answer-accuracy guard reads it
    assert (preview.format, preview.columns) == ("prompt-only", ["prompt", "solution"])
    rendered = preview.rows[0].rendered
    assert rendered.startswith("<|im_start|>user\nWhat is 12 + 3?")
    # Qwen3's template pre-fills an empty think block only when thinking is switched off.
    suffix = "<|im_start|>assistant\n<think>\n\n</think>\n\n" if enable_thinking is False else "<|im_start|>assistant\n"
    assert rendered.endswith(suffix)
    assert_counts_match(tokenizer, preview)


def test_over_max_length_flips_with_a_small_max_length(make_spec, tokenizer):
    roomy = preview_of(make_spec(MESSAGES), tokenizer, rows=4)
    assert roomy.summary.over_max_length == 0
    assert roomy.summary.max_length == 128
    lengths = [row.n_tokens for row in roomy.rows]
    assert roomy.summary.max_tokens == max(lengths)
    assert roomy.summary.mean_tokens == pytest.approx(sum(lengths) / 4)

    cutoff = sorted(lengths)[1]  # at least the two longest rows are over
    tight = preview_of(make_spec(MESSAGES, training={"max_length": cutoff}), tokenizer, rows=4)
    assert [row.over_max_length for row in tight.rows] == [n > cutoff for n in lengths]
    assert tight.summary.over_max_length == sum(n > cutoff for n in lengths) >= 2


def test_preference_row_is_over_when_either_side_is(make_spec, tokenizer):
    roomy = preview_of(make_spec(PREFERENCE_CHAT, method="dpo"), tokenizer).rows[1]
    between = (roomy.n_tokens_rejected + roomy.n_tokens_chosen) // 2
    assert roomy.n_tokens_rejected <= between < roomy.n_tokens_chosen
    tight = preview_of(make_spec(PREFERENCE_CHAT, method="dpo", training={"max_length": between}), tokenizer)
    assert tight.rows[1].over_max_length


def test_conversational_data_needs_a_chat_template(make_spec, tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(SpecError, match="has no chat template; use a chat/instruct model or plain text data"):
        preview_of(make_spec(MESSAGES), tokenizer)
    # Plain text never touches the template.
    assert preview_of(make_spec(TEXT), tokenizer).rows[0].rendered == "The sky is blue." + EOS


def test_sft_preview_matches_what_sfttrainer_tokenizes(make_spec, tokenizer, models_dir, tmp_path):
    """The ground truth: the ids SFTTrainer prepared decode to the previewed text, for every SFT format."""
    from backend.data.loading import load_training_dataset
    from backend.methods.sft import build_sft_trainer

    for rows in (MESSAGES, PROMPT_COMPLETION_CHAT, PROMPT_COMPLETION_TEXT, TEXT):
        spec = make_spec(rows)
        dataset, fmt = load_training_dataset(spec.dataset, spec.method)
        trainer = build_sft_trainer(
            spec, tmp_path / "out", models_dir, callbacks=[], dataset=dataset, dataset_format=fmt
        )
        preview = preview_of(spec, tokenizer, rows=len(rows))
        for prepared, row in zip(trainer.train_dataset, preview.rows, strict=True):
            assert len(prepared["input_ids"]) == row.n_tokens
            assert tokenizer.decode(prepared["input_ids"]) == row.rendered


def test_dpo_preview_matches_what_dpotrainer_tokenizes(make_spec, tokenizer, demo_model_path, tmp_path):
    from trl import DPOConfig, DPOTrainer

    spec = make_spec(PREFERENCE_CHAT, method="dpo")
    args = DPOConfig(output_dir=str(tmp_path / "out"), report_to="none", bf16=False, max_length=128)
    trainer = DPOTrainer(
        model=str(demo_model_path), args=args, train_dataset=_dataset(PREFERENCE_CHAT), processing_class=tokenizer
    )
    preview = preview_of(spec, tokenizer)
    for prepared, row in zip(trainer.train_dataset, preview.rows, strict=True):
        assert tokenizer.decode(prepared["prompt_ids"] + prepared["chosen_ids"]) == row.rendered_chosen
        assert tokenizer.decode(prepared["prompt_ids"] + prepared["rejected_ids"]) == row.rendered_rejected
        assert len(prepared["prompt_ids"]) + len(prepared["chosen_ids"]) == row.n_tokens_chosen


def _dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list(rows)
