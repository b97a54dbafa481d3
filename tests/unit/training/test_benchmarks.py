"""Benchmarks with lm-evaluation-harness on the demo models: the report's arithmetic, the tasks a user can name, a
job whose benchmarks keep a skill it does not train, a job built to damage arithmetic flagged with the drop, and the
eval-only job from the facade and the command line (a finished job, a base model, a JSONL path, bad input)."""

import json
import os
import subprocess
import sys

import pytest

from backend.api import SpecError, StudioAPI
from backend.core.benchmarks import BUILTIN_TASKS, task_info, task_problem, task_score
from backend.core.spec import parse_spec
from backend.jobs.records import JobStatus
from tests.helpers import ROOT, cli, tiny_spec, wait_for, wait_status

ARITH = "builtin:tiny-qwen3-arith"
ROWS = ROOT / "backend" / "assets" / "datasets" / "arith-prompts.jsonl"


def test_a_sure_fall_is_named_and_a_noisy_one_is_not():
    arith = task_info("studio_arith")
    start = {i: 1.0 if i % 2 else 0.0 for i in range(60)}
    worse = {i: 0.0 for i in range(60)}
    lost = task_score(arith, "studio_arith", {"base": start, "tuned": worse}, {"base": 0.06, "tuned": 0.0})
    assert lost.dropped and lost.n == 60 and lost.base == 0.5 and lost.tuned == 0.0 and lost.base_stderr == 0.06
    assert lost.sentence.startswith("studio_arith -50 points ±") and lost.sentence.endswith("it lost arithmetic.")
    noisy = {i: start[i] if i != 1 else 0.0 for i in range(60)}
    kept = task_score(arith, "studio_arith", {"base": start, "tuned": noisy}, {})
    assert not kept.dropped and "kept" in kept.sentence
    # A staged job is measured against its parent's adapter, not the base.
    staged = task_score(arith, "studio_arith", {"base": worse, "start": start, "tuned": start}, {})
    assert staged.delta == 0 and not staged.dropped and "against the start" in staged.sentence


def test_task_names_are_checked_with_a_sentence(tmp_path):
    assert task_problem("studio_choice", None, False) is None and task_problem("arc_easy", None, False) is None
    assert "is not a task" in task_problem("arc_hard_typo", None, True)
    assert "is not a file" in task_problem(str(tmp_path / "missing.jsonl"), None, True)
    assert "only the local user" in task_problem(str(ROWS), None, False)
    assert task_problem(str(ROWS), None, True) is None
    unscored = tmp_path / "unscored.jsonl"
    unscored.write_text('{"prompt": "What is 2 + 2?"}\n')
    assert "a prompt and a solution column" in task_problem(str(unscored), None, True)
    with pytest.raises(SpecError, match="benchmarks.limit"):
        parse_spec({"benchmarks": {"tasks": ["studio_arith"], "limit": 0}})
    with pytest.raises(SpecError, match="at least one task"):
        parse_spec({"evaluate": {}})


def test_base_and_adapter_are_scored_on_the_same_items_in_one_model(models_dir):
    """The runner on a loaded PeftModel: a random LoRA side and the base (adapter off), a JSONL task from a path."""
    from peft import LoraConfig, get_peft_model

    from backend.core.spec import ModelSpec, QuantizationSpec
    from backend.models.inference import load_for_inference
    from backend.training.benchmarks import run_benchmarks

    model, tokenizer = load_for_inference(ModelSpec(name_or_path=ARITH), QuantizationSpec(), models_dir)
    model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", init_lora_weights=False))
    report = run_benchmarks(
        model, tokenizer, ["studio_choice", str(ROWS)], 40, {"tuned": "default", "base": "__base__"}
    )
    choice, rows = report.tasks["studio_choice"], report.tasks[str(ROWS)]
    assert choice.n == rows.n == 40 and choice.metric == "acc" and rows.metric == "accuracy"
    # The arith model's own skills, well above chance (25% for four choices): the base side really is the base.
    assert choice.base >= 0.35 and rows.base >= 0.2
    assert choice.base_stderr and choice.tuned_stderr and rows.base_stderr
    assert choice.tuned != choice.base or rows.tuned != rows.base, "a random adapter changes the answers"


def test_a_preset_that_needs_the_hub_offline_is_a_reported_error(models_dir, paths):
    """lm-eval's standard tasks read their data from the Hub: offline (as here) that is the report's error, which never
    fails a trained job; an eval-only job fails with the same sentence."""
    from backend.core.spec import ModelSpec, QuantizationSpec
    from backend.models.inference import load_for_inference
    from backend.training.benchmark_jobs import scored_benchmarks

    model, tokenizer = load_for_inference(ModelSpec(name_or_path=ARITH), QuantizationSpec(), models_dir)
    spec = parse_spec({"benchmarks": {"tasks": ["arc_easy"], "limit": 5}})
    report = scored_benchmarks(model, tokenizer, spec, {"base": None}, paths, "job", None, "model")
    assert report.tasks == {} and "allenai/ai2_arc" in report.error and "\n" not in report.error


@pytest.mark.slow
def test_an_unrelated_job_keeps_its_skills_and_a_damaging_one_is_flagged(paths, store, scheduler_factory):
    """Benchmark-style: SFT with a large learning rate on unrelated chat text wrecks the arith model's arithmetic and is
    flagged with the drop; a short arithmetic SFT keeps both skills, the one it does not train included."""
    benchmarks = {"tasks": ["studio_arith", "studio_choice"], "limit": 60}
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    training = {"max_steps": 12, "batch_size": 4, "max_length": 128, "save_steps": 100}
    harsh = api.jobs.submit(
        tiny_spec(model={"name_or_path": ARITH}, training={**training, "learning_rate": 3e-2}, benchmarks=benchmarks)
    ).job
    # The arith SFT recipe's data and rate for a few steps: real training of greedy answers, which is not picking the
    # right result among four by log-likelihood.
    gentle = api.jobs.submit(
        tiny_spec(
            model={"name_or_path": ARITH},
            dataset={"name": "arith-sft"},
            training={**training, "max_steps": 20, "learning_rate": 2e-3, "batch_size": 8},
            eval={"holdout_rows": 16},
            benchmarks=benchmarks,
        )
    ).job
    scheduler_factory(max_concurrent=1)
    harsh = wait_status(store, harsh.id, {JobStatus.succeeded, JobStatus.failed}, 300)
    gentle = wait_status(store, gentle.id, {JobStatus.succeeded, JobStatus.failed}, 300)
    assert harsh.status is JobStatus.succeeded and gentle.status is JobStatus.succeeded, (harsh.error, gentle.error)

    lost = harsh.artifacts.benchmarks
    assert lost is not None and lost.error is None
    arith = lost.tasks["studio_arith"]
    assert arith.n == 60 and arith.base is not None and arith.tuned is not None and arith.start is None
    assert arith.dropped and arith.delta < -arith.ci95, arith
    assert any(s.startswith("studio_arith -") and "it lost arithmetic" in s for s in lost.drops), lost.drops
    items = json.loads((paths.job_dir(harsh.id) / "benchmarks.json").read_text())
    assert set(items["studio_arith"]) == {"base", "tuned"} and len(items["studio_arith"]["base"]) == 60
    assert sum(items["studio_arith"]["base"].values()) / 60 == pytest.approx(arith.base), "the items behind the score"
    # The verdict hears it: a lost skill is a guard that fell, so this job did not get better, whatever its loss did.
    learning = harsh.artifacts.learning
    guards = {g.metric: g for g in learning.guards}
    assert guards["bench:studio_arith"].fell and learning.verdict in ("regressed", "worse"), learning.sentence
    assert "benchmark studio_arith (arithmetic) fell" in learning.sentence

    kept = gentle.artifacts.benchmarks
    assert kept is not None and kept.drops == []
    bench_guards = [g for g in gentle.artifacts.learning.guards if g.metric.startswith("bench:")]
    assert len(bench_guards) == 2 and not any(g.fell for g in bench_guards), gentle.artifacts.learning.sentence
    assert not kept.tasks["studio_choice"].dropped and not kept.tasks["studio_arith"].dropped
    assert "kept" in kept.tasks["studio_choice"].sentence
    assert kept.tasks["studio_choice"].base >= 0.35, "the untrained skill was there to keep"
    assert kept.tasks["studio_choice"].ci95 > 0, "the job changed some answers: the interval comes from the items"

    # The eval-only job on the finished damaged job, through the same queue: the same figures, paired again.
    evaluated = api.benchmarks.evaluate(harsh.id, ["studio_arith"], 60).job
    assert evaluated.spec.evaluate.job_id == harsh.id and evaluated.spec.model.name_or_path == ARITH
    done = wait_status(store, evaluated.id, {JobStatus.succeeded, JobStatus.failed}, 300)
    assert done.status is JobStatus.succeeded, done.error
    again = done.artifacts.benchmarks.tasks["studio_arith"]
    assert (again.base, again.tuned, again.dropped) == (arith.base, arith.tuned, True)
    assert done.progress["step"] == done.progress["total_steps"] and done.artifacts.adapter_dir is None


@pytest.mark.slow
def test_a_staged_job_is_measured_against_its_parent(paths, store, scheduler_factory):
    """Base, start (the parent's adapter) and tuned on the same items, after training and in an eval-only job."""
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    training = {"max_steps": 6, "batch_size": 8, "max_length": 128, "learning_rate": 2e-3, "save_steps": 100}
    parent = api.jobs.submit(
        tiny_spec(model={"name_or_path": ARITH}, dataset={"name": "arith-sft"}, training=training)
    ).job
    child = api.jobs.submit(
        tiny_spec(
            model={"name_or_path": ARITH, "parent_job_id": parent.id},
            training={**training, "learning_rate": 2e-2},
            benchmarks={"tasks": ["studio_choice"], "limit": 20},
        )
    ).job
    scheduler_factory(max_concurrent=1)
    child = wait_status(store, child.id, {JobStatus.succeeded, JobStatus.failed}, 300)
    assert child.status is JobStatus.succeeded, child.error
    score = child.artifacts.benchmarks.tasks["studio_choice"]
    assert None not in (score.base, score.start, score.tuned) and score.n == 20
    assert score.delta == pytest.approx(score.tuned - score.start) and "against the start" in score.sentence

    evaluated = api.benchmarks.evaluate(child.id, ["studio_choice"], 20).job
    done = wait_status(store, evaluated.id, {JobStatus.succeeded, JobStatus.failed}, 300)
    assert done.status is JobStatus.succeeded, done.error
    again = done.artifacts.benchmarks.tasks["studio_choice"]
    assert (again.base, again.start, again.tuned) == (score.base, score.start, score.tuned)


@pytest.mark.slow
def test_an_eval_only_job_shows_its_progress_and_stops_when_cancelled(paths, store, scheduler_factory):
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    job = api.benchmarks.evaluate(ARITH, ["studio_arith", "studio_choice"], 200).job
    scheduler_factory(max_concurrent=1)

    def phase() -> str:
        return (store.get(job.id).progress or {}).get("phase", "")

    wait_for(lambda: phase().startswith("benchmarks: studio_arith"), 120, what="the first task to start")
    assert store.get(job.id).progress["total_steps"] == 2
    api.jobs.cancel(job.id)
    done = wait_status(store, job.id, {JobStatus.cancelled, JobStatus.succeeded, JobStatus.failed}, 120)
    assert done.status is JobStatus.cancelled, done.error
    assert done.artifacts.cancel_note == "stopped by request after 1 of 2 task runs", "at the next task, not killed"


@pytest.mark.slow
def test_eval_command_on_a_job_a_model_and_a_jsonl_and_bad_input_queues_nothing(
    data_dir, paths, store, scheduler_factory
):
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    for args, said in (
        (("--tasks", "no_such_task"), "is not a task"),
        (("--tasks", str(data_dir / "absent.jsonl")), "is not a file"),
        (("--tasks", "studio_arith", "--limit", "0"), "benchmarks.limit"),
        (("--tasks", ""), "at least one task"),
    ):
        refused = cli("eval", ARITH, *args)
        assert refused.returncode == 2 and said in refused.stderr and "Traceback" not in refused.stderr, refused
    refused = cli("eval", "no-such-model-or-job", "--tasks", "studio_arith")
    assert refused.returncode == 2 and "model.name_or_path" in refused.stderr
    assert api.jobs.list_jobs() == [], "a refused eval queues nothing"

    # A finished tiny job: its adapter (tuned) and base on the same items, with a JSONL task from a path.
    trained = api.jobs.submit(tiny_spec(model={"name_or_path": ARITH}, training={"max_steps": 2})).job
    scheduler_factory(max_concurrent=1)  # it serves the CLI's eval jobs too (one scheduler per data dir)
    assert wait_status(store, trained.id, {JobStatus.succeeded, JobStatus.failed}).status is JobStatus.succeeded
    result = cli("eval", trained.id, "--tasks", f"studio_choice,{ROWS}", "--limit", "20", "--wait", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded"
    scores = record["artifacts"]["benchmarks"]["tasks"]
    assert set(scores) == {"studio_choice", str(ROWS)}
    for score in scores.values():
        assert score["n"] == 20 and score["base"] is not None and score["tuned"] is not None
        assert score["base_stderr"] is not None and score["ci95"] is not None and score["start"] is None
    assert store.get(trained.id).status is JobStatus.succeeded
    shown = cli("show", record["id"]).stdout
    assert "method" in shown and " eval\n" in shown and f"job {trained.id}" in shown and "bench studio_choice" in shown

    # A base model by name: one side.
    result = cli("eval", ARITH, "--tasks", "studio_arith", "--limit", "10", "--wait", "--json")
    assert result.returncode == 0, result.stderr
    score = json.loads(result.stdout)["artifacts"]["benchmarks"]["tasks"]["studio_arith"]
    assert score["n"] == 10 and score["base"] is not None and score["tuned"] is None and score["delta"] is None


def test_the_builtin_tasks_ship_their_files():
    from backend.core.benchmarks import BENCHMARK_ASSETS

    for name in BUILTIN_TASKS:
        lines = (BENCHMARK_ASSETS / f"{name}.jsonl").read_text().splitlines()
        assert len(lines) == 200 and all(json.loads(line) for line in lines)


def test_another_users_job_cannot_be_evaluated_by_naming_it_in_a_spec(paths, store):
    """The Evaluate button reads the job as its user may; a hand-written spec naming someone else's job must meet the
    same rule at submit, or the worker would load that user's adapter and report its scores."""
    from backend.core.users import User
    from backend.jobs.records import JobStatus

    alice, bob = User("alice"), User("bob")
    adapter = paths.root / "alice-adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    job = store.add(parse_spec(tiny_spec(model={"name_or_path": ARITH}, owner="alice")))
    store.claim_next()
    store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    try:
        spec = {
            "model": {"name_or_path": ARITH},
            "evaluate": {"job_id": job.id},
            "benchmarks": {"tasks": ["studio_arith"]},
        }
        with pytest.raises(SpecError, match=f"evaluate.job_id: there is no job '{job.id}'"):
            api.jobs.submit(spec, user=bob)
        with pytest.raises(SpecError) as refused:  # to bob the id names no job of his: it is read as a model name
            api.benchmarks.evaluate(job.id, ["studio_arith"], 5, user=bob)
        assert "model.name_or_path" in str(refused.value) and "adapter" not in str(refused.value)
        assert [j.id for j in api.jobs.list_jobs()] == [job.id], "nothing queued for bob"
        queued = api.jobs.submit(spec, user=alice).job  # her own job: allowed
        assert queued.spec.evaluate.job_id == job.id and queued.owner == "alice"
        store.finish(job.id, JobStatus.succeeded)
        (adapter / "adapter_config.json").unlink()
        adapter.rmdir()
        with pytest.raises(SpecError, match="has no saved adapter to evaluate"):
            api.jobs.submit(spec, user=alice)
    finally:
        api.close()


def test_importing_lm_eval_leaves_the_environment_as_it_was():
    """lm_eval's import sets HF_XET_HIGH_PERFORMANCE; left set in a process that starts workers, the worker pool
    refused every later job ("the job's environment differs from the pool's"). Seen in a fresh interpreter."""
    code = (
        "import os, sys\n"
        "from backend.training.benchmarks import _import_lm_eval\n"
        "_import_lm_eval()\n"
        "import lm_eval.models.huggingface\n"
        "assert 'lm_eval' in sys.modules\n"
        "print(sorted(k for k in ('HF_XET_HIGH_PERFORMANCE', 'HF_HUB_ENABLE_HF_TRANSFER') if k in os.environ))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_XET_HIGH_PERFORMANCE", "HF_HUB_ENABLE_HF_TRANSFER")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
