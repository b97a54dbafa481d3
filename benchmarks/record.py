"""The benchmark scripts' one way to write figures: dated rows appended to docs/benchmarks.md, naming the machine."""

from __future__ import annotations

import os
import platform
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmark figures\n\n"
    "Dated rows written by the scripts in `benchmarks/` (with `--record`; each script's docstring says how to run\n"
    "it); the newest last. A row is a measurement on the machine it names, not a promise for another one. The\n"
    "development machine's 2 cores were often shared with other test runs: the load average is in the row.\n\n"
    "| date | machine | what | figure |\n| --- | --- | --- | --- |\n"
)


def machine() -> str:
    """The machine in a few words: CPU model, cores, torch threads and the load (a busy machine explains a slow
    figure)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, load {os.getloadavg()[0]:.1f}"


def record(rows: list[tuple[str, str]]) -> None:
    """Append (what, figure) rows, dated today and naming this machine, to docs/benchmarks.md."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    where, today = machine(), date.today().isoformat()
    RESULTS.write_text(text + "".join(f"| {today} | {where} | {what} | {figure} |\n" for what, figure in rows))
    print(f"recorded {len(rows)} rows in {RESULTS.relative_to(RESULTS.parents[1])}")


def report(rows: list[tuple[str, str]], keep: bool) -> None:
    """Print (what, figure) rows, and with ``keep`` (a script's ``--record``) append them to docs/benchmarks.md."""
    for what, figure in rows:
        print(f"{what}: {figure}")
    if keep:
        record(rows)
