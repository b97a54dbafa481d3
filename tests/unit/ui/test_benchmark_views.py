"""The Jobs tab's benchmarks, without a browser: the table with a bar per side, the skills lost, several jobs side by
side, and the Evaluate panel's action (a queued eval-only job, or a sentence and nothing queued)."""

from backend.api import StudioAPI, local_user
from backend.core.benchmarks import build_report, task_info, task_score
from components.jobs.benchmark_panel import evaluate_action
from components.jobs.benchmark_views import bar, benchmarks_compare_markdown, benchmarks_markdown
from components.jobs.views import choice, table_rows
from tests.helpers import tiny_spec


def _report(tuned_right: int):
    base = {i: 1.0 if i < 30 else 0.0 for i in range(60)}
    tuned = {i: 1.0 if i < tuned_right else 0.0 for i in range(60)}
    score = task_score(task_info("studio_arith"), "studio_arith", {"base": base, "tuned": tuned}, {"base": 0.06})
    return build_report({"studio_arith": score}, 60, "job x")


def test_a_job_shows_bars_per_side_and_the_skill_it_lost(paths, store):
    job = store.add(parse(tiny_spec()))
    store.merge_artifacts(job.id, benchmarks=_report(tuned_right=2))
    shown = benchmarks_markdown(store.get(job.id))
    assert "| studio_arith (60 items) | base | `" + bar(0.5) + "` ±6 |" in shown
    assert "| tuned |" in shown and "| start |" not in shown
    assert "**Skills lost:** studio_arith -47 points" in shown and "it lost arithmetic." in shown
    assert benchmarks_markdown(store.get(store.add(parse(tiny_spec())).id)) == ""


def test_compare_puts_jobs_on_the_same_benchmarks_side_by_side(paths, store):
    jobs = []
    for right in (2, 31):
        job = store.add(parse(tiny_spec()))
        store.merge_artifacts(job.id, benchmarks=_report(right))
        jobs.append(store.get(job.id))
    shown = benchmarks_compare_markdown(jobs)
    assert f"| {jobs[0].id} | studio_arith | 3% | -47 ±" in shown and "| lost |" in shown
    assert f"| {jobs[1].id} | studio_arith | 52% | +2 ±" in shown and "| kept |" in shown


def test_evaluate_queues_an_eval_only_job_or_says_why_not(paths, store):
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    said = evaluate_action(api, local_user(), None, "builtin:tiny-qwen3-arith", ["studio_choice"], 20)
    assert said.startswith("Queued evaluation job")
    (job,) = api.jobs.list_jobs()
    assert job.spec.evaluate is not None and job.spec.evaluate.job_id is None
    assert job.spec.benchmarks.tasks == ["studio_choice"] and job.spec.benchmarks.limit == 20
    assert choice(job).split(" · ")[1:3] == ["eval", "benchmarks of builtin:tiny-qwen3-arith"]
    row = table_rows(api, [job])[0]
    assert row[4] == "eval" and row[6] == "studio_choice", "the list says what an eval-only job does"
    for tasks, limit, words in ((["nope"], None, "is not a task"), (["studio_arith"], -1, "limit"), ([], None, "task")):
        assert words in evaluate_action(api, local_user(), None, "builtin:tiny-qwen3-arith", tasks, limit)
    # A job that has not finished has no adapter to score.
    queued = api.jobs.submit(tiny_spec()).job
    assert "has no adapter" in evaluate_action(api, local_user(), queued.id, "", ["studio_arith"], None)
    assert len(api.jobs.list_jobs()) == 2, "nothing else was queued"


def test_evaluate_with_items_per_task_empty_or_0_uses_each_tasks_default(paths):
    """The field shows 0 when empty (issue 47): Evaluate with what it shows queues the tasks' default item counts."""
    api = StudioAPI(data_dir=paths.root, scheduler="none")
    for limit in (0, None, 0.0):
        said = evaluate_action(api, local_user(), None, "builtin:tiny-qwen3-arith", ["studio_arith"], limit)
        assert said.startswith("Queued evaluation job"), (limit, said)
    assert [job.spec.benchmarks.limit for job in api.jobs.list_jobs()] == [None, None, None]


def parse(spec):
    from backend.core.spec import parse_spec

    return parse_spec(spec)


def test_a_sure_rise_reads_improved_not_kept(paths, store):
    """Issue 47: a benchmark that rose 47% -> 68% read "+21 points ... arithmetic kept"."""
    base = {i: 1.0 if i < 47 else 0.0 for i in range(100)}
    tuned = {i: 1.0 if i < 68 else 0.0 for i in range(100)}
    rose = task_score(task_info("studio_arith"), "studio_arith", {"base": base, "tuned": tuned}, {})
    assert rose.sentence.startswith("studio_arith +21 points ±") and rose.sentence.endswith(": arithmetic improved.")
    assert "kept" not in rose.sentence and not rose.dropped
    job = store.add(parse(tiny_spec()))
    store.merge_artifacts(job.id, benchmarks=build_report({"studio_arith": rose}, 100, "job x"))
    shown = benchmarks_compare_markdown([store.get(job.id)])
    assert "| studio_arith | 68% | +21 ±" in shown and shown.endswith("| improved |"), shown
    # No sure change is still "kept".
    same = task_score(task_info("studio_arith"), "studio_arith", {"base": base, "tuned": base}, {})
    assert same.sentence.endswith(": arithmetic kept.")


def test_the_cli_list_calls_an_eval_only_job_what_the_jobs_table_calls_it(paths, store, capsys):
    """Issue 47: `list` called an evaluation job `sft` (its unused method); the Jobs table already said `eval`."""
    import json

    from backend.cli import main as cli_main

    api = StudioAPI(data_dir=paths.root, scheduler="none")
    try:
        evaluate_action(api, local_user(), None, "builtin:tiny-qwen3-arith", ["studio_choice"], 20)
        (job,) = api.jobs.list_jobs()
        assert cli_main(["list"]) == 0
        [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith(job.id)]
        assert line.split()[2] == table_rows(api, [job])[0][4] == "eval", line
        assert cli_main(["list", "--json"]) == 0
        [listed] = json.loads(capsys.readouterr().out)
        assert listed["kind"] == "eval"
    finally:
        api.close()
