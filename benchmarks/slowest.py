"""Reads a pytest run's output (the suite's own ``--durations``, as `.ci/run` prints it) and reports its time and its
ten slowest tests.

    python benchmarks/slowest.py LOG --label "after, 1a2b3c4, fresh-clone .ci/run, nothing else running" [--record]

LOG is what the run printed (``.ci/run > LOG 2>&1``). The figures are the run's, on the machine and at the load it
ran at: ``--label`` says which (the load recorded in the row is this script's, not the run's).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record import report  # noqa: E402

DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)$")
SUMMARY = re.compile(r"^=+ (?P<counts>.+?) in (?P<seconds>[\d.]+)s")


def read_run(text: str) -> tuple[str, float, list[tuple[float, str, str]]]:
    """(the run's counts, its seconds, its durations slowest first) from pytest's output.

    >>> read_run("3.50s call     a.py::t\\n1.00s setup    b.py::u\\n== 2 passed in 9.1s ==\\n")
    ('2 passed', 9.1, [(3.5, 'call', 'a.py::t'), (1.0, 'setup', 'b.py::u')])
    """
    durations, counts, seconds = [], "", 0.0
    for line in text.splitlines():
        if found := DURATION.match(line.strip()):
            durations.append((float(found["seconds"]), found["phase"], found["test"]))
        elif found := SUMMARY.match(line.strip()):
            counts, seconds = found["counts"], float(found["seconds"])
    return counts, seconds, sorted(durations, reverse=True)


def main(argv: list[str] | None = None) -> int:
    """Print (and with --record append) the run's time and its ten slowest tests."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--label", required=True, help="which run: when, at which commit, how, at what load")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args(argv)
    counts, seconds, durations = read_run(args.log.read_text(errors="replace"))
    if not counts:
        parser.error(f"{args.log} holds no pytest summary line")
    rows = [(f"test suite ({args.label})", f"{counts}; pytest {seconds:.0f} s")]
    rows += [
        (f"test suite ({args.label}): slowest #{rank}", f"{took:.0f} s {phase} `{test}`")
        for rank, (took, phase, test) in enumerate(durations[:10], start=1)
    ]
    report(rows, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
