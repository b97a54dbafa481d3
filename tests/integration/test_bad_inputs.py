"""A corpus of bad inputs through the most exposed entry points: the Gradio API on a Space (as a signed-in user),
the Train form, uploads and the CLI.

Every case asserts the answer is a sentence that names what to fix (never a traceback or a generic "Error"),
that it is short even when the input was huge, that nothing was stored or left on disk, and that the app still
serves afterwards.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from backend.core.paths import DataPaths
from backend.core.uploads import is_upload_id
from backend.data.upload_store import size_text
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import ROOT, wait_status
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.faults import timed_all_through
from tests.integration.test_app import _form
from tests.unit.api.test_hardening import _deep_rows, _gzip_rows, _parquet_bomb

pytestmark = pytest.mark.slow

MAX_ANSWER_CHARS = 4000  # a refusal echoes at most a short excerpt of what it was given
BASE_SPEC = {
    "method": "sft",
    "model": {"name_or_path": "builtin:tiny-qwen3"},
    "training": {"max_steps": 2, "batch_size": 2, "max_length": 128},
}


def spec(**parts) -> str:
    """BASE_SPEC with top-level parts merged one level deep, as JSON (non-finite numbers written as JS literals)."""
    merged = json.loads(json.dumps(BASE_SPEC))
    for key, value in parts.items():
        merged[key] = (
            {**merged[key], **value} if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return json.dumps(merged)


# (case id, JSON text for /submit_spec, a piece of the expected sentence)
SPEC_CASES = [
    ("malformed-json", '{"method": "sft"', "not valid JSON"),
    ("deeply-nested", "[" * 100_000, "nested too deeply"),
    ("a-list", "[1, 2]", "must be a mapping"),
    ("empty", "", "must be a mapping"),
    ("over-a-megabyte", json.dumps({"output": {"run_name": "x" * (2 << 20)}}), "larger than a spec can be"),
    ("epochs-infinity", spec(training={"epochs": math.inf, "max_steps": None}), "training.epochs"),
    (
        "reward-weight-nan",
        spec(
            method="grpo",
            dataset={"name": "math-demo"},
            training={"batch_size": 4},
            grpo={"rewards": [{"name": "accuracy", "weight": math.nan}]},
        ),
        "weight",
    ),
    (
        "grpo-beta-infinity",
        spec(method="grpo", dataset={"name": "math-demo"}, training={"batch_size": 4}, grpo={"beta": math.inf}),
        "grpo.beta",
    ),
    ("learning-rate-minus-infinity", spec(training={"learning_rate": -math.inf}), "training.learning_rate"),
    ("lora-dropout-nan", spec(lora={"dropout": math.nan}), "lora.dropout"),
    (
        "env-timeout-infinity",
        spec(
            method="grpo",
            dataset={"name": "echo-demo"},
            training={"batch_size": 4},
            environment={"name": "builtin:echo", "timeout_s": math.inf},
        ),
        "environment.timeout_s",
    ),
    (
        "json-schema-nan",
        spec(
            method="grpo",
            dataset={"name": "math-demo"},
            training={"batch_size": 4},
            grpo={"rewards": [{"name": "valid_json", "json_schema": {"maximum": math.nan}}]},
        ),
        "json_schema",
    ),
    ("unknown-key", spec(training={"epoch": 3}), "unknown setting"),
    ("unknown-method", spec(method="ppo"), "method"),
    ("schema-version", spec(schema_version=99), "schema_version"),
    ("training-null", spec(training=None), "training"),
    ("server-file", spec(dataset={"source": "file", "name": "/etc/passwd"}), "dataset"),
    ("server-folder-as-hub-id", spec(dataset={"source": "hub", "name": "/etc"}), "dataset.name"),
    ("hub-id-walking-up", spec(dataset={"source": "hub", "name": "../uploads/bob"}), "dataset.name"),
    ("model-server-folder", spec(model={"name_or_path": "/etc"}), "model.name_or_path"),
    ("model-walking-up", spec(model={"name_or_path": "../../data"}), "model.name_or_path"),
    ("repo-id-spaces", spec(output={"hub_repo_id": "not a repo id"}), "output.hub_repo_id"),
    ("repo-id-three-parts", spec(output={"hub_repo_id": "a/b/c"}), "output.hub_repo_id"),
    ("run-name-control-chars", spec(output={"run_name": "run\x1b[31m\x00"}), "output.run_name"),
    ("seed-too-large", spec(training={"seed": 2**64}), "training.seed"),
    ("huge-echoed-value", spec(method="x" * 500_000), "method"),
    ("batch-size-zero", spec(training={"batch_size": 0}), "training.batch_size"),
    ("max-length-huge", spec(training={"max_length": 10**9}), "training.max_length"),
    (
        "env-ftp-url",
        spec(
            method="grpo",
            dataset={"name": "echo-demo"},
            training={"batch_size": 4},
            environment={"name": "ftp://127.0.0.1/x"},
        ),
        "environment.name",
    ),
    ("env-on-sft", spec(environment={"name": "builtin:echo"}), "environment.name"),
    (
        "grpo-without-rewards",
        spec(method="grpo", dataset={"name": "math-demo"}, training={"batch_size": 4}, grpo={"rewards": []}),
        "rollout.rewards",
    ),
    (
        "bad-regex",
        spec(
            method="grpo",
            dataset={"name": "math-demo"},
            training={"batch_size": 4},
            grpo={"rewards": [{"name": "regex", "pattern": "(unclosed"}]},
        ),
        "regular expression",
    ),
    (
        "reward-as-list",
        spec(method="grpo", dataset={"name": "math-demo"}, training={"batch_size": 4}, grpo={"rewards": [[1, 2]]}),
        "rollout.rewards",
    ),
    (
        "exact-match-no-column",
        spec(
            method="grpo",
            dataset={"name": "math-demo"},
            training={"batch_size": 4},
            grpo={"rewards": [{"name": "exact_match"}]},
        ),
        "column",
    ),
    ("4bit-without-lora", spec(quantization={"mode": "4bit"}, lora={"enabled": False}), "LoRA"),
    ("unknown-parent", spec(model={"parent_job_id": "20990101-000000-abcdef"}), "there is no job"),
    ("unknown-builtin-dataset", spec(dataset={"name": "no-such-set"}), "no built-in dataset"),
    ("column-map-number", spec(dataset={"columns": {"messages": 5}}), "dataset.columns"),
    ("empty-target-modules", spec(lora={"target_modules": []}), "lora.target_modules"),
]

# (case id, form overrides for /submit_job, a piece of the expected sentence)
FORM_CASES = [
    # At the field, in its label's words (the spec path after it).
    ("zero-batch-size", {"batch_size": 0}, "Batch size must be from 1 to 1024, or auto; you gave 0"),  # empty is auto
    ("empty-lora-rank", {"lora_r": None}, "LoRA rank: empty"),
    ("text-learning-rate", {"learning_rate": "fast"}, "is not a number"),
    ("infinite-learning-rate", {"learning_rate": "inf"}, "finite number"),
    ("no-accumulation", {"grad_accum": 0}, "training.gradient_accumulation_steps"),
    (
        "rewards-not-yaml",
        {"method": "grpo", "builtin_dataset": "math-demo", "rollout_rewards": "- name: [unclosed"},
        "rewards are not valid YAML",
    ),
    (
        "rewards-not-mappings",
        {"method": "grpo", "builtin_dataset": "math-demo", "rollout_rewards": "- 1\n- 2"},
        "YAML list of mappings",
    ),
    ("column-map-nonsense", {"column_map": "nonsense"}, "column mapping"),
    ("hub-without-id", {"dataset_source": "hub", "hub_dataset": ""}, "give a Hub dataset id"),
    ("upload-without-file", {"dataset_source": "upload", "upload_id": ""}, "upload a .jsonl"),
    ("upload-client-path", {"dataset_source": "upload", "upload_id": "/etc/passwd"}, "dataset"),
    ("base-model-list", {"base_model": ["a", "b"]}, "wrong type"),
    (
        "env-not-a-url",
        {
            "method": "grpo",
            "builtin_dataset": "echo-demo",
            "env_name": "not a url at all",
            "rollout_rewards": "",
            "batch_size": 4,
        },
        "environment.name",
    ),
    ("negative-max-rows", {"max_rows": -5}, "less than minimum value 0"),  # Gradio's own bound on the field
    ("unknown-parent-job", {"parent_job": "20990101-000000-abcdef"}, "there is no job"),
    ("huge-run-name", {"run_name": "r" * 200_000}, "output.run_name"),
]

# (case id, [rewards YAML, completions, row JSON] for /score_rewards, a piece of the expected sentence)
BENCH_CASES = [
    ("bench-rewards-not-yaml", ["- name: [unclosed", "a", ""], "not valid YAML"),
    ("bench-row-not-json", ["- name: length\n  target_length: 3\n", "a b c", "{"], "row"),
    ("bench-row-a-list", ["- name: length\n  target_length: 3\n", "a b c", "[1, 2]"], "row"),
    ("bench-no-completions", ["- name: length\n  target_length: 3\n", "   \n", ""], "at least one completion"),
    ("bench-unknown-reward", ["- name: telepathy\n", "a", ""], "name"),
    ("bench-missing-column", ["- name: exact_match\n  column: answer\n", "a", "{}"], "answer"),
]

# (case id, file name, bytes, a piece of the expected sentence) for /upload_dataset (method sft)
UPLOAD_CASES = [
    ("upload-txt", "notes.txt", b"hello", "not a dataset file"),
    ("upload-empty", "empty.jsonl", b"", "is empty"),
    ("upload-malformed-jsonl", "bad.jsonl", b'{"messages": [\n', "could not be read"),
    # Differently named columns are kept with a Column mapping hint (tests/unit/ui/test_form.py, test_browser_forms.py).
    ("upload-blank-rows", "blank.jsonl", b'{"text": ""}\n', "have an empty 'text'"),
    ("upload-csv-no-rows", "header.csv", b"prompt,completion\n", "no rows"),
    ("upload-garbage-parquet", "junk.parquet", b"PAR1 not really", "could not be read"),
    # Issue 20: a reader's segfault, and data that swells past memory once decoded (the app died, or went to 2.7 GB).
    ("upload-nested-90000-deep", "deep.jsonl", _deep_rows(), "nests values 90,001 levels deep"),
    ("upload-gzip-as-jsonl", "rows.jsonl", _gzip_rows(), "is gzip-compressed"),
    ("upload-parquet-bomb", "bomb.parquet", _parquet_bomb(), "decodes to over 768 MB"),
]

# (case id, /arena_play or /arena_play_n inputs: job, left side, sampling, row, first message[, episodes], a piece of
# the expected sentence): no job of this Space played an environment, so each is refused before anything plays.
ARENA_CASES = [
    ("arena-no-job", "/arena_play", ["", "base", "greedy", 0, ""], "pick a finished job first"),
    ("arena-path-as-job", "/arena_play", ["../../etc/passwd", "base", "greedy", 0, ""], "not yours or no longer"),
    ("arena-negative-row", "/arena_play", ["j1", "base", "greedy", -1, ""], "row must be a whole number"),
    ("arena-fraction-row", "/arena_play", ["j1", "base", "greedy", 2.5, ""], "not yours"),  # the field rounds
    ("arena-huge-row", "/arena_play", ["j1", "base", "greedy", 1e300, ""], "row must be a whole number"),
    ("arena-long-message", "/arena_play", ["j1", "base", "greedy", 0, "x" * 50_000], "longer than 4,000"),
    ("arena-no-episodes", "/arena_play_n", ["j1", "base", "greedy", 0, "", 0], "number of episodes"),
    ("arena-many-episodes", "/arena_play_n", ["j1", "base", "greedy", 0, "", 10**9], "number of episodes"),
    ("arena-bad-side", "/arena_play", ["j1", "evil", "greedy", 0, ""], "evil"),
    ("arena-bad-sampling", "/arena_play", ["j1", "base", "hot", 0, ""], "hot"),
]


@pytest.fixture(scope="module")
def space(tmp_path_factory, models_dir):
    base = tmp_path_factory.mktemp("bad-inputs")
    root = data_dir_with_models(base / "data", models_dir)
    extra = {"GRADIO_TEMP_DIR": str(base / "gradio-tmp"), "HF_DATASETS_CACHE": str(base / "datasets-cache")}
    with launch_app(root, space=True, extra_env=extra) as app:
        app.watched = [root, base / "gradio-tmp", base / "datasets-cache"]
        yield app


@pytest.fixture(scope="module")
def alice(space):
    return space.client("alice")


def _files(dirs: list[Path]) -> set[str]:
    """What lies on disk, less the store's own files and logs (which change on every request)."""
    skip = ("studio.sqlite3", "scheduler.lock", ".log")
    return {
        str(p)
        for d in dirs
        if d.exists()
        for p in d.rglob("*")
        if p.is_file() and not any(s in p.name for s in skip) and "models" not in p.parts
    }


@pytest.fixture(scope="module")
def bob(space):
    """Another signed-in user, whose job list must keep answering while alice's bad inputs are refused."""
    client = space.client("bob")
    client.predict(None, api_name="/list_jobs")  # the first call of a process is slow for reasons of its own
    return client


PEAK_APP_MEMORY_BYTES = 1.5 * 2**30
OTHERS_WAIT_S = 2.0


def _peak_memory(pid: int) -> int:
    """The process's high-water mark of resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@pytest.fixture()
def unchanged(space, bob):
    """Asserts after the case: no job stored, no file left, the app still answers, another signed-in user's
    /list_jobs answered within 2 s all through the case, and the app's peak memory stayed under 1.5 GB."""
    store = JobStore(DataPaths(space.data_dir).db)
    jobs_before, files_before = len(store.list()), _files(space.watched)
    with timed_all_through(lambda: bob.predict(None, api_name="/list_jobs"), every_s=0.2) as waits:
        yield
    assert waits and max(waits) < OTHERS_WAIT_S, f"another user's /list_jobs took {max(waits or [0]):.1f} s"
    assert len(store.list()) == jobs_before, "a refused input was stored"
    assert _files(space.watched) - files_before == set(), "a refused input left files behind"
    assert space.client().predict(api_name="/status"), "the app stopped serving"
    assert _peak_memory(space.proc.pid) < PEAK_APP_MEMORY_BYTES, "the app's memory went past 1.5 GB"


def _answer(client, *args, api_name: str) -> str:
    """The refusal's text: the raised error, or the problem boxes of a form handler."""
    try:
        outputs = client.predict(*args, api_name=api_name)
    except AppError as exc:
        return str(exc)
    return "\n".join(str(o) for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs]) if o)


def _assert_sentence(text: str, expected: str) -> None:
    assert expected.lower() in text.lower(), text[:600]
    assert len(text) < MAX_ANSWER_CHARS, f"the answer is {len(text)} characters long"
    assert "Traceback" not in text and text.strip() not in {"", "Error", "None"}, text[:600]


@pytest.mark.parametrize("text,expected", [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
def test_submit_spec_refuses_with_a_sentence(alice, unchanged, text, expected):
    _assert_sentence(_answer(alice, text, api_name="/submit_spec"), expected)


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (its children, theirs, ...), read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):  # not a process, or gone meanwhile
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


# Issue 48: one request started 64 training processes on a CPU Space (the old name num_gpus did the same).
MANY_PROCESSES = {"gradient_accumulation_steps": 64, "batch_size": 1}


@pytest.mark.parametrize("field", ["num_processes", "num_gpus"])
def test_a_job_of_64_processes_is_refused_and_starts_none(space, alice, unchanged, field):
    before = _descendants(space.proc.pid)
    text = _answer(alice, spec(training={**MANY_PROCESSES, field: 64}), api_name="/submit_spec")
    _assert_sentence(text, "training.num_processes: a job on this Space may start at most 1 training process")
    assert "STUDIO_MAX_PROCESSES_PER_JOB = 1" in text and "asks for 64" in text, text
    started = set()
    for _ in range(10):  # the scheduler would have started a queued job's launcher within a tick (0.5 s)
        started |= _descendants(space.proc.pid) - before
        time.sleep(0.2)
    assert started == set(), f"the app started {len(started)} processes"


@pytest.mark.parametrize("values,expected", [c[1:] for c in FORM_CASES], ids=[c[0] for c in FORM_CASES])
def test_the_train_form_refuses_with_a_sentence_next_to_the_field(alice, unchanged, values, expected):
    try:
        queued, *boxes = alice.predict(*_form(**values), api_name="/submit_job")
    except AppError as exc:  # refused by Gradio's own check of the field, before the handler
        queued, boxes = "", [str(exc)]
    assert not queued.startswith("Queued"), queued
    _assert_sentence("\n".join(b for b in boxes if b), expected)


@pytest.mark.parametrize("inputs,expected", [c[1:] for c in BENCH_CASES], ids=[c[0] for c in BENCH_CASES])
def test_the_reward_bench_refuses_with_a_sentence(alice, unchanged, inputs, expected):
    _assert_sentence(_answer(alice, *inputs, api_name="/score_rewards"), expected)


@pytest.mark.parametrize("name,content,expected", [c[1:] for c in UPLOAD_CASES], ids=[c[0] for c in UPLOAD_CASES])
def test_a_bad_upload_is_refused_and_leaves_nothing(alice, unchanged, tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content)
    _assert_sentence(_answer(alice, handle_file(str(path)), "sft", api_name="/upload_dataset"), expected)


# --- the command line --------------------------------------------------------------------------------------------
CLI_CASES = [
    ("cli-not-utf8", ["submit", "{file}"], b"\xff\xfe\x00method: sft", "not UTF-8"),
    ("cli-missing-file", ["submit", "/nonexistent/spec.yaml"], None, "does not exist"),
    ("cli-yaml-list", ["submit", "{file}"], b"- method: sft\n", "must be a mapping"),
    ("cli-bad-yaml", ["submit", "{file}"], b"method: [sft\n", "not valid JSON or YAML"),
    (
        "cli-infinity",
        ["submit", "{file}"],
        spec(training={"epochs": math.inf, "max_steps": None}).encode(),
        "training.epochs",
    ),
    ("cli-unknown-job", ["show", "20990101-000000-abcdef"], None, "no job"),
    ("cli-cancel-unknown", ["cancel", "20990101-000000-abcdef"], None, "no job"),
    (
        "cli-dry-run-unreachable",
        ["dry-run", "{file}"],
        spec(
            method="grpo",
            dataset={"name": "echo-demo"},
            training={"batch_size": 4},
            environment={"name": "http://127.0.0.1:9", "timeout_s": 2},
        ).encode(),
        "not reachable",
    ),
]


@pytest.mark.parametrize("argv,content,expected", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_the_cli_answers_user_errors_with_a_sentence_and_exit_2(data_dir, tmp_path, argv, content, expected):
    spec_file = tmp_path / "spec.yaml"
    if content is not None:
        spec_file.write_bytes(content)
    argv = [a.replace("{file}", str(spec_file)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-m", "backend", *argv],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
        env={**os.environ, "STUDIO_DATA_DIR": str(data_dir)},
    )
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 2, output[-2000:]
    _assert_sentence(output, expected)
    assert JobStore(DataPaths(data_dir).db).list() == []


@pytest.mark.parametrize("api_name,inputs,expected", [c[1:] for c in ARENA_CASES], ids=[c[0] for c in ARENA_CASES])
def test_the_arena_refuses_with_a_sentence(alice, unchanged, api_name, inputs, expected):
    _assert_sentence(_answer(alice, *inputs, api_name=api_name), expected)


# --- a user's files read by Evaluate, Check and the upload check: no copy outside their folder (issue 48) ------------
EVAL_MODEL = "builtin:tiny-qwen3"
ENDED = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}


def _prompt_rows(path: Path, rows: int = 4000, bad_line: int | None = None) -> Path:
    """A JSONL of prompts with a solution column (about 1 MB: datasets' Arrow copy of it is plain to see), with line
    ``bad_line`` cut short when given."""
    lines = [json.dumps({"prompt": f"What is {i} + 1? " + "x" * 200, "solution": str(i + 1)}) for i in range(rows)]
    if bad_line is not None:
        lines[bad_line - 1] = lines[bad_line - 1][:20]
    path.write_text("\n".join(lines) + "\n")
    return path


def _tree_bytes(folder: Path) -> int:
    """The bytes of every file under ``folder`` (their apparent sizes, as the quota counts them)."""
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _evaluated(space, client, task: str):
    """Evaluate ``task`` on the demo model through the Jobs tab's API; the job once it has ended."""
    said = client.predict("", EVAL_MODEL, [task], 2, api_name="/evaluate")
    assert said.startswith("Queued evaluation job "), said
    return wait_status(JobStore(DataPaths(space.data_dir).db), said.split()[3].rstrip(":"), ENDED, 300)


def test_an_upload_evaluated_checked_and_deleted_leaves_no_copy_anywhere(space, alice, tmp_path):
    """Three rounds of upload, Evaluate, Check, delete: the shared datasets cache gains nothing (it held three Arrow
    copies, one per Evaluate, each as large as the file: 112 MB for 40 MB uploads), and alice's folder goes back to
    what it was."""
    shared, uploads = space.watched[2], DataPaths(space.data_dir).uploads("alice")
    rows = _prompt_rows(tmp_path / "sums.jsonl")
    shared_before, uploads_before = _files([shared]), _tree_bytes(uploads)
    for _ in range(3):
        upload_id, *_ = alice.predict(handle_file(str(rows)), "sft", "completion=solution", api_name="/upload_dataset")
        assert is_upload_id(upload_id), upload_id
        job = _evaluated(space, alice, upload_id)
        assert job.status is JobStatus.succeeded, job.error
        assert job.artifacts.benchmarks.tasks[upload_id].n == 2
        form = _form(dataset_source="upload", upload_id=upload_id, column_map="completion=solution")
        checked, *boxes = alice.predict(*form, api_name="/check_job")
        assert "did not pass" not in checked and not any(boxes), (checked, boxes)
        listed = alice.predict(api_name="/list_uploads")[0]
        assert listed == f"1 upload, {size_text(rows.stat().st_size)} of your 2,048 MB quota", listed
        assert _files([shared]) == shared_before, "a copy of alice's file went to the shared datasets cache"
        assert alice.predict(upload_id, upload_id, api_name="/delete_upload")[0] == "No uploads kept"
        assert _tree_bytes(uploads) == uploads_before


def test_a_copy_a_killed_read_left_counts_in_the_quota_until_an_upload_is_deleted(space, alice, tmp_path):
    """What datasets wrote for a read whose process was killed stays in alice's own folder: counted in her quota
    (here all of it that her upload leaves, as a sparse file), and removed when she deletes an upload."""
    rows = _prompt_rows(tmp_path / "sums.jsonl", rows=50)
    upload_id, *_ = alice.predict(handle_file(str(rows)), "sft", "completion=solution", api_name="/upload_dataset")
    leftover = DataPaths(space.data_dir).uploads("alice") / ".datasets-cache" / "read-killed"
    arrow = leftover / "json" / "default" / "data-train.arrow"
    arrow.parent.mkdir(parents=True)
    with open(arrow, "wb") as fh:  # with the upload, all of the quota
        fh.truncate(2048 * 2**20 - rows.stat().st_size)
    (leftover / ".reading").touch()  # its mark, which no live process holds locked: the read was killed
    listed = alice.predict(api_name="/list_uploads")[0]
    assert listed == "1 upload, 2,048 MB of your 2,048 MB quota (2,048 MB of it a copy being read now)", listed
    refused = _answer(alice, handle_file(str(rows)), "sft", "completion=solution", api_name="/upload_dataset")
    _assert_sentence(refused, "does not fit in your upload quota")
    assert alice.predict(upload_id, upload_id, api_name="/delete_upload")[0] == "No uploads kept"
    assert not leftover.exists()


def test_evaluating_a_malformed_jsonl_names_its_first_bad_line(space, alice, tmp_path):
    """An upload kept before uploads were checked (planted here: a checked upload cannot be malformed) whose third
    line is cut short: the job says so, at the setting that named it, rather than datasets' generic error."""
    uploads = DataPaths(space.data_dir).uploads("alice")
    uploads.mkdir(parents=True, exist_ok=True)
    upload_id = "0123456789ab-cut.jsonl"
    _prompt_rows(uploads / upload_id, rows=10, bad_line=3)
    shared_before = _files([space.watched[2]])
    try:
        job = _evaluated(space, alice, upload_id)
    finally:
        alice.predict(api_name="/list_uploads")
        alice.predict(upload_id, upload_id, api_name="/delete_upload")
    assert job.status is JobStatus.failed
    assert job.error.startswith("benchmarks.tasks: cut.jsonl could not be read as JSONL: line 3 is not valid JSON: "), (
        job.error[:600]
    )
    assert _files([space.watched[2]]) == shared_before


def test_evaluate_refuses_an_unknown_task_in_a_whole_sentence(alice, unchanged):
    said = _answer(alice, "", EVAL_MODEL, ["no_such_task"], 2, api_name="/evaluate")
    _assert_sentence(said, "benchmarks.tasks: 'no_such_task' is not a task; pick one of ")
    assert said.endswith(", or a .jsonl of prompts with a solution column"), said
