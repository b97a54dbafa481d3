"""examples/grpo-env-demo.yaml, trained once for the module (about 3 minutes on 2 CPU cores) and looked at from every
door: the command line, the Train form, the Jobs tab and the agent arena, on a Space where it is alice's job.

- The example raises the success rate of greedy episodes on held-out test tasks, by teaching the tool (its record, as
  ``python -m backend show`` prints it).
- Picking GRPO then builtin:arithmetic on the Train form fills in the example's settings (issue 37: an environment job
  from the form once learned nothing), and Queue stores exactly the example's job: what it trains is what this module
  trained, so its verdict is this job's, which the Jobs tab shows as improved.
- The arena: Play renders both transcripts turn by turn, a tool call as a block (never raw ``<tool_call>`` markup),
  the tool's answer with the step's reward, and the end with the reward and whether it is a success. Play 8 repeats
  the job's stored evaluation of those 8 episodes (the evaluation plays greedily under the same tasks and seeds, and
  so does the arena by default); a row opens its pair. "played better" keeps a DPO row with tools; the pair's link
  opens it again, for alice only: bob is told it is not his, and bob's own calls to play or open alice's job are
  refused.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
import yaml
from playwright.sync_api import expect

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import ROOT, cli, leaves, wait_for
from tests.helpers.apps import app_fixture, session_cookie
from tests.helpers.browser import (
    ARTIFACTS,
    BROWSER_MARKS,
    SETTINGS_ACCORDION,
    chromium,
    goto,
    pick_job,
    queue_job,
    watch_errors,
)

pytestmark = BROWSER_MARKS

EPISODES = 8  # what Play N plays in the arena: the first 8 of the job's 128 evaluated episodes
EXAMPLE = ROOT / "examples" / "grpo-env-demo.yaml"

# The owner allows the test's own OpenEnv server on 127.0.0.1, as a Space's owner allows a host they trust.
app = app_fixture(space=True, extra_env={"STUDIO_ENVIRONMENT_HOSTS": "127.0.0.1"})


@pytest.fixture(scope="module")
def job(app):
    """alice's finished examples/grpo-env-demo.yaml (about 3 minutes on 2 CPU cores, its 128-episode evaluation
    included); ``job.seconds``: how long it took from submit to its end."""
    store = JobStore(DataPaths(app.data_dir).db)
    started = time.monotonic()
    job_id = app.client("alice").predict(json.dumps(_example()), api_name="/submit_spec")
    done = wait_for(lambda: (j := store.get(job_id)).status.finished and j, 600, what="the example's job to finish")
    assert done.status is JobStatus.succeeded, f"{done.error}\n{app.log_tail()}"
    done.seconds = time.monotonic() - started
    return done


def _example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def _cli(app, *args: str):
    """``python -m backend ARGS`` on the app's data dir, as its owner runs it on the Space's machine."""
    return cli(*args, env={"STUDIO_DATA_DIR": str(app.data_dir)})


def test_the_environment_example_raises_the_success_rate_by_teaching_the_tool(app, job):
    """GRPO in the built-in arithmetic environment, as a benchmark: greedy episodes on 128 held-out problems succeed
    more often after the job than at its start (the verdict's 95% interval excludes zero), because the model learned
    to submit its answers with the tool: the base mostly answers in text, which the environment never hears."""
    shown = _cli(app, "show", job.id, "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    record = json.loads(shown.stdout)
    assert record["status"] == "succeeded"
    played = record["artifacts"]["environment_evaluation"]
    assert played["episodes"] == 128
    learning = record["artifacts"]["learning"]
    assert learning["metric"] == "success" and learning["rows"] == 128, learning
    assert learning["verdict"] == "improved", learning["sentence"]
    assert learning["delta"] - learning["ci95"] > 0 and learning["after"] >= learning["before"] + 0.10, learning
    assert played["tuned"]["tool_calls_per_episode"] >= played["base"]["tool_calls_per_episode"] + 0.3, played
    assert learning["sentence"] in _cli(app, "show", job.id).stdout
    print(f"grpo-env-demo: {learning['sentence']} in {job.seconds:.0f} s")


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


def test_the_form_fills_in_the_examples_settings_and_queues_exactly_its_job(app, job):
    """Issue 37: an environment job from the form learned nothing (the non-environment settings, 0% -> 0%). Picking
    GRPO then builtin:arithmetic fills in the example's measured recipe, and Queue (the recipe only, nothing typed)
    stores the very job this module trained: the Jobs tab shows that job improved, with the success rate and tool
    use beside it."""
    example = _example()
    errors: list[str] = []
    with chromium() as browser:
        page = _page(browser, app.url, "alice", errors)
        page.goto(app.url)
        expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
        expect(page.locator("#base-model input")).to_have_value(example["model"]["name_or_path"])
        dataset = page.locator("#builtin-dataset input")
        page.locator("#method").get_by_label("grpo").check()
        expect(dataset).to_have_value("arith-prompts")
        completion = page.get_by_label("Max completion length", exact=True)
        expect(completion).to_have_value("24")

        env = page.locator("#env-name input")
        env.click()
        env.fill(example["environment"]["name"])
        page.get_by_role("option", name=example["environment"]["name"], exact=True).click()
        expect(dataset).to_have_value(example["dataset"]["name"])
        expect(completion).to_have_value(str(example["rollout"]["max_completion_length"]))
        expect(page.get_by_label("Max tool calls per episode", exact=True)).to_have_value(
            str(example["environment"]["max_tool_calling_iterations"])
        )
        expect(page.get_by_label("Evaluation episodes", exact=True)).to_have_value(
            str(example["environment"]["eval_episodes"])
        )
        page.get_by_text(SETTINGS_ACCORDION).click()
        expect(page.get_by_label("Max steps", exact=True)).to_have_value(str(example["training"]["max_steps"]))
        expect(page.get_by_label("Max length", exact=True)).to_have_value(str(example["training"]["max_length"]))
        expect(page.get_by_label("Held-out rows (before/after evaluation)")).to_have_value(
            str(example["eval"]["holdout_rows"])
        )

        queued_id = queue_job(page)
        try:
            queued = JobStore(DataPaths(app.data_dir).db).get(queued_id)
            queued_leaves, trained_leaves = _trained(queued.spec), _trained(job.spec)
            differ = {
                path: (queued_leaves.get(path), trained_leaves.get(path))
                for path in queued_leaves.keys() | trained_leaves.keys()
                if queued_leaves.get(path) != trained_leaves.get(path)
            }
            assert not differ, f"the form queued another job than the example (form, example): {differ}"
        finally:  # it would train what the module trained: it is stopped before it starts, or at its first step
            assert _cli(app, "cancel", queued_id).returncode == 0
        page.get_by_role("tab", name="Jobs").click()
        pick_job(page, job.id)
        summary = page.locator("#job-summary")
        expect(summary).to_contain_text("Improved")
        expect(summary).to_contain_text(re.compile("success rate", re.IGNORECASE))
        expect(summary).to_contain_text("tool calls per episode")
        page.screenshot(path=ARTIFACTS / "env-recipe-improved.png", full_page=True)
    assert not errors, errors


def _trained(spec) -> dict[str, object]:
    """What decides what a job trains and how it is judged, leaf by leaf (``training.max_steps``: 40): its spec but for
    what tests/unit/ui/test_demo_recipes.py keeps out of a recipe as not changing what is learned, its output (name,
    Hub push) and how often it saves a checkpoint."""
    return {
        path: value
        for path, value in leaves(json.loads(spec.to_json())).items()
        if not path.startswith(("output.", "training.save_steps"))
    }


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
        evaluated = json.loads((DataPaths(app.data_dir).job_dir(job.id) / "environment_evaluation.json").read_text())
        first = {side: round(sum(evaluated["per_row"][side]["success"][:EPISODES])) for side in ("base", "tuned")}
        assert wins == first, f"the arena's Play {EPISODES} ({text}) differs from the job's stored evaluation {first}"

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
