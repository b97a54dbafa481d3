"""The entry point a Hugging Face job runs inside the studio's image: the same worker, the same spec, then a push.

    python -m backend.remote_job --spec-b64 B64 [--job-id ID]

The container's disk goes away with it, so success means "the adapter is on the Hub": the exit code is 0 only when
training succeeded and the push did too. The token comes in the HF_TOKEN secret and is never printed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from backend.core.paths import DataPaths
from backend.core.spec import SpecError
from backend.hub.hf_jobs import decode_spec
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.platform.interpreters import APP_PYTHON_VAR, InterpreterError, trainer_python

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Set before re-running under the trainer's interpreter: the second process trains where it is (never a loop).
REEXECUTED_VAR = "STUDIO_REMOTE_JOB_REEXECUTED"
log = logging.getLogger("studio.remote_job")


def run_remote(spec_b64: str, job_id: str | None = None) -> int:
    """Run one job from its base64 spec in a fresh local store and push the adapter; returns the exit code."""
    try:
        spec = decode_spec(spec_b64)
    except SpecError as exc:
        print("The spec cannot run:", *exc.problems, sep="\n  - ", file=sys.stderr)
        return EXIT_USAGE
    token = os.environ.get("HF_TOKEN", "").strip()
    if not token:
        print(
            "HF_TOKEN is not set: the job needs the user's token (sent as a secret) to push its adapter",
            file=sys.stderr,
        )
        return EXIT_USAGE
    paths = DataPaths(os.environ.get("STUDIO_DATA_DIR")).ensure()
    store = JobStore(paths.db)
    job = store.add(spec, job_id=job_id)
    claimed = store.claim_next()
    if claimed is None or claimed.id != job.id:
        print(f"could not start job {job.id} in the fresh store", file=sys.stderr)
        return EXIT_FAILED

    from backend.hub.publish import PushError, push_job
    from backend.worker import run_job

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # a cancelled HF job stops at the next training step
    code = run_job(job.id, paths, stop)
    done = store.get(job.id)
    if code != 0 or done.status is not JobStatus.succeeded:
        print(f"job {job.id} ended {done.status.value}: {done.error or ''}", file=sys.stderr)
        return EXIT_FAILED
    if done.artifacts.hub:  # the worker's own auto-push (output.push_to_hub) already went through
        log.info("adapter pushed to %s", done.artifacts.hub.url)
        return EXIT_OK
    try:
        result = push_job(done, paths, store, token)
    except PushError as exc:
        print(f"training succeeded but the push failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    log.info("adapter pushed to %s", result.url)
    return EXIT_OK


def run_under_the_trainer_python(argv: list[str]) -> None:
    """Re-run this entry point under ``STUDIO_TRAINER_PYTHON`` when that is another interpreter (the Dockerfile's
    /opt/trainer, which has vLLM), as the scheduler does for its workers; returns only when this one is it."""
    python = trainer_python()
    if python == sys.executable:
        return
    os.environ[APP_PYTHON_VAR] = sys.executable  # built-in environment servers need the app's openenv
    os.environ[REEXECUTED_VAR] = python
    os.execv(python, [python, "-m", "backend.remote_job", *argv])


def main(argv: list[str] | None = None) -> int:
    """Entry point of a job on Hugging Face Jobs: re-run under the trainer's interpreter, then ``run_remote``."""
    parser = argparse.ArgumentParser(description="Run one Post-Training Studio job on Hugging Face Jobs.")
    parser.add_argument("--spec-b64", required=True)
    parser.add_argument("--job-id", default=None)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if not os.environ.get(REEXECUTED_VAR):
        try:
            run_under_the_trainer_python(argv)
        except InterpreterError as exc:
            print(exc, file=sys.stderr)
            return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_remote(args.spec_b64, args.job_id)


if __name__ == "__main__":
    sys.exit(main())
