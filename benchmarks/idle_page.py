"""What an open, idle page costs: Chromium's and the app's CPU while a user's tab sits on the Train, Jobs or Chat
tab and nobody touches it, with the app on the demo data dir and no job anywhere.

    python benchmarks/idle_page.py [--seconds 20] [--tabs Train Jobs Chat] [--record]

It launches the app (``python app.py`` on 127.0.0.1, as the tests do) and Debian's Chromium (headless), opens the page,
and for each tab reads, over ``--seconds`` of idleness:

- the CPU seconds of every Chromium process and of the app (``/proc/PID/stat``);
- the page's ``requestAnimationFrame`` calls per second, and the script that asked for most of them (the stack's top
  frame, from a wrapper the page gets before its own scripts run);
- the requests the page sent.

Before any tab, it also reads the app's CPU over the same time with no page open: the app's own idle cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from backend.models.demo import ensure_demo_model  # noqa: E402 - after the path, so it runs from anywhere
from benchmarks.suite_cpu import processes  # noqa: E402
from tests.helpers.apps import data_dir_with_models, launch_app  # noqa: E402
from tests.helpers.browser import launch_chromium  # noqa: E402

# Counts the page's animation-frame requests by the script frame that asked (its first line outside this wrapper).
COUNT_FRAMES = """(() => {
    const raf = window.requestAnimationFrame.bind(window);
    window.__frames = {};
    window.requestAnimationFrame = (callback) => {
        const caller = ((new Error().stack || "").split("\\n")[2] || "").trim().replace(/^at /, "").replace(/\\)$/, "");
        window.__frames[caller] = (window.__frames[caller] || 0) + 1;
        return raf(callback);
    };
})()"""


def cpu_seconds(match: str) -> float:
    """User + system CPU seconds of every process whose command line contains ``match``."""
    return sum(cpu for cpu, command in processes().values() if match in command)


def process_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    return sum(cpu for (found, _), (cpu, _) in processes().items() if found == str(pid))


def measure(seconds: float, tabs: list[str]) -> list[tuple[str, str]]:
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        ensure_demo_model(models)
        with launch_app(data_dir_with_models(Path(tmp) / "data", models)) as app:
            time.sleep(5)  # past its start-up
            before = process_seconds(app.proc.pid)
            time.sleep(seconds)
            idle = process_seconds(app.proc.pid) - before
            rows.append(("idle page: the app with no page open", f"{idle:.2f} CPU s in {seconds:.0f} s"))
            with sync_playwright() as pw:
                browser = launch_chromium(pw)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.add_init_script(COUNT_FRAMES)
                sent: list[str] = []
                page.on("request", lambda request: sent.append(request.url))
                page.goto(app.url)
                page.get_by_role("tab", name="Train").wait_for(timeout=60_000)
                for tab in tabs:
                    page.get_by_role("tab", name=tab).click()
                    page.wait_for_timeout(4000)  # the tab's own first requests settle
                    frames_before = page.evaluate("({...window.__frames})")
                    chromium, app_cpu, requests = cpu_seconds("chromium"), process_seconds(app.proc.pid), len(sent)
                    page.wait_for_timeout(seconds * 1000)
                    chromium = cpu_seconds("chromium") - chromium
                    app_cpu = process_seconds(app.proc.pid) - app_cpu
                    frames = {
                        caller: n - frames_before.get(caller, 0)
                        for caller, n in page.evaluate("window.__frames").items()
                    }
                    top = max(frames, key=frames.get) if frames else "none"
                    rows.append(
                        (
                            f"idle page: the {tab} tab open and untouched",
                            f"Chromium {chromium:.2f} CPU s and the app {app_cpu:.2f} CPU s in {seconds:.0f} s "
                            f"({100 * chromium / seconds:.0f}% and {100 * app_cpu / seconds:.0f}% of a core); "
                            f"{sum(frames.values()) / seconds:.0f} animation frames/s, most asked by "
                            f"`{top.rsplit('/', 1)[-1]}` ({frames.get(top, 0) / seconds:.0f}/s); "
                            f"{len(sent) - requests} requests",
                        )
                    )
                browser.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tabs", nargs="+", default=["Train", "Jobs", "Chat"])
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args(argv)
    from benchmarks.record import report

    report(measure(args.seconds, args.tabs), args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
