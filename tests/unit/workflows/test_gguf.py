"""GGUF export of a finished demo job: llama.cpp's own converter writes f16 and q8_0 files that transformers loads back
and that answer the held-out rows as the merged model does (q8_0 within 1 point), with a Modelfile and a card; a killed
conversion leaves nothing half-written and the previous export in place; the push sends a GGUF repository."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from backend.core.spec import parse_spec
from backend.hub.publish import push_gguf
from backend.models.scoring import same_answer
from backend.platform.gguf_converter import CONVERTER_VAR, converter_problem
from backend.workflows.export import ExportError, merge_job
from backend.workflows.gguf import GGUF_TYPES, convert_model, export_gguf, gguf_file_name
from backend.workflows.gguf_check import CheckRows, check_rows, compare, gguf_config
from backend.workflows.gguf_child import REGISTERED_PRE_TOKENIZERS
from tests.helpers import tiny_spec
from tests.helpers.hub_server import FakeHub
from tests.unit.workflows.test_export import _train

TOKEN = "hf_test_token_0123456789"
ARITH_JOB = {
    "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
    "dataset": {"source": "builtin", "name": "arith-sft"},
    "training": {"max_steps": 2, "batch_size": 4, "max_length": 64, "learning_rate": 1e-3, "save_steps": 100},
    "eval": {"holdout_rows": 256},  # the arith SFT demo recipe's held-out rows
}
CHECKED_ROWS = 64  # the rows this test answers itself, one at a time, on both models


@pytest.fixture(scope="module")
def merged_job(tmp_path_factory, models_dir):
    """A real SFT job on builtin:tiny-qwen3-arith, run to the end by a scheduler and merged: (facade, job, merged)."""
    assert converter_problem() is None, converter_problem()
    api, job_id = _train(tmp_path_factory.mktemp("gguf") / "data", models_dir, **ARITH_JOB)
    job = api.jobs.get_job(job_id)
    merged = merge_job(job, api.core.paths, api.core.paths.job_dir(job_id) / "merged").path
    return api, job, merged


@pytest.fixture(scope="module")
def exported(merged_job):
    """The job exported as q8_0 into its gguf folder: (facade, job, merged folder, record, phases told)."""
    api, job, merged = merged_job
    told: list[str] = []
    record = export_gguf(job, api.core.paths, merged, api.core.paths.job_dir(job.id) / "gguf", "q8_0", told.append)
    return api, job, merged, record, told


def _greedy_answers(model, tokenizer, rows: CheckRows) -> list[str]:
    answers = []
    with torch.no_grad():
        for prompt in rows.prompts:
            text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
            ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
            out = model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            answers.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return answers


def _accuracy(answers: list[str], rows: CheckRows) -> float:
    return sum(same_answer(a, r) for a, r in zip(answers, rows.references)) / len(answers)


@pytest.mark.slow
def test_q8_0_and_f16_load_with_transformers_and_answer_as_the_merged_model(merged_job, exported, tmp_path):
    from gguf import GGUFReader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    api, job, merged, record, told = exported
    folder = api.core.paths.job_dir(job.id) / "gguf"
    assert told == ["converting", "checking"]
    assert sorted(p.name for p in folder.iterdir()) == sorted([gguf_file_name(job, "q8_0"), "Modelfile", "README.md"])
    assert record.path == str(folder / f"{job.id}-q8_0.gguf") and record.bytes == Path(record.path).stat().st_size
    assert record.modelfile == str(folder / "Modelfile") and record.modelfile_note is None
    assert set(record.seconds) == {"converting", "checking"}
    check = record.quant_check
    assert check.error is None and check.rows == 256 and check.rows_from == "held-out" and check.scored == "accuracy"
    assert check.passed and check.difference >= -0.01, check.sentence
    assert 0.1 < check.merged_accuracy < 0.9, "the arith model answers some held-out rows right, not all"
    assert check.sentence.startswith("Accuracy on 256 rows (held-out): merged ")
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".partial")]
    reader = GGUFReader(record.path)
    assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"  # registered, not in the converter's table
    assert reader.fields["general.architecture"].contents() == "qwen3"

    # A second export of another type replaces the first: one GGUF folder per job (here a copy of the job's).
    other = tmp_path / "gguf"
    shutil.copytree(folder, other)
    f16 = export_gguf(job, api.core.paths, merged, other, "f16", lambda phase: None)
    assert sorted(p.name for p in other.iterdir()) == sorted([gguf_file_name(job, "f16"), "Modelfile", "README.md"])
    assert f16.quant_check.passed and f16.quant_check.agreement >= 0.95, f16.quant_check.sentence
    assert f16.bytes > record.bytes * 1.5  # 16 bits a weight against about 8.5

    # Answered here, row by row, as a user's transformers would: the GGUF against the merged model.
    rows = check_rows(job, api.core.paths, max_rows=CHECKED_ROWS)
    base = AutoModelForCausalLM.from_pretrained(merged).eval()
    tokenizer = AutoTokenizer.from_pretrained(merged)
    merged_answers = _greedy_answers(base, tokenizer, rows)
    for gguf_file in (Path(record.path), Path(f16.path)):
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf_file.parent), gguf_file=gguf_file.name, config=gguf_config(gguf_file)
        ).eval()
        gguf_tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
        text = gguf_tokenizer.apply_chat_template(rows.prompts[0], tokenize=False, add_generation_prompt=True)
        assert text == tokenizer.apply_chat_template(rows.prompts[0], tokenize=False, add_generation_prompt=True)
        for prompt in rows.prompts + rows.references:
            sample = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            assert gguf_tokenizer(sample)["input_ids"] == tokenizer(sample)["input_ids"], sample
        answers = _greedy_answers(loaded, gguf_tokenizer, rows)
        assert _accuracy(answers, rows) >= _accuracy(merged_answers, rows) - 0.01, gguf_file.name
        assert sum(a == b for a, b in zip(answers, merged_answers)) >= 0.95 * len(answers), gguf_file.name


@pytest.mark.slow
def test_the_card_and_the_modelfile_say_how_to_run_it(exported):
    api, job, merged, record, _ = exported
    folder = Path(record.path).parent
    name = Path(record.path).name
    modelfile = (folder / "Modelfile").read_text()
    assert modelfile.startswith(f"FROM ./{name}\n") and "ADAPTER" not in modelfile
    assert 'PARAMETER stop "<|im_end|>"' in modelfile and "{{ .Content }}" in modelfile
    card = (folder / "README.md").read_text()
    assert "library_name: gguf" in card and "- gguf" in card and "- q8_0" in card
    assert f"| `{name}` | q8_0 (" in card and f"llama-server -m {name}" in card
    assert f"lms import {name}" in card and f"ollama create {Path(name).stem.lower()} -f Modelfile" in card
    assert "## Checked against the merged model" in card and record.quant_check.sentence in card
    assert "**Verdict:" in card


@pytest.mark.slow
def test_a_killed_conversion_leaves_nothing_and_the_previous_export_in_place(exported, merged_job):
    api, job, merged, _, _ = exported
    folder = api.core.paths.job_dir(job.id) / "gguf"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    killed: list[int] = []

    def kill_the_converter() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for pid in _children_running("backend.workflows.gguf_child"):
                time.sleep(1.0)  # mid-way: the converter has started and is importing or converting
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_converter)
    killer.start()
    try:
        with pytest.raises(ExportError) as caught:
            export_gguf(job, api.core.paths, merged, folder, "f16", lambda phase: None)
    finally:
        killer.join()
    assert killed, "the converter child was never seen"
    assert str(caught.value) == (
        "the GGUF conversion was killed (SIGKILL), most likely out of memory; nothing was left behind"
    )
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before, "the previous export changed"
    leftovers = [p for p in folder.parent.rglob("*") if ".partial" in p.name]
    assert leftovers == [], leftovers


def _children_running(module: str) -> list[int]:
    """This process's children whose command line names ``module``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and module.encode() in command:
            found.append(int(proc.name))
    return found


@pytest.mark.slow
def test_push_sends_a_gguf_repository(exported, monkeypatch):
    from huggingface_hub import ModelCard, constants

    api, job, _, record, _ = exported
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    folder = Path(record.path).parent
    with FakeHub(TOKEN, user="alice") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = push_gguf(job, folder, TOKEN, export=record)
        assert result.repo_id == f"alice/sft-{job.id}-GGUF"
        assert hub.requests_to("create")[-1].json["visibility"] == "private"
        repo = hub.repos[result.repo_id]
        assert set(repo.files) == {Path(record.path).name, "Modelfile", "README.md"}
        assert repo.files[Path(record.path).name] == Path(record.path).read_bytes()
        card = ModelCard(repo.files["README.md"].decode())
        assert card.data.library_name == "gguf" and "gguf" in card.data.tags
        assert f"llama-server -hf {result.repo_id}:Q8_0" in card.text and f"lms get {result.repo_id}" in card.text


def test_types_and_the_converter_are_refused_with_a_sentence(data_dir, tmp_path, monkeypatch):
    from backend.api import StudioAPI

    api = StudioAPI(data_dir, scheduler="none")
    job = api.core.store.add(parse_spec(tiny_spec(output={"run_name": "my run/1"})))
    assert gguf_file_name(job, "q8_0") == "my-run-1-q8_0.gguf" and GGUF_TYPES == ("f16", "q8_0")
    with pytest.raises(ExportError, match="^the GGUF type 'q4_k_m' is not offered: choose f16 or q8_0 .q4_k_m needs"):
        export_gguf(job, api.core.paths, tmp_path, tmp_path / "out", "q4_k_m", lambda phase: None)
    monkeypatch.setenv(CONVERTER_VAR, str(tmp_path / "nowhere"))
    problem = converter_problem()
    assert problem.startswith("GGUF export needs llama.cpp's converter, which is not installed on this machine: run ")
    assert "`python scripts/install_gguf_converter.py`" in problem and "\n" not in problem
    with pytest.raises(ExportError, match="^GGUF export needs llama.cpp's converter"):
        export_gguf(job, api.core.paths, tmp_path, tmp_path / "out", "f16", lambda phase: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two conversions, each a fresh interpreter importing torch
def test_the_demo_tokenizer_converts_and_a_tokenizer_the_converter_does_not_know_is_a_sentence(
    demo_model_path, tmp_path
):
    from gguf import GGUFReader
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    assert list(REGISTERED_PRE_TOKENIZERS.values()) == ["smollm"]
    convert_model(demo_model_path, tmp_path / "demo.gguf", "f16")
    assert GGUFReader(tmp_path / "demo.gguf").fields["tokenizer.ggml.pre"].contents() == "smollm"

    # The same model with a tokenizer that splits text another way: its hash is in no table.
    other = tmp_path / "other"
    other.mkdir()
    for file in demo_model_path.iterdir():
        (other / file.name).symlink_to(file)
    tokenizer = AutoTokenizer.from_pretrained(demo_model_path)
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    (other / "tokenizer.json").unlink()
    (other / "tokenizer_config.json").unlink()
    tokenizer.save_pretrained(other)
    with pytest.raises(ExportError) as caught:
        convert_model(other, tmp_path / "other.gguf", "f16")
    assert str(caught.value) == (
        "llama.cpp's converter does not know this model's tokenizer (its pre-tokenizer is not in the converter's "
        "table): only models whose tokenizer llama.cpp supports can be exported as GGUF; nothing was left behind"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.gguf", "other"]


def _rows(references: list[str | None]) -> CheckRows:
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(len(references))]
    return CheckRows(prompts, references, [None] * len(references), [None] * len(references), "held-out", None)


def test_the_check_compares_accuracy_with_an_interval_and_keeps_the_answers_that_differ():
    rows = _rows([f"\\boxed{{{i}}}" for i in range(20)])
    merged = [f"= \\boxed{{{i}}}" for i in range(20)]
    gguf = list(merged)
    gguf[3], gguf[7] = "= \\boxed{99}", "= \\boxed{7} "  # one wrong, one other text with the same answer
    check = compare(rows, merged, gguf, "q8_0")
    assert (check.merged_accuracy, check.gguf_accuracy, check.difference) == (1.0, 0.95, pytest.approx(-0.05))
    assert check.ci95 > 0 and check.passed is False and check.differing == 2 and check.agreement == 0.9
    assert [(e.prompt, e.merged, e.gguf) for e in check.examples] == [
        ("q3", "= \\boxed{3}", "= \\boxed{99}"),
        ("q7", "= \\boxed{7}", "= \\boxed{7} "),
    ]
    assert check.sentence == (
        "Accuracy on 20 rows (held-out): merged 100%, q8_0 GGUF 95% (-5 points, ±8), beyond the 1-point tolerance; "
        "2 of the 20 greedy answers differ."
    )
    same = compare(rows, merged, merged, "f16")
    assert (
        same.passed
        and same.difference == 0
        and same.sentence.endswith("within the 1-point tolerance; no answer differs.")
    )

    free = compare(_rows([None, None, None, None]), ["a", "b", "c", "d"], ["a", "b", "c", "x"], "q8_0")
    assert free.scored == "agreement" and free.agreement == 0.75 and free.passed is None
    assert free.merged_accuracy is None and free.sentence.startswith("The q8_0 GGUF gives the merged model's greedy")
