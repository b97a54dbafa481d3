"""Bad input is refused at submit time with a clear message, and nothing reaches the queue."""

import json

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError
from tests.helpers import tiny_spec


def _refused(api, spec, *fragments):
    with pytest.raises(SpecError) as err:
        api.jobs.submit(spec)
    text = str(err.value)
    for fragment in fragments:
        assert fragment in text, text
    assert api.jobs.list_jobs() == [], "a refused job must not be stored"
    assert not any((api.core.paths.root / "jobs").iterdir())
    return text


def test_nonexistent_model_folder(api, tmp_path):
    _refused(api, tiny_spec(model={"name_or_path": str(tmp_path / "missing")}), "folder", "does not exist")


def test_folder_that_is_not_a_model(api, tmp_path):
    (tmp_path / "notamodel").mkdir()
    _refused(api, tiny_spec(model={"name_or_path": str(tmp_path / "notamodel")}), "has no config.json")


def test_unknown_hub_model_offline(api):
    _refused(
        api,
        tiny_spec(model={"name_or_path": "nobody/does-not-exist"}),
        "'nobody/does-not-exist' is not in the local cache and the Hub is not reachable from this machine "
        "(HF_HUB_OFFLINE is set)",
    )


# Check and submit a Hub model id and a Hub dataset id in a fresh process (huggingface_hub reads HF_ENDPOINT and
# HF_HUB_OFFLINE when imported), timing only the calls.
_HUB_LOOKUPS = """
import json, sys, time
from backend.api import StudioAPI
from backend.core.spec import SpecError
api = StudioAPI(sys.argv[1], scheduler="none")
import datasets, huggingface_hub  # imported before the clock starts: importing is not looking up
out = []
for spec in ({"method": "sft", "model": {"name_or_path": "nobody/does-not-exist"}},
             {"method": "sft", "model": {"name_or_path": "builtin:tiny-qwen3"},
              "dataset": {"source": "hub", "name": "nobody/no-data"}}):
    for call in (api.jobs.check, api.jobs.submit):
        started = time.monotonic()
        try:
            call(spec)
            message = None
        except SpecError as exc:
            message = str(exc)
        out.append({"seconds": time.monotonic() - started, "message": message})
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    "env",
    [{"HF_ENDPOINT": "http://127.0.0.1:9"}, {"HF_HUB_OFFLINE": "1"}],
    ids=["unreachable-endpoint", "hf-hub-offline"],
)
def test_hub_lookups_without_a_hub_fail_at_once_saying_so(paths, env):
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT")}
    run = subprocess.run(
        [sys.executable, "-c", _HUB_LOOKUPS, str(paths.root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    model_check, model_submit, data_check, data_submit = json.loads(run.stdout.splitlines()[-1])
    for result in (model_check, model_submit):
        assert result["seconds"] < 2, result
        assert "the Hub is not reachable from this machine" in result["message"], result
        assert "was not found" not in result["message"] and "check the id" not in result["message"]
    for result in (data_check, data_submit):
        assert result["seconds"] < 2 and result["message"] and "dataset.name" in result["message"], result
    if "HF_ENDPOINT" in env:
        assert "the Hub is not reachable from this machine" in data_check["message"]
    assert StudioAPI(paths.root, scheduler="none").jobs.list_jobs() == []


def test_any_http_answer_means_the_hub_is_reachable(monkeypatch):
    """A Hub that answers, even with an error status (a test server without that route), is reachable."""
    import http.server
    import threading

    from backend.platform import hub_status

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        assert hub_status.hub_reachable()
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        assert not hub_status.hub_reachable()  # another endpoint: probed again, not the cached answer
    finally:
        server.shutdown()


def test_dataset_file_that_is_not_jsonl(api, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is { not json\n")
    _refused(api, tiny_spec(dataset={"source": "file", "name": str(bad)}), "could not be read as JSONL")


def test_missing_columns_for_the_method(api, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    _refused(
        api,
        tiny_spec(dataset={"source": "file", "name": str(data)}),
        "SFT needs columns messages or prompt/completion or text",
        "the dataset has question, answer",
    )


def test_empty_dataset(api, tmp_path):
    data = tmp_path / "empty.jsonl"
    data.write_text("")
    _refused(api, tiny_spec(dataset={"source": "file", "name": str(data)}), "dataset")


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("learning_rate", -1e-4, "must be greater than 0"),
        ("batch_size", 0, "must be from 1 to 1024, or auto"),
        ("max_steps", -5, "must be greater than 0"),
        ("epochs", 0, "must be greater than 0"),
    ],
)
def test_non_positive_hyper_parameters(api, field, value, problem):
    _refused(api, tiny_spec(training={field: value}), f"training.{field}: {problem}")


def test_model_and_data_problems_are_reported_together(api, tmp_path):
    text = _refused(
        api,
        tiny_spec(model={"name_or_path": str(tmp_path / "nope")}, dataset={"source": "builtin", "name": "nope"}),
        "model.name_or_path",
        "dataset.name",
    )
    assert len(text.splitlines()) == 2


def test_a_good_spec_is_queued_with_its_position(api):
    first = api.jobs.submit(tiny_spec())
    second = api.jobs.submit(tiny_spec(), owner="bob")
    assert first.queue_position == 1 and second.queue_position == 2
    assert second.job.owner == "bob" and [j.id for j in api.jobs.list_jobs()] == [first.job.id, second.job.id]


def test_truncation_and_memory_advice_is_returned_and_kept_with_the_job(api):
    cut = api.jobs.submit(tiny_spec(training={"max_length": 16}))
    assert any("longer than training.max_length (16 tokens)" in w for w in cut.warnings)
    assert api.jobs.get_job(cut.job.id).artifacts.preflight_warnings == cut.warnings
    # Packed, every sequence fills max_length (short rows alone would not: the estimate counts their real length).
    huge = api.jobs.submit(
        tiny_spec(lora={"enabled": False}, training={"batch_size": 1024, "max_length": 100000}, sft={"packing": True})
    )
    from backend.platform.hardware import detect_device

    on_gpu = detect_device().kind == "cuda"  # 4-bit loading is advised only where it helps
    assert any(w.startswith("Estimated") and "enable LoRA" in w and ("4-bit" in w) == on_gpu for w in huge.warnings)
    assert api.jobs.submit(tiny_spec()).warnings == []


def test_chat_data_on_a_model_without_chat_template_is_refused(api, demo_model_path, tmp_path):
    import shutil

    model = tmp_path / "no-template"
    shutil.copytree(demo_model_path, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "chat_template.jinja").unlink(missing_ok=True)
    _refused(api, tiny_spec(model={"name_or_path": str(model)}), "has no chat template")


def test_facade_preview_renders_through_the_chat_template(api):
    preview = api.datasets.preview(tiny_spec(), rows=2)
    assert preview.format == "conversational" and len(preview.rows) == 2
    assert "<|im_start|>user" in preview.rows[0].rendered and preview.rows[0].n_tokens > 0


def test_facade_reward_bench_scores_typed_completions(api):
    scored = api.datasets.score_rewards(
        [{"name": "exact_match", "column": "answer", "weight": 2.0}, {"name": "length", "target_length": 1}],
        ["Paris", "I think it is Lyon"],
        row={"answer": "paris"},
    )
    assert [s["scores"]["exact_match"] for s in scored] == [1.0, 0.0]
    assert scored[0]["total"] == 3.0
    with pytest.raises(SpecError, match="answer"):
        api.datasets.score_rewards([{"name": "exact_match", "column": "answer"}], ["x"], row={})


def test_hold_out_that_leaves_nothing_to_train_on_is_refused_at_submit(api):
    _refused(
        api,
        tiny_spec(eval={"holdout_rows": 72}),
        "eval.holdout_rows: holding out 72 rows leaves none of the 72 to train on; set it to 7",
    )


def test_a_dataset_smaller_than_a_batch_or_a_few_steps_is_warned_about_for_every_method(api, tmp_path):
    """Issue 24: DPO on 1 row and KTO on 2 rows ran 30 steps without a word."""
    import json

    def data(name: str, rows: list[dict]) -> dict:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"source": "file", "name": str(path)}

    pair = {"prompt": "2+2?", "chosen": "4", "rejected": "5"}
    thumb = [
        {"prompt": "2+2?", "completion": "4", "label": True},
        {"prompt": "2+3?", "completion": "6", "label": False},
    ]
    chats = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]} for i in range(4)
    ]
    cases = {
        "dpo": (data("one.jsonl", [pair]), "1 row to train on, fewer than one step takes (2 rows per step)"),
        "kto": (data("two.jsonl", thumb), "2 rows to train on, fewer than 3 steps' worth (2 rows per step)"),
        "sft": (data("four.jsonl", chats), "4 rows to train on, fewer than 3 steps' worth (2 rows per step)"),
    }
    for method, (dataset, said) in cases.items():
        spec = tiny_spec(method=method, dataset=dataset, training={"max_steps": 30}, eval={"holdout_fraction": 0})
        warnings, _ = api.jobs.check(spec)
        tiny = [w for w in warnings if w.startswith("the dataset has")]
        assert len(tiny) == 1 and said in tiny[0] and "30 steps go over it" in tiny[0], (method, warnings)
    # GRPO counts prompts: a batch of 8 completions in groups of 4 is 2 prompts a step.
    prompts = data("prompts.jsonl", [{"prompt": f"{i}+1?"} for i in range(5)])
    grpo = tiny_spec(
        method="grpo",
        dataset=prompts,
        grpo={"num_generations": 4, "max_completion_length": 8, "rewards": [{"name": "length", "target_length": 3}]},
        training={"batch_size": 8, "max_steps": 30},
        eval={"holdout_fraction": 0},
    )
    assert any("5 rows to train on, fewer than 3 steps' worth (2 rows per step)" in w for w in api.jobs.check(grpo)[0])
    many = tiny_spec(dataset=data("many.jsonl", chats * 2), eval={"holdout_fraction": 0})  # 8 rows, 2 a step: enough
    assert not [w for w in api.jobs.check(many)[0] if w.startswith("the dataset has")]
