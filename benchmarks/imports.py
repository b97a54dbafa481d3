"""What transformers' scikit-learn import costs a process, and what ``backend/platform/lean_imports.py`` saves.

    python benchmarks/imports.py [--repeats 5] [--record]

Each figure is the median CPU time (user + system, steadier than wall time on a shared machine) of ``--repeats``
fresh interpreters (one torch thread, as the workers run), each importing, after ``import backend``:

- ``tokenizer``: ``from transformers import AutoTokenizer`` (what an app's first submit or a CLI submit imports for
  the pre-flight);
- ``worker``: everything the worker pool pre-imports (``backend.worker_pool.PREIMPORTS`` and its lazy attributes),
  what a fresh worker imports before its first step;

once as the studio runs (transformers' candidate generator imported as if scikit-learn were absent) and once with that
switched off (the finder taken out of ``sys.meta_path`` before anything imports transformers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WITHOUT = (
    "import sys; from backend.platform.lean_imports import _Finder; "
    "sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]; "
)
IMPORTS = {
    "tokenizer": "from transformers import AutoTokenizer",
    "worker": (
        "import importlib; from backend.worker_pool import PREIMPORTS, LAZY_ATTRIBUTES\n"
        "for name in PREIMPORTS: importlib.import_module(name)\n"
        "for name, attributes in LAZY_ATTRIBUTES.items():\n"
        "    module = importlib.import_module(name)\n"
        "    for attribute in attributes: getattr(module, attribute)"
    ),
}


def timed(code: str, lean: bool) -> tuple[float, bool]:
    """CPU seconds a fresh interpreter spends on ``code`` after ``import backend`` (its start included), and whether
    it imported sklearn."""
    program = (
        "import time; started = time.perf_counter(); import backend\n"
        + ("" if lean else WITHOUT + "\n")
        + code
        + "\nimport resource, sys; used = resource.getrusage(resource.RUSAGE_SELF)"
        + "\nprint(used.ru_utime + used.ru_stime, 'sklearn' in sys.modules)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", program], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    seconds, sklearn = out.stdout.split()[-2:]
    return float(seconds), sklearn == "True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args(argv)
    rows = []
    for name, code in IMPORTS.items():
        runs = {lean: [timed(code, lean) for _ in range(args.repeats)] for lean in (False, True)}
        before, after = (statistics.median(s for s, _ in runs[lean]) for lean in (False, True))
        rows.append(
            (
                f"imports: {name}, a fresh interpreter (median of {args.repeats})",
                f"{before:.2f} CPU s -> {after:.2f} CPU s with transformers' candidate generator imported without "
                f"scikit-learn ({before - after:.2f} s saved); sklearn imported: "
                f"{runs[False][0][1]} -> {runs[True][0][1]}",
            )
        )
    from benchmarks.record import report

    report(rows, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
