"""The Jobs tab's refresh of a running job: its summary at every tick, its plots, samples and logs at most every
``HEAVY_EVERY_S`` (issue 37: redrawing four plots and the logs every 2 s kept the page busy, so a click on the tab
waited behind those draws; benchmarks/jobs_tab.py measures it)."""

from __future__ import annotations

import time

import gradio as gr

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from components.jobs import handlers as jobs_tab
from tests.helpers import tiny_spec


def _handler(demo, api_name: str):
    (fn,) = [f.fn for f in demo.fns.values() if f.api_name == api_name]
    return fn


def test_a_running_jobs_plots_are_resent_at_most_every_ten_seconds_and_its_summary_every_tick(paths, monkeypatch):
    from app import build_app

    api = StudioAPI(paths.root, scheduler="none")
    try:
        demo = build_app(api)
        tick = _handler(demo, "refresh_jobs")
        show = demo.config["dependencies"]
        (deps,) = [d for d in show if d.get("api_name") == "refresh_jobs"]
        components = {c["id"]: c.get("props", {}).get("elem_id") for c in demo.config["components"]}
        names = [components[i] for i in deps["outputs"]]
        job = api.core.store.add(parse_spec(tiny_spec(training={"max_steps": 100})))
        api.core.store.claim_next()
        api.core.store.report(job.id, [(1, time.time(), {"loss": 2.0})], {"step": 1, "total_steps": 100})

        clock = [1000.0]
        monkeypatch.setattr(jobs_tab.time, "monotonic", lambda: clock[0])
        first = tick(None, None, job.id, {})  # no profile or token: the local user
        seen = first[-1]
        assert first[names.index("job-plot-panel")] != gr.skip() and first[names.index("job-summary")] != gr.skip()

        api.core.store.report(job.id, [(2, time.time(), {"loss": 1.5})], {"step": 2, "total_steps": 100})
        clock[0] += jobs_tab.REFRESH_S
        heavy_built = []
        build_heavy = jobs_tab.heavy_updates
        monkeypatch.setattr(jobs_tab, "heavy_updates", lambda *a: heavy_built.append(a) or build_heavy(*a))
        second = tick(None, None, job.id, seen)
        assert heavy_built == [], "a tick that sends no plots reads no metrics and draws no frames"
        sent = {n for n, v in zip(names, second) if not (isinstance(v, dict) and v == gr.skip())}
        assert "job-progress" in sent, f"the progress follows every tick: {sent}"
        assert not sent & {"job-plot-panel", "job-log-rows", "job-log"}, f"plots and logs resent 2 s later: {sent}"

        clock[0] += jobs_tab.HEAVY_EVERY_S
        third = tick(None, None, job.id, second[-1])
        sent = {n for n, v in zip(names, third) if not (isinstance(v, dict) and v == gr.skip())}
        assert {"job-plot-panel", "job-log-rows"} <= sent, f"the new step's plot and log row are sent 10 s on: {sent}"
    finally:
        api.close()
