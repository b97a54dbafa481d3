"""Issue 24's polish, in a real browser: plot legends in words and in full, a one-step job's loss as a dot, a jobs
table and a samples table that fit their frame at 1280 px with whole-word headers, a compare axis that ends at the
longest job's last step, Chat buttons that wait for a job, and an export that downloads the pick just made.

No training: the jobs are stored with their metrics and samples as a worker reports them (store.report) before the
app starts, each finished with a small random LoRA adapter so the Chat tab can load it. One app, one page; the tests
run in order, and the page must log no error.
"""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.jobs.records import JobStatus
from components.jobs import monitor as job_monitor
from tests.helpers import tiny_spec
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.browser import ARTIFACTS, BROWSER_MARKS, expect_legend, inside, page_fixture, pick_job, type_job
from tests.unit.chat.test_chat import _build_adapter

pytestmark = BROWSER_MARKS


def _sft_rows(steps: int) -> list[dict]:
    return [
        {
            "step": s,
            "loss": 3.0 - 0.05 * s,
            "learning_rate": 1e-3,
            "grad_norm": 1.0 + 0.1 * s,
            "mean_token_accuracy": 0.1 + 0.01 * s,
            "perf/tokens_per_second": 500.0 + s,
        }
        for s in range(1, steps + 1)
    ]


GRPO_ROWS = [
    {
        "step": s,
        "loss": 0.01,
        "reward": 0.5 + 0.1 * s,
        "rewards/length/mean": 0.3 + 0.1 * s,
        "rewards/format_reward/mean": 0.2,
        "reward_std": 0.2,
        "frac_reward_zero_std": 0.5,
        "completions/clipped_ratio": 0.25,
        "perf/tokens_per_second": 300.0 + s,
    }
    for s in range(1, 5)
]
# Long completions squeeze the other columns: the header "step" wrapped inside its word.
GRPO_SAMPLES = [
    (
        s,
        {
            "prompt": [{"role": "user", "content": f"Echo the word {word}"}],
            "completion": [{"role": "assistant", "content": f"{word} " * 60}],
            "rewards": {"length": 0.5, "format_reward": 1.0},
            "advantage": 0.1 * i,
        },
    )
    for s in range(1, 5)
    for i, word in enumerate(("apple", "pear"))
]


@pytest.fixture(scope="module")
def app(tmp_path_factory, models_dir):
    root = data_dir_with_models(tmp_path_factory.mktemp("browser-polish") / "data", models_dir)
    adapter = _build_adapter(models_dir, tmp_path_factory.mktemp("polish-adapter") / "adapter", seed=1)
    api = StudioAPI(root, scheduler="none")  # stored before the app's scheduler starts, so it never claims them

    def stored(spec: dict, rows: list[dict], total: int, status=JobStatus.succeeded, samples=()) -> str:
        job = api.core.store.add(parse_spec(json.dumps(spec)).model_copy(update={"owner": "local"}))
        assert api.core.store.claim_next().id == job.id
        now = time.time()
        api.core.store.report(
            job.id, [(r["step"], now, r) for r in rows], {"step": rows[-1]["step"], "total_steps": total}, samples
        )
        api.core.store.merge_artifacts(job.id, adapter_dir=str(adapter))
        api.core.store.finish(job.id, status)
        return job.id

    try:
        ids = {
            "big": stored(tiny_spec(output={"run_name": "long-run"}), _sft_rows(2000), 2000),
            "one": stored(tiny_spec(output={"run_name": "one-step"}), _sft_rows(1), 1),
            "short": stored(tiny_spec(output={"run_name": "sweep-short"}), _sft_rows(10), 100, JobStatus.cancelled),
            "long": stored(tiny_spec(output={"run_name": "sweep-long"}), _sft_rows(30), 100, JobStatus.cancelled),
            "grpo": stored(
                tiny_spec(
                    method="grpo",
                    dataset={"source": "builtin", "name": "echo-demo"},
                    output={"run_name": "grpo-echo"},
                    grpo={"num_generations": 2, "rewards": [{"name": "length", "target_length": 4, "unit": "chars"}]},
                ),
                GRPO_ROWS,
                4,
                samples=GRPO_SAMPLES,
            ),
            "wide": stored(
                tiny_spec(
                    output={"run_name": "a-rather-long-run-name-for-sweeps"},
                    model={"name_or_path": "Qwen/Qwen2.5-Coder-1.5B-Instruct-GPTQ-Int4"},
                    dataset={"source": "hub", "name": "HuggingFaceH4/ultrachat_200k_long_name"},
                ),
                _sft_rows(3),
                3,
            ),
        }
        no_signal = {
            "metric": "exact_match",
            "label": "accuracy",
            "verdict": "no_signal",
            "sentence": "Nothing to learn.",
        }
        # its status reads "succeeded - learned nothing"
        api.core.store.merge_artifacts(ids["wide"], learning=no_signal)
    finally:
        api.close()
    with launch_app(root) as running:
        running.ids = ids
        yield running


page = page_fixture(header=True)


def _no_errors(page) -> None:
    assert not page.collected_errors, page.collected_errors


def test_the_jobs_table_shows_every_column_at_1280_px(page, app):
    page.get_by_role("tab", name="Jobs").click()
    table = page.locator("#jobs-table")
    expect(table).to_contain_text("a-rather-long-run-name", timeout=20_000)
    viewport = table.locator(".virtual-table-viewport")
    page.wait_for_timeout(500)  # (the table sizes its columns once drawn)
    last = table.locator("thead th").last
    expect(last).to_have_attribute("title", "created")
    assert inside(last.bounding_box(), viewport.bounding_box()), (last.bounding_box(), viewport.bounding_box())
    widths = viewport.evaluate("v => [v.scrollWidth, v.clientWidth]")
    assert widths[0] <= widths[1], f"the table scrolls sideways: {widths}"
    expect(table).to_contain_text("succeeded - learned nothing")
    _no_errors(page)


def test_legends_name_metrics_in_words_in_full_and_the_samples_headers_keep_whole_words(page, app):
    pick_job(page, app.ids["grpo"])
    # No "(raw)" entries: six did not fit.
    expect_legend(page, "plot-reward", ["reward (mean)", "format_reward", "length"])
    expect_legend(page, "plot-fractions", ["no-signal groups", "cut short"])
    expect_legend(page, "plot-throughput", ["tokens/s", "tokens/s (raw)"])
    expect_legend(page, "plot-main", ["loss", "loss (raw)"])

    samples = page.locator("#job-samples")
    expect(samples.locator("thead th").first).to_be_visible()
    page.wait_for_timeout(500)
    # Each header word in one piece: a word broken over two lines has two boxes.
    broken = samples.evaluate(
        """el => [...el.querySelectorAll("thead th span.header")].flatMap(span => {
            const text = span.firstChild, out = [];
            if (!text) return out;
            for (const m of text.textContent.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(text, m.index);
                range.setEnd(text, m.index + m[0].length);
                if (range.getClientRects().length > 1) out.push(m[0]);
            }
            return out;
        })"""
    )
    assert not broken, f"headers broken inside a word: {broken}"
    widths = samples.locator(".studio-table").evaluate("v => [v.scrollWidth, v.clientWidth]")
    assert widths[0] <= widths[1], f"the samples table scrolls sideways: {widths}"
    _no_errors(page)


def _screenshot_of(page, locator, tries: int = 5) -> bytes:
    """The element's picture; taken again when the plot was drawn anew under it (the tab's second part can redraw it
    just after the legend showed: "Element is not attached to the DOM", once in CI)."""
    for attempt in range(tries):
        try:
            return locator.screenshot()
        except PlaywrightError as exc:
            if "not attached" not in str(exc) or attempt == tries - 1:
                raise
            page.wait_for_timeout(250)
    raise AssertionError("unreachable")


def test_a_one_step_job_draws_its_loss_as_a_dot(page, app):
    from PIL import Image

    pick_job(page, app.ids["one"])
    plot = page.locator("#plot-main")
    expect(plot.locator(".legend-label")).to_have_text(["loss"], timeout=20_000)
    drawing_area = plot.locator("svg")  # (the legend's swatches lie outside it, above)
    image = Image.open(io.BytesIO(_screenshot_of(page, drawing_area))).convert("RGB")
    strong = tuple(int(job_monitor.PALETTE[0][0][i : i + 2], 16) for i in (1, 3, 5))
    near = sum(1 for p in image.getdata() if all(abs(a - b) < 40 for a, b in zip(p, strong)))
    assert near >= 12, f"the one logged step draws {near} pixels of the loss's colour"
    _no_errors(page)


def test_compare_ends_the_step_axis_at_the_longest_jobs_last_step(page, app):
    page.get_by_text("Compare jobs").click()
    chooser = page.locator("#compare-jobs input")
    for job_id in (app.ids["short"], app.ids["long"]):
        chooser.click()
        page.get_by_role("option", name=re.compile(re.escape(job_id))).click()
    expect_legend(page, "compare-plot", ["sweep-short", "sweep-long"])
    x_labels = page.locator("#compare-plot svg .axis-x .tick-label")
    # The longest job logged 30 of its 100 planned steps: the axis ends there, not at 50 or 100.
    expect(x_labels.last).to_have_text("30")
    page.screenshot(path=ARTIFACTS / "polish-jobs.png", full_page=True)
    _no_errors(page)


def test_the_jobs_tab_reopens_sending_only_what_changed_and_plots_are_thinned(page, app):
    """Issue 24: each open of the tab sent the whole tab, every logged point of every plot, and the page spent
    seconds snapshotting and drawing them (benchmarks/jobs_tab.py)."""
    from gradio_client import Client

    big = app.ids["big"]
    detail = Client(app.url, verbose=False).predict(big, api_name="/show_job")
    plots = detail[2]  # /show_job: summary, progress, then the plots' markup (the loss first)
    loss = plots.split('id="plot-main"')[1].split("</figure>")[0]
    per_series = {series.split('"')[0]: series.count('class="hit"') for series in loss.split('data-series="')[1:]}
    assert per_series and max(per_series.values()) <= job_monitor.MAX_PLOT_POINTS, per_series

    page.get_by_role("tab", name="Jobs").click()
    pick_job(page, big)
    expect(page.locator("#plot-main")).to_be_visible()
    page.wait_for_timeout(2500)  # drawn, and a tick has come and gone
    sizes: list[int] = []

    def answered(response) -> None:
        if "/gradio_api/run/predict" in response.url:
            sizes.append(len(response.body()))

    page.get_by_role("tab", name="Train").click()
    page.on("response", answered)
    try:
        page.get_by_role("tab", name="Jobs").click()
        expect(page.locator("#job-summary")).to_contain_text(big)
        page.wait_for_timeout(1500)
    finally:
        page.remove_listener("response", answered)
    assert sizes and sum(sizes) < 8_000, f"reopening a finished job's tab sent {sizes} bytes"
    _no_errors(page)


# The labels of each plot's step axis, with their boxes.
STEP_LABELS = """() => [...document.querySelectorAll('#job-plots svg .axis-x')]
    .map((axis) => [...axis.querySelectorAll('.tick-label')]
        .map((text) => {
            const r = text.getBoundingClientRect();
            return [text.textContent, r.left, r.right, r.top, r.bottom];
        }))"""


def test_the_step_axis_labels_do_not_run_into_each_other(page, app):
    """Issue 37: on a plot a third of the page wide, a long job's step labels ran together ("280300", "1,8002,000")."""
    page.get_by_role("tab", name="Jobs").click()
    pick_job(page, app.ids["big"])
    expect(page.locator("#plot-main svg")).to_be_visible()
    page.wait_for_timeout(1500)
    axes = page.evaluate(STEP_LABELS)
    assert any(len(labels) >= 3 for labels in axes), axes
    gap = 4  # px between two labels' boxes, across or down: "90 100", not "90100"
    for labels in axes:
        for (a, _, a_right, a_top, a_bottom), (b, b_left, _, b_top, b_bottom) in zip(labels, labels[1:]):
            apart = a_right + gap <= b_left or a_bottom + gap <= b_top or b_bottom + gap <= a_top
            assert apart, f"the step labels {a!r} and {b!r} run together: {labels}"


def test_switching_tabs_redraws_no_plot_of_the_jobs_tab(page, app):
    """Issue 37: the Jobs tab took 1-3 s to open. Gradio unmounted it on every other tab, so each opening drew every
    plot afresh. Kept mounted and laid out while hidden, the tab shows again without drawing anything: the plots'
    drawing is the same node before and after two openings (a redraw replaces it)."""
    page.get_by_role("tab", name="Jobs").click()
    pick_job(page, app.ids["big"])
    expect(page.locator("#plot-main svg")).to_be_visible()
    page.wait_for_timeout(2500)  # drawn, and a tick has come and gone
    page.evaluate("() => { document.querySelector('#plot-main svg').studioMark = 'kept'; }")
    for tab in ("Train", "Jobs", "Chat", "Jobs"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(1000)
    expect(page.locator("#job-summary")).to_contain_text(app.ids["big"])
    expect(page.locator("#plot-main svg")).to_be_visible()
    kept = page.evaluate("() => document.querySelector('#plot-main svg').studioMark")
    assert kept == "kept", "the Jobs tab's plots were drawn again over two openings"
    page.get_by_role("tab", name="Train").click()
    expect(page.locator("#job-summary")).to_be_hidden()  # hidden from the user and from screen readers
    expect(page.locator("#queue-button")).to_be_visible()
    _no_errors(page)


# Counts the batches of changes to the plots' panel (the DOM's own record of what was drawn) from now on: to the
# element holding the charts' markup, not to the block around it (its status tracker changes at every event).
COUNT_PLOT_DRAWINGS = """() => {
    window.plotDrawings = 0;
    window.plotChanges = [];
    new MutationObserver((records) => {
        window.plotDrawings += 1;
        for (const r of records) window.plotChanges.push(
            [r.type, r.target.nodeName, r.target.className && String(r.target.className.baseVal ?? r.target.className),
             r.attributeName, r.addedNodes.length, r.removedNodes.length]);
    }).observe(
        document.querySelector('#job-plot-panel .chart-grid').parentElement,
        {childList: true, subtree: true, attributes: true, characterData: true},
    );
}"""


def test_picking_another_job_draws_its_plots_and_the_ticks_after_draw_nothing(page, app):
    """Two jobs with the same plots: picking the second drew each plot three times (hidden one by one, drawn with the
    new points, drawn again when shown), which kept a busy machine's browser drawing for seconds after each pick. Now
    the pick draws the panel, and the ticks after it leave it alone (they send only what changed)."""
    page.get_by_role("tab", name="Jobs").click()
    pick_job(page, app.ids["short"])
    page.wait_for_timeout(2500)  # drawn, and a tick has come and gone
    page.evaluate(COUNT_PLOT_DRAWINGS)
    pick_job(page, app.ids["long"])
    expect(page.locator("#job-plots svg").first).to_be_visible()
    page.wait_for_timeout(500)
    assert page.evaluate("() => window.plotDrawings") >= 1, "the pick did not draw the picked job's plots"
    page.evaluate("() => { window.plotDrawings = 0; window.plotChanges = []; }")
    page.wait_for_timeout(3000)  # a tick has come and gone
    drawn = page.evaluate("() => window.plotDrawings")
    changes = page.evaluate("() => window.plotChanges.slice(-12)")
    assert drawn == 0, f"the plots' panel was changed {drawn} times by the ticks after the pick: {changes}"
    _no_errors(page)


def _ask(page, text: str) -> None:
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()
    # The first question of an app process loads both sides' model first (transformers' imports, about 10 s of CPU):
    # 15 s ran out on a machine at about half its usual speed (2026-12-07).
    expect(page.locator("#chat-tuned [data-testid='user']").last).to_have_text(text, timeout=60_000)
    expect(page.locator("#chat-tuned [data-testid='status-tracker']")).to_have_class(
        re.compile("hide"), timeout=120_000
    )
    expect(page.locator("#right-better")).to_be_enabled(timeout=30_000)


def _export_now(page) -> list[dict]:
    """Click Export preferences once, at once: the rows of the file it downloads."""
    with page.expect_download(timeout=15_000) as download:
        page.locator("#export-preferences").click()
    with open(download.value.path(), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _slow_down(page, app, api_name: str, ms: int = 1500) -> None:
    """Hold the page's requests that run the event ``api_name`` for ``ms`` before they leave (from now on)."""
    config = page.request.get(f"{app.url}config").json()
    (fn,) = [d["id"] for d in config["dependencies"] if d.get("api_name") == api_name]
    page.evaluate(
        """([fn, ms]) => {
            const send = window.fetch;
            window.fetch = async (input, init) => {
                const body = init && typeof init.body === "string" ? init.body : "";
                if (body.includes(`"fn_index":${fn},`)) await new Promise((done) => setTimeout(done, ms));
                return send(input, init);
            };
        }""",
        [fn, ms],
    )


def test_chat_buttons_wait_for_a_job_and_an_export_right_after_a_pick_downloads_it(page, app):
    page.get_by_role("tab", name="Chat").click()
    # Sampled answers (a pick needs two that differ): Conversation; Compare answers greedily.
    page.locator("#chat-mode").get_by_text("Conversation").click()
    buttons = ("#chat-regenerate", "#chat-clear", "#left-better", "#right-better")
    for button in buttons:
        expect(page.locator(button)).to_be_disabled()
    page.get_by_text("System prompt and sampling (the same for both sides)").click()
    max_tokens = page.get_by_label("number input for Max new tokens")
    max_tokens.fill("8")
    max_tokens.press("Tab")
    picker = page.locator("#chat-job input")
    type_job(page, "#chat-job", app.ids["one"])
    expect(picker).to_have_value(re.compile(rf"^{app.ids['one']} · sft"))
    for button in buttons:
        expect(page.locator(button)).to_be_enabled()

    _ask(page, "Hi")
    page.locator("#right-better").click()
    assert len(_export_now(page)) == 1
    _ask(page, "And again?")  # a file is on the button now: the click must not get the one before this pick
    _slow_down(page, app, "prefer_base")  # a busy server: the pick's answer lands 1.5 s after the click
    page.locator("#left-better").click()
    # A user's click 0.3 s later, while the pick is being saved (issue 37: nothing downloaded, 3 of 3 times): it is
    # held and downloads the file with the new pick once that is written.
    page.wait_for_timeout(300)
    export = page.locator("#export-preferences")
    box = export.bounding_box()
    with page.expect_download(timeout=15_000) as download:
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    with open(download.value.path(), encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert len(rows) == 2 and rows[-1]["prompt"][-1] == {"role": "user", "content": "And again?"}, rows
    expect(page.locator("#chat-note")).to_contain_text("2 preference rows so far")

    picker.click()
    picker.fill("")
    picker.press("Enter")
    expect(picker).to_have_value("")
    for button in buttons:
        expect(page.locator(button)).to_be_disabled()
    _no_errors(page)


def test_the_chat_endpoints_still_answer_scripts_without_a_pick(app):
    client = app.client()
    assert client.predict(api_name="/chat_clear")[:3] == ([], [], "")
    with pytest.raises(Exception, match="Ask something first"):
        client.predict("", [], [], "", api_name="/prefer_base")
