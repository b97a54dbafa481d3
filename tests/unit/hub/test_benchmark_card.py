"""The model card of a job with benchmarks: the table of base and tuned with the skill lost, and the Hub's
``model-index`` results in the YAML front matter, as huggingface_hub reads them back."""

import json

import pytest
import yaml

from backend.api import StudioAPI
from backend.core.benchmarks import build_report, task_info, task_score
from backend.core.spec import parse_spec
from backend.hub.model_card import build_model_card
from backend.hub.publish import push_job
from backend.jobs.records import JobStatus
from tests.helpers import tiny_spec, wait_status
from tests.helpers.hub_server import FakeHub

TOKEN = "hf_test_token_0123456789"


def test_the_card_carries_the_benchmarks_and_their_model_index(store):
    base = {i: 1.0 if i < 30 else 0.0 for i in range(60)}
    tuned = {i: 1.0 if i < 3 else 0.0 for i in range(60)}
    arith = task_score(task_info("studio_arith"), "studio_arith", {"base": base, "tuned": tuned}, {"base": 0.06})
    choice = task_score(task_info("studio_choice"), "studio_choice", {"base": base, "tuned": base}, {})
    job = store.add(parse_spec(tiny_spec(output={"run_name": "bench-card"})))
    store.merge_artifacts(job.id, benchmarks=build_report({"studio_arith": arith, "studio_choice": choice}, 60, "job"))
    card = build_model_card(store.get(job.id), [], repo_id="tester/bench-card")

    body = card.text
    assert "## Benchmarks" in body
    assert "| studio_arith | accuracy | 60 | 50.0% ± 6.0 | - | 5.0% | -45.0 ±" in body and "(lost)" in body
    assert "Skills lost: studio_arith -45 points" in body and "it lost arithmetic." in body

    front = yaml.safe_load(str(card).split("---")[1])
    (entry,) = front["model-index"]
    assert entry["name"] == "bench-card"
    results = {r["dataset"]["name"]: r for r in entry["results"]}
    assert set(results) == {"studio_arith", "studio_choice"}
    assert results["studio_arith"]["task"]["type"] == "text-generation"
    (metric,) = results["studio_arith"]["metrics"]
    assert metric["type"] == "accuracy" and metric["value"] == 0.05 and "60 items" in metric["name"]
    assert card.data.eval_results[0].metric_value == 0.05, "huggingface_hub reads the index back"


def test_a_card_without_benchmarks_has_no_model_index(store):
    job = store.add(parse_spec(tiny_spec()))
    card = build_model_card(store.get(job.id), [])
    assert "model-index" not in str(card) and "## Benchmarks" not in card.text


@pytest.mark.slow
def test_a_pushed_job_carries_its_benchmarks_to_the_hub(paths, store, scheduler_factory, monkeypatch):
    from huggingface_hub import ModelCard, constants

    api = StudioAPI(data_dir=paths.root, scheduler="none")
    spec = tiny_spec(
        model={"name_or_path": "builtin:tiny-qwen3-arith"},
        training={"max_steps": 2},
        benchmarks={"tasks": ["studio_choice"], "limit": 10},
        output={"run_name": "benchmarked"},
    )
    job = api.jobs.submit(spec).job
    scheduler_factory(max_concurrent=1)
    job = wait_status(store, job.id, {JobStatus.succeeded, JobStatus.failed})
    assert job.status is JobStatus.succeeded, job.error
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the fake Hub is local
    with FakeHub(TOKEN, user="tester") as hub:
        push_job(job, paths, store, TOKEN, endpoint=hub.url)
        repo = hub.repos["tester/benchmarked"]
    pushed = json.loads(repo.files["benchmarks.json"])
    assert pushed["tasks"]["studio_choice"]["n"] == 10 and pushed["tasks"]["studio_choice"]["tuned"] is not None
    card = ModelCard(repo.files["README.md"].decode())
    (result,) = card.data.eval_results
    assert result.dataset_name == "studio_choice" and result.metric_value == round(
        pushed["tasks"]["studio_choice"]["tuned"], 4
    )
