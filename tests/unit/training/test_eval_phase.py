"""Evaluation as a visible phase: the progress says the held-out rows scored, the ETA counts the evaluation and is
smoothed, greedy answers come in large batches with the row-by-row scores, and the log gets one summary line."""

import json
import logging
import random
import threading
from types import SimpleNamespace

import pytest
import torch

from backend.core.spec import parse_spec
from backend.core.wording import EVALUATING, progress_text
from backend.jobs.records import JobStatus
from backend.methods.sft import answer_pair, split_answer
from backend.models.mixed_batch import BASE_ADAPTER, GenerationSettings
from backend.models.scoring import answer_scores, generate_completions
from backend.training.callbacks import StoreReportingCallback
from backend.training.eta import training_eta
from backend.training.job_evaluation import run_evaluation
from backend.worker import build_trainer
from tests.helpers import job_data, tiny_spec

SFT_ARITH = {
    "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
    "dataset": {"source": "builtin", "name": "arith-sft"},
    "eval": {"holdout_rows": 12},
    "training": {"max_steps": 1, "batch_size": 4, "max_length": 128},
}


# --- the ETA ----------------------------------------------------------------------------------------------------


def _etas(step_times: list[float], total: int, **evaluation) -> list[float]:
    """The ETA shown after each step of a run whose steps took ``step_times``."""
    return [training_eta(step_times[: k + 1], total - (k + 1), **evaluation) for k in range(len(step_times))]


def test_eta_of_noisy_steady_training_swings_less_than_30_percent_between_refreshes():
    rng = random.Random(0)
    total = 300
    # Steady training at about 2 s a step, each step up to 60% off, and now and then a step 4 times as long (a save).
    times = [30.0] + [2.0 * rng.uniform(0.4, 1.6) * (4 if rng.random() < 0.03 else 1) for _ in range(total - 1)]
    etas = _etas(times, total, eval_rows=256, eval_sides=2, batch_size=16)
    for k in range(5, total - 20):  # steady training: after the first few steps, before the last ones
        # Between two refreshes the ETA should fall by the step's own time; what differs is the swing.
        expected = etas[k] - times[k + 1]
        assert abs(etas[k + 1] - expected) <= 0.3 * etas[k], (k, etas[k], etas[k + 1])


def test_eta_follows_steps_that_grow():
    times = [1.0] * 20 + [2.0] * 60
    step_after = training_eta(times, 1)
    assert step_after == pytest.approx(2.0, rel=0.05)


def test_eta_at_the_last_training_step_counts_the_evaluation_ahead():
    times = [5.0, 1.0, 1.0, 1.0]
    assert training_eta(times, 0, eval_rows=256, eval_sides=2, batch_size=16) > 0
    assert training_eta(times, 0) == 0  # nothing left: no evaluation ahead


def test_the_callback_eta_at_the_last_step_counts_the_evaluation(store):
    job = store.add(parse_spec(tiny_spec()))
    callback = StoreReportingCallback(store, job.id, threading.Event())
    callback.performance.step_seconds = [3.0, 1.0, 1.0]
    callback.expect_evaluation(256)
    callback._batch_rows = 16
    state = SimpleNamespace(global_step=150, max_steps=150, epoch=1.0)
    rows_only = callback._progress(state)["eta_seconds"]
    assert rows_only > 0
    # An environment job's episodes after it count too (issue 37: left out of the ETA).
    callback.expect_evaluation(128, 2)
    assert callback._progress(state)["eta_seconds"] == pytest.approx(rows_only * (256 + 128) / 256)


# --- the progress's wording ---------------------------------------------------------------------------------------


EVALUATING_PROGRESS = {
    "step": 150,
    "total_steps": 150,
    "phase": EVALUATING,
    "eval_done": 64,
    "eval_rows": 256,
    "eval_sides": "base and tuned",
    "eta_seconds": 30.0,
}


def test_progress_says_the_rows_scored_while_evaluating():
    assert progress_text(EVALUATING_PROGRESS) == "evaluating: 64 / 256 rows (base and tuned)"
    assert progress_text({"step": 3, "total_steps": 10}) == "3/10"


def test_jobs_tab_and_list_say_evaluating(store, paths, capsys):
    from backend.api import StudioAPI
    from backend.cli import main as cli_main
    from components.jobs.views import TABLE_COLUMNS, progress_html, table_rows

    job = store.add(parse_spec(tiny_spec()))
    store.claim_next()
    store.report(job.id, [], EVALUATING_PROGRESS)
    record = store.get(job.id)
    assert record.status is JobStatus.running
    assert "evaluating: 64 / 256 rows (base and tuned)" in progress_html(record)
    assert "ETA 30s" in progress_html(record)
    api = StudioAPI(paths.root, scheduler="none")
    try:
        row = table_rows(api, [record])[0]
        assert "evaluating: 64 / 256 rows (base and tuned)" in row
        assert cli_main(["list"]) == 0
        assert "evaluating: 64 / 256 rows (base and tuned)" in capsys.readouterr().out
        # Once the job has ended, its last phase is over: the table says the steps, not "evaluating" (issue 37's
        # walk saw "evaluating: 256 / 256 episodes" on a succeeded job).
        store.finish(job.id, JobStatus.succeeded)
        columns = dict(zip(TABLE_COLUMNS, table_rows(api, [store.get(job.id)])[0]))
        assert columns["progress"] == "150/150", columns
    finally:
        api.close()


# --- the evaluation itself ----------------------------------------------------------------------------------------


def _sft_trainer(paths, store):
    spec = parse_spec(tiny_spec(**SFT_ARITH))
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, held_out = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a tuned side that answers differently from the base
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    trainer.model.eval()
    return spec, job, callback, trainer, [held_out[i] for i in range(len(held_out))]


@pytest.mark.slow
def test_batched_greedy_answers_score_as_row_by_row(paths, store):
    _, _, _, trainer, rows = _sft_trainer(paths, store)
    model, tokenizer = trainer.model, trainer.processing_class
    answered = [answer_pair(*split_answer(row)) for row in rows]
    prompts, references = [a[0] for a in answered], [a[1] for a in answered]
    sides = [model.active_adapter, BASE_ADAPTER]
    batched = answer_scores(model, tokenizer, prompts, references, sides)
    settings = GenerationSettings(max_new_tokens=24, temperature=0)
    # Row by row: one prompt, one side per generate call.
    alone = {
        side: [generate_completions(model, tokenizer, [p], [side], settings)[side][0] for p in prompts]
        for side in sides
    }
    together = generate_completions(model, tokenizer, prompts, sides, settings, batched=True)
    assert together == alone
    for side in sides:
        exact = [float(" ".join(a.split()) == " ".join(r.split())) for a, r in zip(alone[side], references)]
        assert batched[side]["per_row"]["exact_match"] == exact


@pytest.mark.slow
def test_evaluation_reports_its_rows_and_logs_one_short_line(paths, store, caplog):
    spec, job, callback, trainer, rows = _sft_trainer(paths, store)
    store.claim_next()
    seen = []
    real_report = store.report

    def report(job_id, metrics, progress, samples=()):
        seen.append(progress)
        real_report(job_id, metrics, progress, samples)

    store.report = report
    caplog.set_level(logging.INFO)
    evaluation = run_evaluation(trainer, spec, rows, paths, job.id, None, callback)
    evaluating = [p for p in seen if p and p.get("phase") == EVALUATING]
    assert evaluating, seen
    assert evaluating[0]["eval_done"] == 0 and evaluating[-1]["eval_done"] == len(rows)
    assert all(p["eval_rows"] == len(rows) and p["eval_sides"] == "base and tuned" for p in evaluating)
    assert progress_text(evaluating[-1]) == f"evaluating: {len(rows)} / {len(rows)} rows (base and tuned)"
    assert all(len(record.getMessage()) < 500 for record in caplog.records)
    stored = json.loads((paths.job_dir(job.id) / "evaluation.json").read_text())
    assert len(stored["per_row"]["tuned"]["exact_match"]) == len(rows)
    assert len(stored["per_row"]["base"]["token_nll"]) == len(rows)
    assert stored == json.loads(json.dumps(evaluation))


def test_submit_wait_bar_says_evaluating(store, capsys, monkeypatch):
    from backend.cli import records

    job = store.add(parse_spec(tiny_spec()))
    store.claim_next()
    store.report(job.id, [], EVALUATING_PROGRESS)
    evaluating = store.get(job.id)
    store.finish(job.id, JobStatus.succeeded)
    answers = iter([evaluating, store.get(job.id)])
    monkeypatch.setattr(records.time, "sleep", lambda s: None)
    records.wait_for_job(
        SimpleNamespace(jobs=SimpleNamespace(get_job=lambda job_id: next(answers))), job.id, quiet=False
    )
    assert "evaluating: 64 / 256 rows (base and tuned)" in capsys.readouterr().err
