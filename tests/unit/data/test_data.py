"""Dataset loading: built-in, files of each type, format detection per method, column mapping, bad files."""

import json

import pytest

from backend.core.spec import DatasetSpec, Method, SpecError
from backend.data.builtin import BUILTIN_DATASETS
from backend.data.loading import detect_format, load_training_dataset


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("name", list(BUILTIN_DATASETS))
def test_builtin_datasets_fit_the_methods_they_claim(name):
    builtin = BUILTIN_DATASETS[name]
    for method in builtin.methods():
        detect_format(json.loads(builtin.path.read_text().splitlines()[0]).keys(), Method(method))


@pytest.mark.parametrize(
    "columns, method, expected",
    [
        (["messages"], Method.sft, "conversational"),
        (["prompt", "completion"], Method.sft, "prompt-completion"),
        (["text", "id"], Method.sft, "language-modeling"),
        (["messages", "text"], Method.sft, "conversational"),
        (["prompt", "chosen", "rejected"], Method.dpo, "preference"),
        (["chosen", "rejected"], Method.dpo, "implicit-preference"),
        (["prompt", "solution"], Method.grpo, "prompt-only"),
    ],
)
def test_format_detection(columns, method, expected):
    assert detect_format(columns, method)[0] == expected


def test_prompt_only_data_is_refused_for_sft_with_a_mapping_hint():
    with pytest.raises(SpecError) as err:
        detect_format(["prompt"], Method.sft)
    msg = str(err.value)
    assert "SFT needs columns messages or prompt/completion or text" in msg
    # The hint in the Train tab's words, no spec path.
    assert "Fill “Column mapping” with expected=your_column" in msg and "dataset.columns" not in msg


def test_the_mapping_hint_names_a_mapping_that_fits_the_columns():
    with pytest.raises(SpecError) as err:
        detect_format(["question", "answer"], Method.sft)
    assert "e.g. prompt=question, completion=answer." in str(err.value)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet", ".json"])
def test_files_of_each_type_load(tmp_path, suffix):
    import pandas as pd

    df = pd.DataFrame({"question": ["a?", "b?"], "answer": ["A", "B"]})
    path = tmp_path / f"data{suffix}"
    {
        ".jsonl": lambda: df.to_json(path, orient="records", lines=True),
        ".json": lambda: df.to_json(path, orient="records"),
        ".csv": lambda: df.to_csv(path, index=False),
        ".parquet": lambda: df.to_parquet(path),
    }[suffix]()
    spec = DatasetSpec(source="file", name=str(path), columns={"prompt": "question", "completion": "answer"})
    ds, fmt = load_training_dataset(spec, Method.sft)
    assert fmt == "prompt-completion" and ds.column_names == ["prompt", "completion"] and ds[1]["completion"] == "B"


def test_column_mapping_to_an_unknown_column_names_the_real_ones(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"conv": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(SpecError, match=r"column 'conversation' is not in the dataset \(its columns: conv\)"):
        load_training_dataset(
            DatasetSpec(source="file", name=str(path), columns={"messages": "conversation"}), Method.sft
        )


def test_max_rows_and_extra_columns_are_trimmed(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"text": f"row {i}", "junk": i} for i in range(10)])
    ds, _ = load_training_dataset(DatasetSpec(source="file", name=str(path), max_rows=3), Method.sft)
    assert len(ds) == 3 and ds.column_names == ["text"]


@pytest.mark.parametrize(
    "filename, content, message",
    [
        ("broken.jsonl", '{"text": "ok"}\n{"text": \n', "could not be read as JSONL"),
        ("broken.csv", 'a,b\n1,2,3,4\n"unterminated', "could not be read as CSV"),
        ("broken.parquet", "this is not parquet", "could not be read as PARQUET"),
        ("data.txt", "hello", "not a supported file type"),
    ],
)
def test_malformed_files_are_refused_clearly(tmp_path, filename, content, message):
    path = tmp_path / filename
    path.write_text(content)
    with pytest.raises(SpecError, match=message):
        load_training_dataset(DatasetSpec(source="file", name=str(path)), Method.sft)


def test_missing_file_and_unknown_builtin(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_training_dataset(DatasetSpec(source="file", name=str(tmp_path / "none.jsonl")), Method.sft)
    with pytest.raises(SpecError, match="no built-in dataset 'nope'; choose one of chat-demo"):
        load_training_dataset(DatasetSpec(source="builtin", name="nope"), Method.sft)


def test_empty_dataset_is_refused(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("text\n")
    with pytest.raises(SpecError, match="it has no rows"):
        load_training_dataset(DatasetSpec(source="file", name=str(path)), Method.sft)


def test_empty_required_value_is_refused(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"messages": []}])
    with pytest.raises(SpecError, match="1 of 1 rows have an empty 'messages'"):
        load_training_dataset(DatasetSpec(source="file", name=str(path)), Method.sft)


def test_hub_dataset_offline_gives_a_clear_error():
    with pytest.raises(SpecError, match="Hub dataset 'someone/not-cached' could not be loaded"):
        load_training_dataset(DatasetSpec(source="hub", name="someone/not-cached"), Method.sft)


def test_plain_text_prompts_become_one_user_message_for_an_environment():
    from datasets import Dataset

    from backend.methods.rollout import conversational_prompts

    plain = conversational_prompts(Dataset.from_list([{"prompt": "Go.", "target": "x"}]))
    assert plain[0] == {"prompt": [{"role": "user", "content": "Go."}], "target": "x"}
    chat = Dataset.from_list([{"prompt": [{"role": "user", "content": "Go."}]}])
    assert conversational_prompts(chat)[0] == chat[0]


def test_numbers_in_a_csvs_text_columns_are_read_as_text(tmp_path):
    path = tmp_path / "qa.csv"
    path.write_text("question,answer\nWhat is 2 plus 2?,4\nWhat is 3 plus 3?,6\n")
    ds, fmt = load_training_dataset(
        DatasetSpec(source="file", name=str(path), columns={"prompt": "question", "completion": "answer"}), Method.sft
    )
    assert fmt == "prompt-completion" and ds["completion"] == ["4", "6"]
