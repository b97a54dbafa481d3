"""Torch threads against processes for the demo models: why the test suite runs two processes of one thread each.

    python benchmarks/threads.py [example]      # default dpo-demo; about 3 minutes on 2 cores

Runs ``benchmarks/learning.py EXAMPLE`` (one job, in-process) four ways and prints the wall time of each: alone with
2 threads, alone with 1, two at once with 1 thread each, two at once with 2 threads each (OMP_NUM_THREADS).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(example: str, threads: int, copies: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, str(ROOT / "benchmarks" / "learning.py"), example]
    started = time.monotonic()
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(copies)
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"{example} failed with {threads} thread(s), {copies} at once: exit codes {codes}")
    return time.monotonic() - started


def main() -> int:
    example = sys.argv[1] if len(sys.argv) > 1 else "dpo-demo"
    print(f"{example} on {os.cpu_count()} CPUs")
    for threads, copies in ((2, 1), (1, 1), (1, 2), (2, 2)):
        print(f"{copies} at once, {threads} thread(s) each: {_run(example, threads, copies):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
