"""Shared fixtures and hooks: offline mode, one demo model build per session, a fresh data directory per test, and the
facade on it (``api``, closed after each test).

Plain helpers (waits, a quick spec, the app and browser drivers) are in tests/helpers."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("STUDIO_SPACE_RESERVE_MB", "1")  # hundreds of data dirs: 1 MiB each, not 8
# The suite runs on two pytest processes (pyproject.toml: pytest-xdist), each starting workers: one torch thread per
# process. The demo models are too small for a second thread to help (22 s vs 23 s for dpo-demo on 2 cores), while
# two processes of two threads each on 2 cores took 89 s against 27 s with one thread each
# (2026-12-03; the measurement is in docs/benchmarks.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.paths import DataPaths
from backend.jobs.launchers import WORKER_POOL_VAR, PoolLauncher, SubprocessLauncher
from backend.jobs.scheduler import Scheduler
from backend.jobs.store import JobStore
from backend.models.demo import ensure_demo_model
from tests.helpers import wait_for

# Fixtures that start an app process, a browser or a scheduler with workers, or train a model: every test that uses
# one is slow, marked here so the fast lane (`pytest -m "not slow"`) never waits on one, whoever writes the test.
SLOW_FIXTURES = frozenset(
    {
        "app",
        "space",
        "running",
        "app_url",
        "app_with_jobs",
        "browser",
        "page",
        "scheduler_factory",
        "chat_job",
        "trained",
        "warmed",
        "alices_job",
        "trainer_venv",
        "pool_socket",
    }
)


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


BROWSER_TESTS = Path(__file__).parent / "browser"


@pytest.hookimpl(trylast=True)  # after the module's own fixtures (its pages) are torn down
def pytest_runtest_teardown(item, nextitem):
    """Stop this process's Chromium (``tests.helpers.browser``) once the next test is not a browser test: browser
    modules in a row share it, and no other module runs beside Playwright's event loop."""
    if nextitem is None or BROWSER_TESTS not in Path(nextitem.path).parents:
        from tests.helpers.browser import close_chromium

        close_chromium()


@pytest.fixture(scope="session", autouse=True)
def worker_pool(request, tmp_path_factory):
    """One pre-imported worker pool for the session (``backend.worker_pool``), when slow tests run: every scheduler,
    in this process or in an app or CLI it starts, forks its workers from it instead of paying the imports of torch
    and TRL per job. It starts in the background; until it is ready, schedulers start fresh workers. Tests whose
    subject is the process itself (signals, adoption, memory caps) use ``fresh_workers``."""
    if not any(item.get_closest_marker("slow") for item in request.session.items):
        yield None
        return
    folder = tmp_path_factory.mktemp("pool")
    pool = PoolLauncher.own_pool(folder / "pool.log")
    os.environ[WORKER_POOL_VAR] = pool.socket_path
    try:
        yield Path(pool.socket_path)
    finally:
        os.environ.pop(WORKER_POOL_VAR, None)
        pool.close()
        forks = (folder / "pool.log").read_text(errors="replace").count("forked worker")
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"worker pool: {forks} jobs ran in workers forked from the pre-imported pool")


@pytest.fixture()
def pool_socket(worker_pool) -> Path:
    """The session's worker pool, once it is ready (it imports for about 15 s after the session starts)."""
    assert worker_pool is not None
    wait_for(worker_pool.exists, 180, what="the worker pool to be ready")
    return worker_pool


@pytest.fixture()
def fresh_workers(monkeypatch):
    """Workers started as fresh interpreters, as production starts them: for tests whose subject is the process."""
    monkeypatch.delenv(WORKER_POOL_VAR, raising=False)
    return SubprocessLauncher()


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    models = tmp_path_factory.mktemp("models")
    ensure_demo_model(models)
    return models


@pytest.fixture()
def demo_model_path(models_dir) -> Path:
    return ensure_demo_model(models_dir)


@pytest.fixture()
def data_dir(tmp_path, models_dir, monkeypatch) -> Path:
    """A fresh data dir whose models/ points at the session's built demo model (built once, not per test)."""
    root = tmp_path / "data"
    root.mkdir()
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    monkeypatch.setenv("STUDIO_DATA_DIR", str(root))
    return root


@pytest.fixture()
def paths(data_dir) -> DataPaths:
    return DataPaths(data_dir).ensure()


@pytest.fixture()
def store(paths) -> JobStore:
    return JobStore(paths.db)


@pytest.fixture()
def make_api(paths, request):
    """Build facades: ``make_api(data_dir=None, **kwargs)`` is ``StudioAPI(data_dir or paths.root, scheduler="none",
    **kwargs)``, closed after the test (its threads, sockets and pools), each one. For a facade built after the test
    sets something up (a setting in the environment) or on another data dir."""

    def make(data_dir: Path | str | None = None, **kwargs) -> StudioAPI:
        kwargs.setdefault("scheduler", "none")  # nothing runs: jobs stay queued
        api = StudioAPI(data_dir or paths.root, **kwargs)
        request.addfinalizer(api.close)
        return api

    return make


@pytest.fixture()
def api(make_api) -> StudioAPI:
    """The facade on the test's data dir, with no scheduler (jobs stay queued); closed after the test."""
    return make_api()


@pytest.fixture()
def scheduler_factory(paths):
    """Start schedulers on the test's data dir; every one is stopped and its workers killed afterwards."""
    started: list[Scheduler] = []

    def make(**kwargs) -> Scheduler:
        sched = Scheduler(paths, poll_interval=0.1, **kwargs).start()
        started.append(sched)
        return sched

    yield make
    for sched in started:
        sched.stop()
        for run in list(sched._running.values()):
            try:
                os.killpg(run.pid, 9)
            except ProcessLookupError:
                pass


@pytest.fixture(autouse=True)
def screenshot_on_failure(request):
    """A failing browser test (one using a ``page`` fixture) leaves tests/artifacts/failed-<test>.png behind, to see
    what the page showed."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before and "page" in request.fixturenames:
        from tests.helpers.browser import ARTIFACTS

        request.getfixturevalue("page").screenshot(path=ARTIFACTS / f"failed-{request.node.name}.png", full_page=True)
