"""What opening the app costs: the app's and Chromium's CPU for a page's first load (the header showing the device)
and for a reload, on a freshly started app with the demo data dir and no job anywhere.

    python benchmarks/page_load.py [--repeats 3] [--label TEXT] [--record]

Each repeat launches the app (``python app.py`` on 127.0.0.1, as the tests do) and Debian's Chromium (headless),
loads the page until the header says "Device:", then reloads it once, and reads over each load:

- the CPU seconds of the app and of every Chromium process (``/proc/PID/stat``, through ``benchmarks.suite_cpu``);
- the seconds until the header showed the device.

The first load is the one a Space's first visitor after a restart pays: it is where the app's lazy imports land.
The medians over the repeats are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from backend.models.demo import ensure_demo_model  # noqa: E402 - after the path, so it runs from anywhere
from benchmarks.idle_page import cpu_seconds, process_seconds  # noqa: E402
from tests.helpers.apps import data_dir_with_models, launch_app  # noqa: E402
from tests.helpers.browser import launch_chromium  # noqa: E402

KEYS = ("seconds", "app", "chromium")


def one_app(models: Path, tmp: Path) -> dict[str, float]:
    """One fresh app's first load and reload: CPU seconds of each side and seconds to the device in the header."""
    from playwright.sync_api import sync_playwright

    figures: dict[str, float] = {}
    with launch_app(data_dir_with_models(tmp / "data", models)) as app, sync_playwright() as pw:
        browser = launch_chromium(pw)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for load, go in (("first load", lambda: page.goto(app.url)), ("reload", page.reload)):
            app_cpu, chromium, started = process_seconds(app.proc.pid), cpu_seconds("chromium"), time.monotonic()
            go()
            page.locator("#header-status").get_by_text("Device:").wait_for(timeout=120_000)
            figures[f"{load} seconds"] = time.monotonic() - started
            page.wait_for_timeout(1000)  # the load's last requests settle
            figures[f"{load} app"] = process_seconds(app.proc.pid) - app_cpu
            figures[f"{load} chromium"] = cpu_seconds("chromium") - chromium
        browser.close()
    return figures


def measure(repeats: int, label: str = "") -> list[tuple[str, str]]:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        ensure_demo_model(models)
        for repeat in range(repeats):
            runs.append(one_app(models, Path(tmp) / f"run{repeat}"))
    rows = []
    for load in ("first load", "reload"):
        median = {key: statistics.median(run[f"{load} {key}"] for run in runs) for key in KEYS}
        what = f"page load: the {load} of a fresh app's page (median of {repeats}{', ' + label if label else ''})"
        rows.append(
            (
                what,
                f"the device in the header after {median['seconds']:.1f} s; the app {median['app']:.2f} CPU s, "
                f"Chromium {median['chromium']:.2f} CPU s",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="", help="what was measured, e.g. the commit")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args(argv)
    from benchmarks.record import report

    report(measure(args.repeats, args.label), args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
