"""Two environments, one studio: workers run under STUDIO_TRAINER_PYTHON, built-in environment servers under the
app's interpreter, and a whole SFT and GRPO job trains in a venv that has neither gradio nor openenv."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from backend.core.spec import parse_spec
from backend.environments.launcher import EnvironmentStartError, start_builtin
from backend.jobs.records import JobStatus
from backend.jobs.scheduler import Scheduler
from backend.platform.interpreters import (
    APP_PYTHON_VAR,
    TRAINER_PYTHON_VAR,
    InterpreterError,
    app_python,
    trainer_python,
)
from tests.helpers import ROOT, tiny_spec, wait_status
from tests.unit.repo.test_packaging import requirement_pins

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}
# The app's packages that the trainer's environment must be able to do without.
APP_ONLY = ("gradio", "gradio_client", "openenv", "fastmcp", "mcp", "spaces", "trackio")
# Imported by a worker module, but only on a path the worker never takes.
NOT_RUN_BY_THE_WORKER = {
    "uvicorn": "serving.serve runs inside the environment servers, under the app's interpreter",
}


def app_only(name: str) -> bool:
    """Whether a site-packages entry belongs to an app-only package (the package, its dist-info, e.g. fastmcp_slim)."""
    return name.lower().startswith(APP_ONLY)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # ``backend.jobs.failures.describe_failure``: a name inside a module, not a module
        return False


def worker_modules() -> list[str]:
    """backend.worker and every backend module it imports, at the top or inside a function, transitively."""
    seen, todo = set(), ["backend.worker"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for node in ast.walk(ast.parse(Path(importlib.util.find_spec(module).origin).read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("backend"):
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.startswith("backend")]
            todo += [name for name in names if _is_module(name)]
    return sorted(seen)


def third_party_imports(module: str) -> set[str]:
    """Top-level names of the non-backend, non-stdlib modules ``module`` imports (outside ``if TYPE_CHECKING:``)."""
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in {"backend", "__future__"}}


def installed_with(requirements: dict[str, Requirement]) -> set[str]:
    """Canonical names of the distributions the requirements bring, following installed metadata (no extras)."""
    seen, todo = set(), [canonicalize_name(name) for name in requirements]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


# --- which interpreter ---------------------------------------------------------------------------------------------
def test_the_trainer_and_app_interpreters_default_to_this_one_and_follow_their_variables(tmp_path, monkeypatch):
    monkeypatch.delenv(TRAINER_PYTHON_VAR, raising=False)
    monkeypatch.delenv(APP_PYTHON_VAR, raising=False)
    assert trainer_python() == sys.executable and app_python() == sys.executable
    other = tmp_path / "python"
    other.symlink_to(sys.executable)
    monkeypatch.setenv(TRAINER_PYTHON_VAR, str(other))
    monkeypatch.setenv(APP_PYTHON_VAR, str(other))
    assert trainer_python() == str(other) and app_python() == str(other)  # the path given, not where it points


@pytest.mark.parametrize("value", ["/nowhere/bin/python", "not-a-python-anywhere", "{tmp}"])
def test_a_trainer_python_that_is_not_executable_is_refused_with_the_variables_name(value, tmp_path, monkeypatch):
    monkeypatch.setenv(TRAINER_PYTHON_VAR, value.format(tmp=tmp_path))  # {tmp}: a directory
    with pytest.raises(InterpreterError) as refused:
        trainer_python()
    message = str(refused.value)
    assert message.startswith(f"{TRAINER_PYTHON_VAR} is set to ") and "not an executable file" in message
    assert "requirements-trainer.txt" in message and "Traceback" not in message


def test_a_job_under_a_missing_trainer_python_fails_with_that_sentence_and_the_queue_moves_on(
    paths, store, monkeypatch
):
    monkeypatch.setenv(TRAINER_PYTHON_VAR, "/nowhere/bin/python")
    first = store.add(parse_spec(tiny_spec()))
    second = store.add(parse_spec(tiny_spec()))
    scheduler = Scheduler(paths, poll_interval=0.1)
    # Said at start already, before any job: in the log and in the queue's health.
    assert scheduler.health().last_error.startswith(f"{TRAINER_PYTHON_VAR} is set to '/nowhere/bin/python'")
    assert scheduler.try_acquire()
    try:
        assert scheduler._step()  # a setting, not a failed tick: no retry back-off
    finally:
        scheduler.release()
    for job_id in (first.id, second.id):
        job = store.get(job_id)
        assert job.status is JobStatus.failed and job.pid is None
        assert job.error.startswith(
            f"{TRAINER_PYTHON_VAR} is set to '/nowhere/bin/python', which is not an "
            "executable file, so the training worker cannot start"
        ), job.error


def test_single_and_multi_gpu_workers_start_under_the_trainer_python(paths, store, monkeypatch, tmp_path):
    """The accelerate launch form too: accelerate starts its ranks with its own interpreter, the trainer's."""
    argv_file = tmp_path / "argv.jsonl"
    # A stand-in trainer interpreter that records how it was started, then fails the way a broken one would.
    recorder = executable(
        tmp_path / "trainer-python",
        f"""#!{sys.executable}
import json, sys
with open({str(argv_file)!r}, "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
sys.exit(3)
""",
    )
    monkeypatch.setenv(TRAINER_PYTHON_VAR, str(recorder))
    single = store.add(parse_spec(tiny_spec()))
    multi = store.add(parse_spec(tiny_spec(training={"num_processes": 2})))
    scheduler = Scheduler(paths, poll_interval=0.1, max_concurrent=1).start()
    try:
        for job in (single, multi):
            done = wait_status(store, job.id, FINAL, timeout=60)
            assert done.status is JobStatus.failed and "code 3" in done.error, done.error
    finally:
        scheduler.stop()
    started = [json.loads(line) for line in argv_file.read_text().splitlines()]
    assert started[0] == ["-m", "backend.worker", "--job-id", single.id, "--data-dir", str(paths.root)]
    assert started[1][:2] == ["-m", "accelerate.commands.launch"]
    assert started[1][-6:] == ["--module", "backend.worker", "--job-id", multi.id, "--data-dir", str(paths.root)]


def test_a_hugging_face_job_reruns_its_entry_point_under_the_trainer_python(tmp_path):
    """The image's `python -m backend.remote_job` is the app's python; the job trains under /opt/trainer's."""
    seen = tmp_path / "seen.json"
    recorder = executable(
        tmp_path / "trainer-python",
        f"""#!{sys.executable}
import json, os, sys
json.dump({{"argv": sys.argv[1:], "app": os.environ.get({APP_PYTHON_VAR!r})}}, open({str(seen)!r}, "w"))
""",
    )
    command = [sys.executable, "-m", "backend.remote_job", "--spec-b64", "e30="]
    env = {**os.environ, "PYTHONPATH": str(ROOT), TRAINER_PYTHON_VAR: str(recorder)}
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=120)
    assert json.loads(seen.read_text()) == {
        "argv": ["-m", "backend.remote_job", "--spec-b64", "e30="],
        "app": sys.executable,
    }
    refused = subprocess.run(
        command,
        cwd=ROOT,
        env={**env, TRAINER_PYTHON_VAR: "/nowhere/python"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and refused.stderr.startswith(f"{TRAINER_PYTHON_VAR} is set to '/nowhere/python'")


def test_a_builtin_environment_server_starts_under_the_app_python(tmp_path, monkeypatch):
    marker = tmp_path / "started-by-app-python"
    app = executable(tmp_path / "app-python", f'#!/bin/sh\ntouch {marker}\nexec {sys.executable} "$@"\n')
    monkeypatch.setenv(APP_PYTHON_VAR, str(app))
    with start_builtin("echo", max_sessions=2, log_dir=tmp_path / "echo") as server:
        assert server.process.args[0] == str(app) and marker.is_file()
    monkeypatch.setenv(APP_PYTHON_VAR, str(tmp_path / "missing"))
    with pytest.raises(EnvironmentStartError, match=f"^{APP_PYTHON_VAR} is set to "):
        start_builtin("echo", max_sessions=2)


def test_the_worker_and_every_backend_module_it_imports_load_without_the_apps_packages():
    modules = worker_modules()
    assert {
        "backend.methods.sft",
        "backend.methods.dpo",
        "backend.methods.grpo",
        "backend.methods.kto",
        "backend.environments.runtime",
        "backend.training.evaluation",
        "backend.hub.publish",
    } <= set(modules)
    probe = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        f"print([m for m in sys.modules if m.split('.')[0] in {APP_ONLY!r}])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert out.strip() == "[]", out


def test_requirements_trainer_brings_every_library_the_worker_imports():
    brought = installed_with(requirement_pins(ROOT / "requirements-trainer.txt"))
    providers = packages_distributions()
    missing = {}
    for module in worker_modules():
        for name in third_party_imports(module) - set(NOT_RUN_BY_THE_WORKER):
            dists = {canonicalize_name(d) for d in providers.get(name, [name])}
            if not dists & brought:
                missing[name] = module
    assert not missing, f"requirements-trainer.txt does not bring these imports (module: importer): {missing}"


# --- a whole job in a trainer environment without the app's packages ---------------------------------------------
@pytest.fixture(scope="module")
def trainer_venv(tmp_path_factory) -> Path:
    """A real venv (no system site packages) that sees this environment's site-packages, less the app-only packages,
    through a symlink farm; returns its python."""
    root = tmp_path_factory.mktemp("trainer-env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    farm = root / "site-packages"
    farm.mkdir()
    sources = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    for source in map(Path, sources):
        for entry in source.iterdir():
            if not app_only(entry.name) and not (farm / entry.name).exists():
                (farm / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir, not a bare path line: the farm's own .pth files are processed as in a real site-packages.
    (Path(venv_site) / "studio-trainer-farm.pth").write_text(f"import site; site.addsitedir({str(farm)!r})\n")
    return python


def test_the_trainer_venv_has_the_training_libraries_and_none_of_the_apps(trainer_venv):
    probe = (
        "import importlib.util, sys; import torch, trl, peft, transformers, websockets.sync.client; "
        f"print(sys.prefix, [m for m in {APP_ONLY!r} if importlib.util.find_spec(m)])"
    )
    out = subprocess.run([str(trainer_venv), "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    prefix, found = out.stdout.strip().split(" ", 1)
    assert Path(prefix) == trainer_venv.parent.parent and found == "[]", out.stdout
    for module in ("gradio", "openenv"):
        refused = subprocess.run([str(trainer_venv), "-c", f"import {module}"], capture_output=True, text=True)
        assert refused.returncode != 0 and f"No module named '{module}'" in refused.stderr


@pytest.mark.slow
def test_sft_and_grpo_with_the_builtin_environment_train_under_a_trainer_python_without_gradio_or_openenv(
    trainer_venv, paths, store, scheduler_factory, monkeypatch
):
    monkeypatch.setenv(TRAINER_PYTHON_VAR, str(trainer_venv))
    monkeypatch.delenv(APP_PYTHON_VAR, raising=False)
    sft = store.add(parse_spec(tiny_spec(training={"max_steps": 2})))
    grpo = store.add(
        parse_spec(
            tiny_spec(
                method="grpo",
                dataset={"source": "builtin", "name": "echo-demo"},
                environment={"name": "builtin:echo", "eval_episodes": 0},
                grpo={"num_generations": 2, "max_completion_length": 32, "temperature": 0.7, "rewards": []},
                training={"max_steps": 1, "batch_size": 2, "max_length": 256, "save_steps": 1000},
                forecast={"train_anyway": True},  # the random model never calls the tool: no signal, trained anyway
            )
        )
    )
    scheduler_factory()

    done = wait_status(store, sft.id, FINAL, timeout=300)
    assert done.status is JobStatus.succeeded, done.error
    log_text = paths.job_log(sft.id).read_text()
    assert f"running under {trainer_venv} " in log_text, log_text[-2000:]
    assert (Path(done.artifacts.adapter_dir) / "adapter_model.safetensors").is_file()

    done = wait_status(store, grpo.id, FINAL, timeout=400)
    assert done.status is JobStatus.succeeded, done.error
    log_text = paths.job_log(grpo.id).read_text()
    assert f"running under {trainer_venv} " in log_text
    # The server needs openenv, so it ran under the app's interpreter (this one), not the trainer's.
    assert "started built-in environment echo at http://127.0.0.1:" in log_text
    assert f"under {sys.executable})" in log_text, log_text[-3000:]
    assert done.artifacts.environment and done.artifacts.global_step == 1
    assert (Path(done.artifacts.adapter_dir) / "adapter_model.safetensors").is_file()
