"""How fast does the Jobs tab open? Click-to-summary latency in Chromium, with a job training.

The app runs as a real process with finished jobs in its store (``--jobs``, 50 metric rows each) and an SFT job of the
demo model training in its worker. A headless Chromium (Debian's, as the browser tests use) opens the page and then
``--rounds`` times clicks the Train tab (timed until the Queue button is visible) and the Jobs tab (timed until the
picked job's summary is visible and names the job). Times are the page's own: the first frame that shows it, and
(``page_free_again``) when the page next runs a script, which it cannot while it draws. The first open of each fresh
page load is timed on its own: it draws the tab for the first time.

    python benchmarks/jobs_tab.py [--rounds 30] [--loads 5] [--jobs 50]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.latency import _fill_store, _summary, job_status, launch_app, start_training  # noqa: E402 - after the path

CHROMIUM = "/usr/bin/chromium"


def _timed(page, click, ready: str) -> tuple[float, float]:
    """(shown, settled) in milliseconds after a click, in the page's own clock: the first frame in which ``ready`` (a
    JS expression) held, and when the page next answered a script (it cannot while it is busy drawing)."""
    page.evaluate(
        f"""() => {{
        window.__clicked = performance.now();
        window.__shown = null;
        const poll = () => {{
            if ({ready}) window.__shown = performance.now() - window.__clicked;
            else requestAnimationFrame(poll);
        }};
        requestAnimationFrame(poll);
    }}"""
    )
    click()
    page.wait_for_function("() => window.__shown !== null", timeout=30_000, polling="raf")
    return page.evaluate("() => [window.__shown, performance.now() - window.__clicked]")


def _summary_shows(job_id: str) -> str:
    return (
        "(() => { const s = document.querySelector('#job-summary');"
        f" return !!s && s.offsetParent !== null && s.innerText.includes({json.dumps(job_id)}); }})()"
    )


QUEUE_SHOWS = "(() => { const b = document.querySelector('#queue-button'); return !!b && b.offsetParent !== null; })()"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="Train -> Jobs switches on one page")
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads, each timing its first Jobs open")
    parser.add_argument("--jobs", type=int, default=50, help="finished jobs in the store before measuring")
    args = parser.parse_args()
    from gradio_client import Client
    from playwright.sync_api import sync_playwright

    data = Path(tempfile.mkdtemp(prefix="studio-jobs-tab-"))
    _fill_store(data, args.jobs)
    proc, url = launch_app(data)
    client = job_id = None
    try:
        client = Client(url, verbose=False)
        job_id = start_training(client, 100_000)
        first_open, to_train, to_jobs, jobs_settled, errors = [], [], [], [], []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            jobs_tab = page.get_by_role("tab", name="Jobs")
            train_tab = page.get_by_role("tab", name="Train")
            for _ in range(args.loads):
                page.goto(url)
                page.wait_for_function(QUEUE_SHOWS, timeout=60_000)
                page.wait_for_timeout(1000)  # the page's own start-up requests settle
                first_open.append(_timed(page, jobs_tab.click, _summary_shows(job_id))[0])
            page.wait_for_timeout(2500)  # the plots and log of the first open have drawn
            for _ in range(args.rounds):
                to_train.append(_timed(page, train_tab.click, QUEUE_SHOWS)[0])
                page.wait_for_timeout(300)
                shown, settled = _timed(page, jobs_tab.click, _summary_shows(job_id))
                to_jobs.append(shown)
                jobs_settled.append(settled)
                page.wait_for_timeout(1000)  # the plots that follow the summary have drawn
            browser.close()
        still = job_status(client, job_id)["status"]
        print(
            json.dumps(
                {
                    "jobs_in_store": args.jobs + 1,
                    "first_open_after_load": _summary(first_open),
                    "jobs_tab_switch": _summary(to_jobs),
                    "jobs_tab_switch_page_free_again": _summary(jobs_settled),
                    "train_tab_switch": _summary(to_train),
                    "job_still_running_at_end": still == "running",
                    "page_errors": len(errors),
                    "cpu_cores": os.cpu_count(),
                },
                indent=2,
            )
        )
    finally:
        if job_id:  # its worker outlives the app (a restart adopts it): stop the job first
            client.predict(job_id, api_name="/cancel_job")
            time.sleep(5)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


if __name__ == "__main__":
    main()
