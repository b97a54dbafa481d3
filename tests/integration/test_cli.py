"""The command line, run as a real subprocess against a fresh data dir: submit --wait, list, show, cancel; and, in
process on stored records (nothing trains), how it prints the learning verdict and the no-signal warning."""

import json
import os
import re
import time

import pytest
import yaml

from backend.core.paths import DataPaths
from backend.core.spec import parse_spec
from backend.jobs.records import JobStatus
from backend.jobs.scheduler import Scheduler
from tests.helpers import cli, tiny_spec, wait_for, wait_status
from tests.helpers.arith_scoring import chat_tab_scores

pytestmark = pytest.mark.slow


def test_submit_wait_runs_the_example_to_a_saved_adapter_with_a_progress_bar(data_dir):
    # One training run checks both faces of --wait: the progress bar with the loss, then the record it prints.
    # (--wait --json, which prints the record as JSON instead, is checked by the failed-job test below.)
    result = cli("submit", "examples/sft-demo.yaml", "--wait")
    assert result.returncode == 0, result.stderr
    assert "150/150" in result.stderr and "loss=" in result.stderr, "the training bar ends full"
    assert "evaluating: 256 / 256 rows" in result.stderr, "then the evaluation's rows follow"
    assert "status" in result.stdout and "succeeded" in result.stdout
    assert "Held-out exact-match accuracy" in result.stdout, "--wait prints the before -> after"
    assert "improved" in result.stdout, "SFT on arith-sft raises held-out exact-match accuracy"

    listed = json.loads(cli("list", "--json").stdout)
    assert len(listed) == 1 and listed[0]["status"] == "succeeded"
    record = json.loads(cli("show", listed[0]["id"], "--json").stdout)
    assert record["status"] == "succeeded"
    assert os.path.isfile(os.path.join(record["artifacts"]["adapter_dir"], "adapter_model.safetensors"))
    assert record["last_metrics"]["loss"] > 0 and record["progress"]["step"] == 150
    shown = cli("show", record["id"])
    assert shown.returncode == 0 and "adapter dir" in shown.stdout and "succeeded" in shown.stdout
    # The detached scheduler the CLI started leaves once the queue is empty.
    wait_for(lambda: not Scheduler.is_running(DataPaths(data_dir)), 30)
    _chat_tab_answers_are_readable_and_the_tuned_side_is_right_more_often(data_dir, record["id"])


def _chat_tab_answers_are_readable_and_the_tuned_side_is_right_more_often(data_dir, job_id, count=96):
    """Scored from the outside (tests/helpers/arith_scoring.py: the Chat tab's path, on problems no dataset holds)."""
    right, readable = chat_tab_scores(data_dir, job_id, count)
    assert min(readable.values()) >= 0.9 * count, readable  # "a + b = \boxed{c}", not gibberish
    assert right["tuned"] >= right["base"] + 0.05 * count, right


# Each example's own metric on held-out rows of builtin:tiny-qwen3-arith (problems neither it nor the job trained on).
EXAMPLE_METRICS = {
    "dpo-demo": ("preference_accuracy", 128),
    "kto-demo": ("logprob", 256),
    "grpo-demo": ("reward/total", 256),
    "rloo-demo": ("reward/total", 256),
}


@pytest.mark.parametrize("example", sorted(EXAMPLE_METRICS))
def test_method_examples_make_the_model_better_on_held_out_rows(data_dir, example):
    """A benchmark, not a smoke test: the learning verdict is 'improved', i.e. the paired bootstrap's 95% interval
    of after - before on the held-out rows excludes zero."""
    result = cli("submit", f"examples/{example}.yaml", "--wait", "--json", timeout=480)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded"
    metric, rows = EXAMPLE_METRICS[example]
    evaluation = record["artifacts"]["evaluation"]
    assert evaluation["rows"] == rows
    assert set(evaluation["base"]) == set(evaluation["tuned"])
    learning = record["artifacts"]["learning"]
    assert learning["metric"] == metric and learning["rows"] == rows, learning
    assert learning["verdict"] == "improved", learning["sentence"]
    assert learning["delta"] - learning["ci95"] > 0 and learning["after"] > learning["before"]
    if example == "dpo-demo":  # preferring right answers must not cost greedy accuracy
        assert evaluation["tuned"]["exact_match"] >= evaluation["base"]["exact_match"] - 0.03, evaluation
    if example in ("grpo-demo", "rloo-demo"):  # TRL's accuracy reward: the reward is held-out greedy accuracy
        assert learning["label"] == "held-out accuracy"
    assert not any(g["fell"] for g in learning["guards"]), learning["sentence"]
    if example in ("dpo-demo", "kto-demo"):  # accuracy and the right answers' likelihood were checked, and held
        assert {g["metric"] for g in learning["guards"]} == {"exact_match", "reference_logprob"}, learning
    if example == "kto-demo":  # the gap is KTO's own metric: the answers must get better where no metric looks
        _chat_tab_answers_are_readable_and_the_tuned_side_is_right_more_often(data_dir, record["id"])
    shown = cli("show", record["id"]).stdout
    assert learning["sentence"] in shown and "eval tuned" in shown


def test_failed_job_makes_wait_exit_non_zero(data_dir, tmp_path, demo_model_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(demo_model_path, model)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(model={"name_or_path": str(model)})))
    (model / "tokenizer.json").unlink()  # passes pre-flight (config.json is there), fails in the worker
    (model / "tokenizer_config.json").unlink()
    result = cli("submit", str(spec), "--wait", "--json")
    assert result.returncode == 1
    record = json.loads(result.stdout)  # --wait --json: the finished record, as JSON, on stdout
    assert record["status"] == "failed" and record["id"] and record["error"]


def test_bad_spec_file_is_refused_with_exit_2_and_nothing_queued(data_dir, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("training:\n  learning_rate: -1\n  batch_size: 0\n")
    result = cli("submit", str(spec))
    assert result.returncode == 2
    assert (
        "The job was not queued" in result.stderr
        and "training.batch_size: must be from 1 to 1024, or auto" in result.stderr
    )
    assert json.loads(cli("list", "--json").stdout) == []
    assert cli("submit", str(tmp_path / "missing.yaml")).returncode == 2


def test_an_unknown_built_in_model_is_a_sentence_naming_the_built_in_ones(data_dir, tmp_path):
    """It reached the Hub client as a repo id and came back as HFValidationError's traceback (issue 24)."""
    spec = tmp_path / "nope.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(model={"name_or_path": "builtin:nope"})))
    result = cli("submit", str(spec))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert (
        "model.name_or_path: unknown built-in model; the built-in models are builtin:tiny-qwen3, "
        "builtin:tiny-qwen3-arith (got 'builtin:nope')"
    ) in result.stderr
    assert json.loads(cli("list", "--json").stdout) == []


def test_cancel_a_queued_job_and_unknown_ids(data_dir, store, tmp_path):
    # Hold the scheduler lock so the submitted job stays queued while we cancel it.
    holder = Scheduler(DataPaths(data_dir))
    assert holder.try_acquire()
    try:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(tiny_spec()))
        submitted = json.loads(cli("submit", str(spec), "--json").stdout)
        assert submitted["status"] == "queued" and submitted["queue_position"] == 1
        result = cli("cancel", submitted["id"])
        assert result.returncode == 0 and "cancelled" in result.stdout
        assert store.get(submitted["id"]).status is JobStatus.cancelled
        again = cli("cancel", submitted["id"])
        assert again.returncode == 2 and "already ended" in again.stderr
        assert cli("show", "no-such-job").returncode == 2
    finally:
        holder.release()


def test_submit_without_wait_still_runs_the_job(data_dir, store, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec()))
    job_id = json.loads(cli("submit", str(spec), "--json").stdout)["id"]
    assert wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed}).status is JobStatus.succeeded


def test_warm_up_queues_the_sft_then_the_grpo_job_that_waits_for_it(data_dir, store):
    holder = Scheduler(DataPaths(data_dir))  # hold the queue: this test is about what is queued, not the training
    assert holder.try_acquire()
    try:
        result = cli("warm-up", "examples/warm-up-demo.yaml", "--rows", "4", "--steps", "5", "--json")
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout)
        assert out["demonstrations"] == (
            "4 demonstration episodes of echo_message kept: the 4 of 4 the environment rewarded"
        )
        sft, grpo = store.get(out["sft"]), store.get(out["grpo"])
        assert (sft.spec.method.value, sft.spec.training.max_steps, sft.spec.dataset.name) == (
            "sft",
            5,
            out["upload_id"],
        )
        assert grpo.spec.model.parent_job_id == sft.id and grpo.status is sft.status is JobStatus.queued
        refused = cli("warm-up", "examples/sft-demo.yaml")
        assert refused.returncode == 2 and "a warm-up is for a GRPO job with an environment" in refused.stderr
        assert len(store.list()) == 2, "a refused warm-up queues nothing"
    finally:
        for job in store.list():
            store.request_cancel(job.id)
        holder.release()


# The learning verdict and the signal watch, read from stored records: in-process, nothing trains.
NO_SIGNAL_WARNING = "Every group scored the same for 3 logged steps: try a reward that tells completions apart."
SIGNAL = {
    "warning": NO_SIGNAL_WARNING,
    "conditions": ["zero_std"],
    "since_step": 1,
    "consecutive": 3,
    "steps_logged": 3,
    "steps_with_signal": 0,
}
LEARNING = {
    "metric": "reward/total",
    "label": "held-out reward",
    "before": 0.0,
    "after": 0.0,
    "delta": 0.0,
    "ci95": 0.0,
    "rows": 4,
    "verdict": "no_signal",
    "sentence": "Held-out reward 0 -> 0 (+0, ±0) on 4 rows. The run learned nothing: every group scored the same.",
}
GRPO_SPEC = tiny_spec(
    method="grpo",
    dataset={"source": "builtin", "name": "math-demo"},
    grpo={
        "num_generations": 2,
        "max_completion_length": 8,
        "rewards": [{"name": "regex", "pattern": "^NEVER-MATCHES$"}],
    },
)


def run_main(capsys, *args) -> tuple[int, str, str]:
    from backend import cli as cli_module

    code = cli_module.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _ended_job(store, learning=None, signal=None):
    from backend.core.spec import parse_spec

    job = store.add(parse_spec(GRPO_SPEC))
    assert store.claim_next().id == job.id
    if signal:
        store.merge_artifacts(job.id, signal=signal)
    store.finish(job.id, JobStatus.succeeded, artifacts={"learning": learning} if learning else None)
    return job.id


def test_show_and_list_say_a_success_learned_nothing_with_the_verdict_and_the_warning(data_dir, store, capsys):
    job_id = _ended_job(store, LEARNING, SIGNAL)
    code, out, _ = run_main(capsys, "show", job_id)
    assert code == 0
    assert re.search(r"^status\s+succeeded - learned nothing$", out, re.M), out
    assert re.search(rf"^learning\s+learned nothing: {re.escape(LEARNING['sentence'])}$", out, re.M), out
    assert re.search(
        r"^signal\s+no learning signal \(since step 1, 3 logged steps in a row\): "
        rf"{re.escape(NO_SIGNAL_WARNING)}$",
        out,
        re.M,
    ), out
    code, out, _ = run_main(capsys, "list")
    assert code == 0 and re.search(rf"^{job_id}\s+succeeded - learned nothing\s+grpo\s", out, re.M), out

    # --json carries both artifacts as stored, at the top level and among the artifacts; the status stays the enum.
    record = json.loads(run_main(capsys, "show", job_id, "--json")[1])
    assert record["learning"] == record["artifacts"]["learning"] and record["learning"]["verdict"] == "no_signal"
    assert record["learning"]["sentence"] == LEARNING["sentence"]
    assert record["signal"] == record["artifacts"]["signal"] and record["signal"]["warning"] == NO_SIGNAL_WARNING
    assert (record["status"], record["status_text"]) == ("succeeded", "succeeded - learned nothing")
    (listed,) = json.loads(run_main(capsys, "list", "--json")[1])
    assert listed["learning"]["verdict"] == "no_signal" and listed["signal"]["consecutive"] == 3
    assert listed["status_text"] == "succeeded - learned nothing"


def test_list_names_each_job_by_its_run_name(data_dir, store, capsys):
    named = store.add(parse_spec(tiny_spec(output={"run_name": "my first sft"}))).id
    unnamed = store.add(parse_spec(tiny_spec())).id
    code, out, _ = run_main(capsys, "list")
    assert code == 0 and re.search(r"\s+run\s+model$", out, re.M), out
    assert re.search(rf"^{named}\s.*\s+my first sft\s+builtin:tiny-qwen3$", out, re.M), out
    assert re.search(rf"^{unnamed}\s.*\s+-\s+builtin:tiny-qwen3$", out, re.M), out
    listed = {row["id"]: row["run_name"] for row in json.loads(run_main(capsys, "list", "--json")[1])}
    assert listed == {named: "my first sft", unnamed: None}


def test_show_prints_an_improvement_and_a_job_without_a_verdict_as_before(data_dir, store, capsys):
    improved = {
        **LEARNING,
        "verdict": "improved",
        "before": 0.25,
        "after": 0.75,
        "delta": 0.5,
        "ci95": 0.12,
        "rate": True,
        "sentence": "Held-out accuracy 25% -> 75% (+50 points, ±12) on 64 rows.",
    }
    job_id = _ended_job(store, improved)
    out = run_main(capsys, "show", job_id)[1]
    assert re.search(r"^status\s+succeeded$", out, re.M)
    assert re.search(
        r"^learning\s+improved: Held-out accuracy 25% -> 75% \(\+50 points, ±12\) on 64 rows\.$", out, re.M
    ), out
    assert not re.search(r"^signal\s", out, re.M)
    plain = _ended_job(store)
    out = run_main(capsys, "show", plain)[1]
    assert not re.search(r"^(learning|signal)\s", out, re.M) and "learned nothing" not in out
    record = json.loads(run_main(capsys, "show", plain, "--json")[1])
    assert record["learning"] is None and record["signal"] is None


def test_submit_wait_says_the_warning_once_as_it_appears_then_the_verdict(data_dir, store, tmp_path, capsys):
    import threading

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(GRPO_SPEC))
    holder = Scheduler(DataPaths(data_dir))  # no real scheduler: this thread plays the worker
    assert holder.try_acquire()
    seen: dict[str, bool] = {}

    def worker():
        job = wait_for(store.claim_next, 120, 0.05, "the submitted job")
        store.report(job.id, [(3, time.time(), {"loss": 0.0, "reward": 0.0})], {"step": 3, "total_steps": 8})
        store.merge_artifacts(job.id, signal=SIGNAL)
        time.sleep(1.6)  # the CLI polls every 0.5 s: it sees the warning several times
        store.merge_artifacts(job.id, signal={**SIGNAL, "consecutive": 6, "steps_logged": 6})
        time.sleep(1.1)
        seen["running"] = store.get(job.id).status is JobStatus.running
        store.finish(job.id, JobStatus.succeeded, artifacts={"learning": LEARNING})

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        code, out, err = run_main(capsys, "submit", str(spec), "--wait")
    finally:
        thread.join(30)
        holder.release()
    assert code == 0 and seen["running"]
    said = [line for line in err.splitlines() if "no learning signal" in line]
    assert len(said) == 1, err  # once, when it first appeared, not at every poll nor when it changed
    assert said[0].startswith("warning: ") and NO_SIGNAL_WARNING in said[0]
    assert "(since step 1, 3 logged steps in a row)" in said[0]
    assert re.search(rf"^learning\s+learned nothing: {re.escape(LEARNING['sentence'])}$", out, re.M), out
    assert re.search(r"^status\s+succeeded - learned nothing$", out, re.M), out
