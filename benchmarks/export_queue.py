"""Exports as queued jobs, as several users live with them: how long another user's export waits, how fast a second
export of one user is refused, and what twenty zip clicks leave on disk (issue 49).

    python benchmarks/export_queue.py            # prints the figures; about two minutes on 2 cores
    python benchmarks/export_queue.py --record   # also appends dated rows to docs/benchmarks.md

Real facade, real scheduler (its default launcher), real workers, the built-in demo model. Alice and Bob each train a
2-step SFT job; then Alice exports her job six times in a row (each once the last has ended, as the studio allows)
while Bob asks for one export in the middle; then Alice clicks "Adapter (zip)" twenty times 20 ms apart and five
more times once each has ended. Measured: Bob's wait from his click until his export runs, the refusal time of
Alice's repeats, the exports' durations, and the bytes under ``downloads/``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _train(api, user) -> str:
    from backend.jobs.records import JobStatus

    spec = {"model": {"name_or_path": "builtin:tiny-qwen3"}, "training": {"max_steps": 2, "batch_size": 2}}
    job = api.jobs.submit(spec, user=user).job
    return _wait(api, job.id, {JobStatus.succeeded}).id


def _wait(api, job_id: str, statuses, timeout: float = 600):
    from backend.jobs.records import JobStatus

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.core.store.get(job_id)
        if job.status in statuses or job.status in (JobStatus.failed, JobStatus.cancelled):
            assert job.status in statuses, (job.status, job.error)
            return job
        time.sleep(0.05)
    raise TimeoutError(job_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args()
    from backend.api import ExportBusy, StudioAPI
    from backend.core.users import User
    from backend.jobs.records import JobStatus

    with tempfile.TemporaryDirectory() as tmp:
        api = StudioAPI(Path(tmp) / "data", scheduler="thread")
        alice, bob = User("alice"), User("bob")
        try:
            jobs = {alice.name: _train(api, alice), bob.name: _train(api, bob)}
            durations, bob_wait, refusals = [], None, []
            for i in range(6):
                asked = time.monotonic()
                export = api.export.submit(jobs["alice"], alice, download=True).job
                if i == 2:
                    bob_asked = time.monotonic()
                    bobs = api.export.submit(jobs["bob"], bob).job
                    started = _wait(api, bobs.id, {JobStatus.running, JobStatus.succeeded})
                    bob_wait = time.monotonic() - bob_asked if started.started_at else None
                    _wait(api, bobs.id, {JobStatus.succeeded})
                refused_at = time.monotonic()
                try:
                    repeat = api.export.submit(jobs["alice"], alice, format="adapter").job  # hers had ended already
                    _wait(api, repeat.id, {JobStatus.succeeded})
                except ExportBusy:
                    refusals.append(time.monotonic() - refused_at)
                _wait(api, export.id, {JobStatus.succeeded})
                durations.append(time.monotonic() - asked)
            clicks_refused = 0
            for _ in range(20):
                try:
                    api.export.submit(jobs["alice"], alice, format="adapter")
                except ExportBusy:
                    clicks_refused += 1
                time.sleep(0.02)
            for _ in range(5):
                latest = api.export.latest(jobs["alice"], alice)
                while latest is not None and latest.active:
                    time.sleep(0.05)
                    latest = api.export.latest(jobs["alice"], alice)
                _wait(api, api.export.submit(jobs["alice"], alice, format="adapter").job.id, {JobStatus.succeeded})
            zips = list(api.core.paths.downloads.rglob("adapter-*.zip"))  # each job also keeps its one merged zip
            status = api.storage_status()
        finally:
            api.close()
    rows = [
        (
            "another user's export while one user exports 6 times (export jobs, own lane)",
            f"Bob's export running {bob_wait:.2f} s after his click (was 238 s behind Alice's six at 7c92e92)",
        ),
        (
            "a user's second export while one runs",
            f"refused in {max(refusals) * 1000:.0f} ms at most ({len(refusals)} of 6 tries refused; was 92 s in line)",
        ),
        (
            "one merged export of the demo model, click to download ready",
            f"median {statistics.median(durations):.1f} s",
        ),
        (
            "20 quick + 5 later 'Adapter (zip)' clicks",
            f"{clicks_refused} of 20 refused at once; {len(zips)} adapter zip on disk; all downloads (with 2 merged "
            f"zips) "
            f"{status['download_bytes'] / 1e6:.2f} MB, exports {status['export_bytes'] / 1e6:.2f} MB",
        ),
    ]
    from benchmarks.record import report

    report(rows, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
