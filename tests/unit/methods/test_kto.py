"""KTO, the fourth method, added through the method table: unpaired rows marked good or bad train the adapter only,
and a job run from the CLI ends with a before/after evaluation, a model card and a TRL CLI config TRL reads back."""

from __future__ import annotations

import json
import threading

import pytest
import torch
import yaml

from backend.core.learning import HEALTHY_DRIFT
from backend.core.spec import DatasetSpec, Method, SpecError, parse_spec
from backend.data.loading import load_training_dataset
from backend.hub.trl_cli import trl_cli_config, trl_cli_yaml
from backend.training.callbacks import StoreReportingCallback
from backend.worker import build_trainer
from tests.helpers import cli, job_data, tiny_spec
from tests.unit.hub.test_trl_cli import parse_like_trl_cli

KTO = {
    "method": "kto",
    "dataset": {"source": "builtin", "name": "feedback-demo"},
    "training": {"max_steps": 3, "batch_size": 2, "learning_rate": 5e-3, "max_length": 128, "save_steps": 100},
}


def test_the_sample_and_conversational_thumbs_load_with_boolean_labels(tmp_path):
    ds, fmt = load_training_dataset(DatasetSpec(source="builtin", name="feedback-demo"), Method.kto)
    assert fmt == "unpaired-preference" and ds.column_names == ["prompt", "completion", "label"]
    assert set(ds["label"]) == {True, False}
    assert ds[0]["prompt"][0]["role"] == "user" and ds[0]["completion"][0]["role"] == "assistant"
    # Plain text rows from a CSV: the label loads as text and is read as a boolean; anything else is refused.
    csv = tmp_path / "thumbs.csv"
    csv.write_text("prompt,completion,label\nHi,Hello!,true\nHi,Go away.,FALSE\n")
    plain, _ = load_training_dataset(DatasetSpec(source="file", name=str(csv)), Method.kto)
    assert plain["label"] == [True, False] and plain["prompt"] == ["Hi", "Hi"]
    csv.write_text("prompt,completion,label\nHi,Hello!,maybe\n")
    with pytest.raises(SpecError, match="'label' must hold true or false; row 0"):
        load_training_dataset(DatasetSpec(source="file", name=str(csv)), Method.kto)


def test_a_one_example_batch_is_refused_before_queueing(paths):
    from backend.training.preflight import check_spec

    with pytest.raises(SpecError, match="training.batch_size: KTO needs at least 2 examples per device"):
        check_spec(parse_spec(tiny_spec(**{**KTO, "training": {**KTO["training"], "batch_size": 1}})), paths.models)


def test_the_example_is_a_valid_kto_job_of_the_arithmetic_model(paths):
    from backend.training.preflight import check_spec
    from tests.helpers import ROOT

    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "kto-demo.yaml").read_text()))
    assert spec.method is Method.kto and spec.dataset.name == "arith-feedback" and spec.eval.holdout_rows
    assert spec.model.name_or_path == "builtin:tiny-qwen3-arith"
    check_spec(spec, paths.models)  # pre-flight: the data loads as KTO rows and the hold-out leaves rows to train


def test_the_trl_cli_export_parses_into_the_trainers_kto_settings(tmp_path):
    from backend.methods.kto import to_kto_config

    spec = parse_spec(tiny_spec(**KTO, kto={"beta": 0.2, "desirable_weight": 1.5, "undesirable_weight": 0.5}))
    text = trl_cli_yaml(spec)
    assert text.splitlines()[1] == "#   trl kto --config training_config.yaml"
    assert yaml.safe_load(text) == trl_cli_config(spec)
    script_args, args, model_args, _ = parse_like_trl_cli("kto", text, tmp_path)
    assert script_args.dataset_name == "YOUR_USERNAME/feedback-demo"
    app = to_kto_config(spec, tmp_path / "out")
    for name in (
        "beta",
        "desirable_weight",
        "undesirable_weight",
        "max_length",
        "max_steps",
        "learning_rate",
        "per_device_train_batch_size",
    ):
        assert getattr(args, name) == getattr(app, name), name
    assert (args.beta, args.desirable_weight, args.undesirable_weight) == (0.2, 1.5, 0.5)
    assert model_args.use_peft


@pytest.mark.slow
def test_kto_trains_the_adapter_only_and_logs_kto_metrics(paths, store):
    spec = parse_spec(tiny_spec(**KTO))
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, _ = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths))
    assert type(trainer).__name__ == "KTOTrainer" and trainer.ref_model is None  # reference = adapter switched off
    before = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters()}
    lora = [n for n in before if "lora_" in n]
    assert lora and any(not torch.equal(before[n], after[n]) for n in lora)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)
    logged = [m for m in store.metrics(job.id) if "loss" in m]
    assert len(logged) == 3 and all("kl" in m for m in logged)


@pytest.mark.slow
def test_a_kto_job_from_the_cli_ends_with_evaluation_model_card_and_trl_config(data_dir, tmp_path):
    from backend.core.paths import DataPaths
    from backend.hub.model_card import build_model_card
    from backend.jobs.store import JobStore

    spec_file = tmp_path / "kto.yaml"
    spec_file.write_text(yaml.safe_dump(tiny_spec(**KTO, eval={"holdout_rows": 6})))
    result = cli("submit", str(spec_file), "--wait", "--json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded"
    evaluation = record["artifacts"]["evaluation"]
    # The gap's parts, and the guards: the desirable answers' likelihood and the greedy answers' match with them.
    assert evaluation["rows"] == 6 and set(evaluation["base"]) == set(evaluation["tuned"]) == {
        "desirable_logprob",
        "undesirable_logprob",
        "logprob_margin",
        "reference_logprob",
        "exact_match",
    }
    assert "eval tuned" in cli("show", record["id"]).stdout

    store = JobStore(DataPaths(data_dir).db)
    job = store.get(record["id"])
    card = str(build_model_card(job, store.metrics(job.id), repo_id="tester/kto-demo"))
    assert "Kahneman-Tversky optimization (KTO)" in card
    assert "| KTO beta | 0.1 |" in card and "| desirable / undesirable weight | 1.0 / 1.0 |" in card
    assert "| logprob_margin |" in card and "trl kto --config training_config.yaml" in card
    assert "last reward margin" in card
    parse_like_trl_cli("kto", trl_cli_yaml(job.spec), tmp_path)


@pytest.mark.slow
def test_thumbs_from_the_chat_become_a_kto_dataset_that_trains(paths, store):
    """What the Chat tab's 👍/👎 record (one side's history each) exports as a KTO file that trains the adapter."""
    from backend.api import StudioAPI

    api = StudioAPI(paths.root, scheduler="none")
    thumbs = api.chat.thumb_log()
    for i in range(6):
        question = {"role": "user", "content": f"What is {i} + {i}?"}
        thumbs.record_turn([question, {"role": "assistant", "content": f"{2 * i}."}], "", True, "tuned", "job-a")
        thumbs.record_turn([question, {"role": "assistant", "content": "No idea."}], "", False, "base", "job-a")
    exported = api.chat.export_preferences(format="kto")
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(rows) == 12 and {r["label"] for r in rows} == {True, False}

    spec = parse_spec(tiny_spec(**{**KTO, "dataset": {"source": "file", "name": str(exported)}}))
    job = store.add(spec)
    trainer, _ = build_trainer(
        spec, paths, job.id, [StoreReportingCallback(store, job.id, threading.Event())], None, job_data(spec, paths)
    )
    assert trainer.train_dataset.num_rows == 12
    before = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert any(
        not torch.equal(before[n], p.detach().float()) for n, p in trainer.model.named_parameters() if n in before
    )


@pytest.mark.slow
def test_a_kto_run_that_games_its_gap_is_called_worse_and_the_chat_agrees(data_dir, tmp_path):
    """The recipe that once ended "Improved" (beta 0.1, lr 2e-3, 300 steps): the held-out gap widens because the
    right answers become far less likely, only less so than the wrong ones. The verdict's guards catch it, and the
    Chat tab's answers on problems no dataset holds, scored by code that shares nothing with KTO's metric, agree."""
    from tests.helpers import ROOT
    from tests.helpers.arith_scoring import chat_tab_scores

    gamed = yaml.safe_load((ROOT / "examples" / "kto-demo.yaml").read_text())
    gamed["kto"] = {"beta": 0.1, "desirable_weight": 1.0, "undesirable_weight": 1.0}
    gamed["training"].update(max_steps=300, learning_rate=2e-3, save_steps=300)
    spec_file = tmp_path / "gamed.yaml"
    spec_file.write_text(yaml.safe_dump(gamed))
    result = cli("submit", str(spec_file), "--wait", "--json", timeout=480)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    learning = record["artifacts"]["learning"]
    assert learning["metric"] == "logprob" and learning["delta"] - learning["ci95"] > 0, "KTO's own metric rose"
    assert learning["verdict"] == "regressed" and record["status_text"] == "succeeded - got worse", learning
    fell = {g["metric"] for g in learning["guards"] if g["fell"]}
    assert "reference_logprob" in fell, learning["sentence"]
    assert ": the model got worse." in learning["sentence"]
    # It drifted far beyond every healthy example (benchmarks/drift.py), and the verdict cautions so, once.
    drift = record["drift"]
    assert drift == learning["drift"] and drift["exceeds"] and drift["mean"] > 2 * HEALTHY_DRIFT, drift
    assert learning["sentence"].count("Caution: it drifted far from the base") == 1
    right, _ = chat_tab_scores(data_dir, record["id"], count=64)
    assert right["tuned"] < right["base"], right
    shown = cli("show", record["id"]).stdout
    assert "succeeded - got worse" in shown and "the model got worse" in shown and "KL from the base" in shown
