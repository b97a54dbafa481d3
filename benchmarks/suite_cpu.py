"""Where a command's CPU goes, by kind of process: runs COMMAND and, every half second until it ends, reads every
process's CPU time from /proc and adds what each spent since the last look to its kind (the test processes, app
processes, workers forked from the pre-imported pool, fresh workers, the CLI, chromium, environment servers).

    python benchmarks/suite_cpu.py --label "fresh-clone .ci/run at 1a2b3c4" [--record] -- bash .ci/run

The suite's wall time on 2 cores is bounded below by its CPU seconds / 2 once both cores are busy (vmstat read them
97% busy through a pytest run on 2026-12-07, and this script 90% over a whole `.ci/run`, pip included), so cutting
the wall means cutting CPU seconds; a test that waits costs wall time only where it leaves a core idle. This script
says which kind of process to make cheaper. A process that lives under half a second between two looks is missed;
what the machine's other processes spend is counted as "other".
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record import report  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
# (a piece of the command line, its kind), the first that matches wins.
KINDS = (
    ("chrom", "chromium"),
    ("app.py", "app"),
    ("backend.worker_pool", "pool and its forked workers"),
    ("backend.worker", "fresh workers"),
    ("backend.jobs.scheduler", "detached schedulers"),
    ("backend.environments", "environment servers"),
    ("server", "environment servers"),  # the tests' own OpenEnv servers (tests/helpers/env_servers, OpenEnv's)
    ("uvicorn", "environment servers"),
    ("backend.data.uploads", "upload checks"),
    ("backend.training.reward_checks", "reward-model checks"),
    ("backend.workflows.gguf_child", "GGUF conversion"),
    ("-m backend ", "CLI"),
    ("pytest", "test processes"),
    ("exec(eval(sys.stdin", "test processes"),  # pytest-xdist's workers
    ("playwright", "playwright driver"),
    ("mypy", "lint (ruff, mypy)"),
    ("ruff", "lint (ruff, mypy)"),
    ("pip", "pip"),
    ("python", "other python"),
)


def kind(command: str) -> str:
    return next((name for piece, name in KINDS if piece in command), "other")


def processes() -> dict[tuple[str, str], tuple[float, str]]:
    """(pid, start time) -> (CPU seconds so far, command line) for every process readable now."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[(pid, fields[19])] = ((int(fields[11]) + int(fields[12])) / TICK, command)
    return found


def busy_seconds() -> float:
    """The machine's non-idle CPU seconds since boot (all cores), from /proc/stat."""
    user, nice, system, idle, iowait, *rest = (int(v) for v in Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + sum(rest)) / TICK


def measure(command: list[str], every: float = 0.5) -> tuple[collections.Counter[str], float, float, int]:
    """(CPU seconds by kind, wall seconds, the machine's busy CPU seconds, the command's exit code)."""
    seen = {key: cpu for key, (cpu, _) in processes().items()}  # what ran before counts from now
    spent: collections.Counter[str] = collections.Counter()
    busy_before, started = busy_seconds(), time.monotonic()
    child = subprocess.Popen(command)
    while True:
        done = child.poll() is not None
        for key, (cpu, line) in processes().items():
            spent[kind(line)] += cpu - seen.get(key, 0.0)
            seen[key] = cpu
        if done:
            break
        time.sleep(every)
    return spent, time.monotonic() - started, busy_seconds() - busy_before, child.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="what ran, at which commit, beside what")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    spent, wall, busy, code = measure(command)
    counted = sum(spent.values())
    cores = os.cpu_count() or 1
    what = f"CPU by kind of process ({args.label})"
    share = busy / (wall * cores)
    rows = [(what, f"{wall:.0f} s wall, {busy:.0f} CPU s busy of {wall * cores:.0f} ({share:.0%}); exit {code}")]
    for name, seconds in spent.most_common():
        if seconds >= 1:
            rows.append((f"{what}: {name}", f"{seconds:.0f} s ({seconds / counted:.0%})"))
    report(rows, args.record)
    return code


if __name__ == "__main__":
    sys.exit(main())
