"""The agent arena in Chromium, on a Space: alice's finished GRPO job in the built-in arithmetic environment (the
arithmetic model learning to submit its answers with the tool), its base and tuned models playing side by side.

- Play: both transcripts render turn by turn, a tool call as a block (never raw ``<tool_call>`` markup), the tool's
  answer with the step's reward, and the end with the reward and whether it is a success.
- Play 8: the table's successes per side are the job's stored evaluation's, played again under the same rows and
  seeds (the evaluation plays greedily, and so does the arena by default); a row opens its pair.
- "played better" keeps a DPO row with tools; the pair's link opens it again, for alice only: bob is told it is not
  his, and bob's own calls to play or open alice's job are refused.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import wait_for
from tests.helpers.apps import app_fixture, session_cookie
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, chromium, goto, watch_errors

pytestmark = BROWSER_MARKS

EPISODES = 8
ARENA_JOB = {
    "method": "grpo",
    "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
    "dataset": {"source": "builtin", "name": "arith-env"},
    "environment": {
        "name": "builtin:arithmetic",
        "reward": "success",
        "max_tool_calling_iterations": 1,
        "eval_episodes": EPISODES,
    },
    "rollout": {"num_generations": 8, "max_completion_length": 96, "temperature": 0.7},
    # examples/grpo-env-demo.yaml's recipe: the tuned model submits most of its answers with the tool (0.8 calls
    # per episode, against the base's none), some of them right.
    "training": {"max_steps": 30, "learning_rate": 1.0e-3, "batch_size": 16, "max_length": 1024, "save_steps": 20},
    "eval": {"holdout_rows": EPISODES},
    "output": {"run_name": "arena-arith"},
}


# The owner allows the test's own OpenEnv server on 127.0.0.1, as a Space's owner allows a host they trust.
app = app_fixture(space=True, extra_env={"STUDIO_ENVIRONMENT_HOSTS": "127.0.0.1"})


@pytest.fixture(scope="module")
def job(app):
    """alice's finished environment job (about 80 s on 2 CPU cores)."""
    store = JobStore(DataPaths(app.data_dir).db)
    job_id = app.client("alice").predict(json.dumps(ARENA_JOB), api_name="/submit_spec")
    done = wait_for(lambda: (j := store.get(job_id)).status.finished and j, 420, what="the arena job to finish")
    assert done.status is JobStatus.succeeded, f"{done.error}\n{app.log_tail()}"
    return done


def _page(browser, url: str, username: str, errors: list[str]):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.add_cookies([{"name": "session", "value": session_cookie(username), "url": url}])
    page = context.new_page()
    page.set_default_timeout(60_000)
    watch_errors(page, errors)  # but for the offline Hub's: a Space's page asks the Hub about the Space
    page.collected_errors = errors  # tests.helpers.browser.goto drops what a navigation itself cuts off
    return page


def _pick_job(page, job_id: str) -> None:
    picker = page.locator("#chat-job input")
    picker.click()
    page.get_by_role("option", name=re.compile(re.escape(job_id))).click()
    expect(page.locator("#arena-info")).to_contain_text("builtin:arithmetic")


def test_both_sides_play_live_and_play_8_repeats_the_stored_success_rate(app, job):
    stored = job.artifacts.environment_evaluation
    errors: list[str] = []
    with chromium() as browser:
        page = _page(browser, app.url, "alice", errors)
        page.goto(f"{app.url}?tab=chat")
        _pick_job(page, job.id)

        page.locator("#arena-row input").fill("0")
        page.locator("#arena-play").click()
        summary = page.locator("#arena-summary")
        expect(summary).to_contain_text("1 episode(s) per side: base", timeout=90_000)
        base, tuned = page.locator("#arena-base"), page.locator("#arena-tuned")
        for pane in (base, tuned):
            expect(pane).to_contain_text("Episode over")
            expect(pane).to_contain_text("Prompt, with the environment's first observation")
        assert "<tool_call>" not in base.inner_text() + tuned.inner_text()

        # The arena opens on the episodes the job's evaluation played: its held-out test tasks, where it had them.
        played = "The environment's test split (task i)" if stored.get("held_out") else "The job's dataset rows (row i)"
        expect(page.locator("#arena-source").get_by_label(played)).to_be_checked()
        page.locator("#arena-count input").fill(str(EPISODES))
        page.locator("#arena-play-n").click()
        expect(summary).to_contain_text(f"{EPISODES} episode(s) per side: base", timeout=120_000)
        table = page.locator("#arena-table")
        expect(table.locator('[role="gridcell"][data-col="0"]')).to_have_count(EPISODES)
        text = summary.inner_text()
        wins = {
            side: int(re.search(rf"{side} (\d+)/{EPISODES}", text).group(1))  # type: ignore[union-attr]
            for side in ("base", "tuned")
        }
        assert wins == {side: round(stored[side]["success_rate"] * EPISODES) for side in ("base", "tuned")}, (
            f"the arena's Play {EPISODES} ({text}) differs from the job's stored evaluation {stored}"
        )

        # A row where the tuned side succeeded opens its two transcripts: its tool call as a block, the tool's
        # answer with the step's reward.
        def cell(row: int, column: int):
            return table.locator(f'[data-testid="cell-{row}-{column}"]')

        tuned_cells = [cell(i, 4).inner_text() for i in range(EPISODES)]
        assert sum(c.startswith("success") for c in tuned_cells) == wins["tuned"], tuned_cells
        calls = [cell(i, 6).inner_text() for i in range(EPISODES)]  # "base/tuned"
        played_apart = [i for i, c in enumerate(calls) if c.split("/")[0] != c.split("/")[1]]
        assert played_apart, f"the tuned model never called the tool where the base did not: {calls}"
        won = next((i for i, c in enumerate(tuned_cells) if c.startswith("success")), played_apart[0])
        cell(won, 1).click()
        expect(tuned).to_contain_text("🛠 Tool call: submit_answer")
        expect(tuned).to_contain_text("submit_answer answered (step reward")
        if tuned_cells[won].startswith("success"):
            expect(tuned).to_contain_text("submit_answer answered (step reward 1; the episode ended)")
            expect(tuned).to_contain_text("Episode over: ✅ success, reward 1")
        shown = page.locator("#arena-shown")
        expect(shown).to_contain_text("Link: ?tab=chat&job=")
        link = re.search(r"\?tab=chat&job=\S+&episode=(\d+)", shown.inner_text())
        assert link is not None
        episode = int(link.group(1))

        page.locator("#arena-tuned-better").click()
        expect(page.locator("#arena-judged")).to_contain_text(f"episode {episode}: the tuned side played better")
        page.locator("#arena").screenshot(path=str(ARTIFACTS / "arena.png"))  # docs/arena.png is one

        # The link opens the same pair again, read-only, for alice.
        goto(page, f"{app.url}{link.group(0)}")
        expect(page.locator("#arena-summary")).to_contain_text("Opened from its link")
        drawn = "test task" if stored.get("episodes_from") == "test split" else "row"
        expect(page.locator("#arena-shown")).to_contain_text(f"Episode {episode}: {drawn}")

        # bob, with the same link: not his.
        bob = _page(browser, app.url, "bob", errors)
        bob.goto(f"{app.url}{link.group(0)}")
        expect(bob.locator("#arena-summary")).to_contain_text("is not among your arena episodes")
        expect(bob.locator("#arena-base")).to_contain_text("nothing played yet")
    assert not errors, errors

    bob_client = app.client("bob")
    for api_name, args in (("/arena_play", (job.id, "base", "greedy", 0, "")),):
        with pytest.raises(Exception, match="not yours or no longer exists"):
            bob_client.predict(*args, api_name=api_name)
    visitor = app.client(None)
    with pytest.raises(Exception, match="Sign in"):
        visitor.predict(job.id, "base", "greedy", 0, "", api_name="/arena_play")


@pytest.fixture(scope="module")
def textarena():
    from tests.helpers.openenv_envs import served_catalog_env

    with served_catalog_env("textarena_env") as server:
        yield server


def test_a_real_openenv_server_by_url_plays_in_the_arena_and_a_dead_one_is_a_sentence(app, textarena, tmp_path):
    """OpenEnv's textarena_env (GuessTheNumber) by URL: the tuned side's guesses go to the real server and its
    answers come back as blocks; once the server is killed, Play answers with a sentence and the page goes on."""
    from backend.api import StudioAPI
    from tests.integration.test_arena import textarena_job

    api = StudioAPI(app.data_dir, scheduler="none")  # beside the app, on its store: the job is alice's
    try:
        job_id = textarena_job(api, textarena.url, tmp_path)
    finally:
        api.close()
    errors: list[str] = []
    with chromium() as browser:
        page = _page(browser, app.url, "alice", errors)
        page.goto(f"{app.url}?tab=chat")
        picker = page.locator("#chat-job input")
        picker.click()
        page.get_by_role("option", name=re.compile(re.escape(job_id))).click()
        expect(page.locator("#arena-info")).to_contain_text(textarena.url)
        page.locator("#arena-play").click()
        summary, base, tuned = (page.locator(f"#arena-{part}") for part in ("summary", "base", "tuned"))
        expect(summary).to_contain_text("1 episode(s) per side: base", timeout=90_000)
        expect(tuned).to_contain_text("🛠 Tool call: message")
        expect(tuned).to_contain_text("message answered")
        expect(tuned).to_contain_text("[10]")
        expect(base).to_contain_text("Episode over")

        os.killpg(textarena.pid, signal.SIGKILL)
        textarena.process.wait(10)
        page.locator("#arena-play").click()
        expect(summary).to_contain_text("The environment could not be reached", timeout=60_000)
        expect(summary).to_contain_text(textarena.url)
        # The page and the app go on: the plain chat still answers.
        page.locator("#chat-input textarea").fill("What is 2 + 3?")
        page.locator("#chat-send").click()
        expect(page.locator("#chat-base")).to_contain_text("2 + 3", timeout=60_000)
    assert not errors, errors


def test_the_jobs_tab_raw_log_of_a_long_job_opens_at_its_last_line(app, job):
    """Issue 24: a finished job's raw log seemed to stop at step 13: its code view opened at its top and drew only the
    lines in view, so this job's 60-line log showed its first 36."""
    lines = (DataPaths(app.data_dir).job_log(job.id)).read_text().splitlines()
    assert len(lines) > 45, len(lines)
    errors: list[str] = []
    with chromium() as browser:
        page = _page(browser, app.url, "alice", errors)
        page.goto(f"{app.url}?job={job.id}")
        expect(page.locator("#job-summary")).to_contain_text(job.id)
        page.get_by_text("Raw log").click()
        log = page.locator("#job-log textarea")
        expect(log).to_have_value(re.compile(rf"job {job.id} succeeded\n.*worker exiting with 0 after [\d.]+s$"))
        # ... and it opens at that end.
        wait_for(
            lambda: log.evaluate(
                "t => t.scrollHeight > t.clientHeight && t.scrollTop + t.clientHeight >= t.scrollHeight - 2"
            ),
            10,
            what="the raw log to show its last line",
            sleep=lambda s: page.wait_for_timeout(s * 1000),
        )
    assert not errors, errors
