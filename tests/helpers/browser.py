"""What the browser tests share: Debian's Chromium driven by Playwright, and where failures leave screenshots."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

from backend.jobs.records import JobStatus
from tests.helpers import ROOT, wait_for

# Playwright's own browser download does not work offline; CI installs Debian's chromium (see .ci/run).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
# How long an ``expect`` waits unless it says otherwise. Playwright's 5 s is an idle machine's: on CI's 2 shared
# cores, with another test's job training beside the app, an answer that is right comes in 5-10 s (the arena's
# pick, a sweep's cancel). A test about speed gives its own, shorter timeout.
EXPECT_TIMEOUT_MS = 20_000
ARTIFACTS = ROOT / "tests" / "artifacts"

BROWSER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run does it)",
    ),
]


# The test process's one Chromium (and Playwright's driver), started by the first ``chromium()`` and kept through the
# browser modules that run one after another in this process: a launch of both costs about 2 CPU s, once per module
# and per page before. Each ``chromium()`` block still gets pages of its own: it closes every context opened during
# it. The conftest stops it (``close_chromium``) before any other module runs: Playwright's sync API keeps its asyncio
# loop running on this thread, where ``asyncio.run`` then refuses to start.
_SHARED: dict = {}


def launch_chromium(playwright):
    """Debian's Chromium, headless, as the tests and the browser benchmarks run it."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def _shared_browser():
    browser = _SHARED.get("browser")
    if browser is None or not browser.is_connected():
        from playwright.sync_api import sync_playwright

        if "playwright" not in _SHARED:
            _SHARED["playwright"] = sync_playwright().start()
        browser = launch_chromium(_SHARED["playwright"])
        _SHARED["browser"] = browser
    return browser


def close_chromium() -> None:
    """Stop the test process's Chromium and Playwright's driver, if ``chromium()`` started them."""
    browser, playwright = _SHARED.pop("browser", None), _SHARED.pop("playwright", None)
    try:
        if browser is not None and browser.is_connected():
            browser.close()
    finally:
        if playwright is not None:
            playwright.stop()


@contextmanager
def chromium() -> Iterator:
    """The test process's headless Chromium for a block (a module's tests, a page): every context opened in the block
    is closed after it, so its pages, cookies and downloads go with it."""
    from playwright.sync_api import expect

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser = _shared_browser()
    before = set(browser.contexts)
    try:
        yield browser
    finally:
        if browser.is_connected():
            for context in browser.contexts:
                if context not in before:
                    context.close()


def _elsewhere(message) -> bool:
    """Whether a console message is about a resource off this machine: on a Space, Gradio's page asks the Hub about
    the Space (its info, "Space not found"), which no test can reach (the tests run offline)."""
    where = urlparse((message.location or {}).get("url") or "").hostname
    return message.text == "Space not found" or (where is not None and where not in ("127.0.0.1", "localhost"))


def watch_errors(page, errors: list[str]) -> None:
    """Collect into ``errors`` every error ``page`` logs to its console or throws, from now on (but for the offline
    Hub's, ``_elsewhere``)."""

    def logged(message) -> None:
        if message.type == "error" and not _elsewhere(message):
            errors.append(f"console: {message.text}")

    page.on("console", logged)
    page.on("pageerror", lambda e: errors.append(thrown(e)))


def thrown(error) -> str:
    """An error a page threw, with the top of its stack: which script threw it is most of what a flaky one tells."""
    where = [line.strip() for line in (error.stack or "").splitlines()[1:4]]
    return f"page error: {error}" + "".join(f"\n    {line}" for line in where)


@contextmanager
def open_page(url: str, errors: list[str] | None = None) -> Iterator:
    """A page of a fresh headless Chromium (1280x900, downloads accepted, 30 s default timeout) opened on ``url``.

    Every error the page logs to its console or throws, from its first load on, is collected (into ``errors`` when
    given), and any left when the block ends fails it (issue 24: no page errors in any test).
    """
    errors = [] if errors is None else errors
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(30_000)
        watch_errors(page, errors)
        page.goto(url)
        page.collected_errors = errors
        yield page
        assert not errors, f"the page logged errors: {errors[:5]}"


def page_fixture(*, header: bool = False):
    """A module fixture: one page (``open_page``, which fails the module on any error the page logs) on the module's
    ``app`` for all its tests; with ``header``, handed over once the header shows the device. A test module names it
    by assigning it: ``page = page_fixture()``."""

    @pytest.fixture(scope="module")
    def fixture(app) -> Iterator:
        from playwright.sync_api import expect

        with open_page(app.url) as page:
            if header:
                expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
            yield page

    return fixture


def page_errors_per_test():
    """An autouse fixture for a module with one ``page``: each test leaves the page without a new error, said at the
    test that caused it (and not again when the page closes). A test module names it by assigning it:
    ``no_new_page_errors = page_errors_per_test()``."""

    @pytest.fixture(autouse=True)
    def fixture(page) -> Iterator[None]:
        before = len(page.collected_errors)
        yield
        new = page.collected_errors[before:]
        del page.collected_errors[before:]
        assert not new, f"the page logged errors: {new[:5]}"

    return fixture


@contextmanager
def open_chat_tab(url: str) -> Iterator:
    """``open_page`` on the app, its header up, with the Chat tab open."""
    from playwright.sync_api import expect

    with open_page(url) as page:
        expect(page.locator("#header-status")).to_contain_text("Device:", timeout=30_000)
        page.get_by_role("tab", name="Chat").click()
        yield page


# What Gradio's client logs when a page is left with requests in flight (a timer's poll, an event stream): the
# browser cuts them off. They are the navigation's doing, not the app's.
_CUT_OFF_BY_NAVIGATION = re.compile(r"AbortError: signal is aborted|Connection errored out")


def goto(page, url: str) -> None:
    """Go to ``url`` in ``page`` as a user typing an address would.

    Errors the departing page logs because its in-flight requests were cut off are dropped from the page's collected
    errors (see ``open_page``); every other error stays.
    """
    _leave(page, lambda: page.goto(url))


def reload(page) -> None:
    """Reload ``page`` as a user would (F5), dropping the errors its cut-off requests log (see ``goto``)."""
    _leave(page, page.reload)


def _leave(page, navigate) -> None:
    """``navigate()`` away from the page's document, dropping from its collected errors those that the departing
    document logs because the navigation cut off its requests."""
    errors = getattr(page, "collected_errors", None)
    before = len(errors) if errors is not None else 0
    navigate()
    if errors is not None:
        errors[before:] = [e for e in errors[before:] if not _CUT_OFF_BY_NAVIGATION.search(e)]


@dataclass
class Ticks:
    """The Jobs tab's timer as the page saw it: requests sent, and the size in bytes of each answer."""

    sent: int = 0
    answers: list[int] = dataclasses.field(default_factory=list)


@contextmanager
def jobs_tab_ticks(page, url: str) -> Iterator[Ticks]:
    """Count the Jobs tab's timer requests (``refresh_jobs``) and their answers while the block runs.

    Playwright delivers the page's events while the test calls into it: wait with ``page.wait_for_timeout``.
    """
    config = page.request.get(urljoin(url, "config")).json()
    (tick,) = [d["id"] for d in config["dependencies"] if d.get("api_name") == "refresh_jobs"]
    ticks = Ticks()

    def is_tick(request) -> bool:
        return "/run/predict" in request.url and f'"fn_index":{tick},' in (request.post_data or "")

    def sent(request) -> None:
        ticks.sent += is_tick(request)

    def answered(response) -> None:
        if is_tick(response.request):
            ticks.answers.append(len(response.body()))

    page.on("request", sent)
    page.on("response", answered)
    try:
        yield ticks
    finally:
        page.remove_listener("request", sent)
        page.remove_listener("response", answered)


def wait_until(page, predicate, timeout_s: float, what: str) -> None:
    """Let the page run (and deliver its events) until ``predicate()`` holds, or fail saying ``what``."""
    wait_for(predicate, timeout_s, 0.2, what, sleep=lambda seconds: page.wait_for_timeout(seconds * 1000))


SETTINGS_ACCORDION = "4. Training settings, LoRA and quantization"


# Settings fields whose default is empty (Batch size: auto), so an empty one may already be mounted.
MAY_BE_EMPTY = frozenset({"Batch size"})


def fill_settings(page, **values: str) -> None:
    """Open the training-settings accordion (unless it is open) and type ``values`` by field label, as a user would.

    The accordion mounts its fields when it first opens and sets them to the form's defaults as it does; text typed
    before that lands is overwritten (a CI run saw "3" become "30", another "3" become the recipe's "150" after it
    had shown "150"). So each field is first seen holding a value (one that may be empty, beside Learning rate,
    which never is), then typed into and left with Tab; a field that the mount set back within 2 s is typed into
    once more, as a person who saw it would; and only then are all checked.
    """
    from playwright.sync_api import expect

    fields = {label: page.get_by_label(label, exact=True) for label in values}
    if not next(iter(fields.values())).is_visible():  # a click on the title closes the accordion when it is open
        page.get_by_text(SETTINGS_ACCORDION).click()
    expect(page.get_by_label("Learning rate", exact=True)).to_have_value(re.compile(r"\S"))
    for label, field in fields.items():
        if label not in MAY_BE_EMPTY:
            expect(field).to_have_value(re.compile(r"\S"))

    # A fresh page's recipe may still be landing (the model's recipe sets Max steps and the rest a moment after the
    # mount; a CI run saw "2" typed, kept 2 s, then set to the recipe's "150"): type only once the fields have held
    # their values for a while.
    settled = [field.input_value() for field in fields.values()]
    steady_since, deadline = time.monotonic(), time.monotonic() + 20
    while time.monotonic() - steady_since < 1.5 and time.monotonic() < deadline:
        page.wait_for_timeout(250)
        now = [field.input_value() for field in fields.values()]
        if now != settled:
            settled, steady_since = now, time.monotonic()

    def type_in(field, value: str) -> None:
        field.fill(value)
        field.press("Tab")

    for label, field in fields.items():
        type_in(field, values[label])
    for label, field in fields.items():
        try:
            expect(field).to_have_value(values[label], timeout=2_000)
        except AssertionError:
            type_in(field, values[label])
        expect(field).to_have_value(values[label])


def inside(inner: dict | None, outer: dict | None) -> bool:
    """Whether bounding box ``inner`` lies within ``outer`` (a pixel of rounding allowed)."""
    return bool(inner and outer) and (
        outer["x"] - 1 <= inner["x"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 1
        and outer["y"] - 1 <= inner["y"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 1
    )


def expect_legend(page, plot_id: str, expected: list[str]) -> None:
    """The plot's legend reads ``expected`` in full (waiting for a redraw), each entry drawn inside the plot's frame."""
    from playwright.sync_api import expect

    block = page.locator(f"#{plot_id}")
    labels = block.locator(".legend-label")
    expect(labels).to_have_text(expected, timeout=20_000)

    def cut_off() -> list:
        """The entries outside the frame now (a plot being drawn anew is measured again, not failed mid-drawing)."""
        frame = block.bounding_box()
        boxes = [(labels.nth(i).text_content(), labels.nth(i).bounding_box()) for i in range(labels.count())]
        return [(text, box, frame) for text, box in boxes if not inside(box, frame)]

    deadline = time.monotonic() + 10
    while (outside := cut_off()) and time.monotonic() < deadline:
        block.page.wait_for_timeout(250)
    assert not outside, f"legend entries of {plot_id} cut off (entry, its box, the frame): {outside}"


def pick_base_model(page, name: str) -> None:
    """Choose ``name`` in the Base model picker as a user does: type it, take the offered option."""
    field = page.locator("#base-model input")
    field.click()
    field.fill(name)
    page.get_by_role("option", name=name, exact=True).click()
    from playwright.sync_api import expect

    expect(field).to_have_value(name)


def pick_option(page, field_selector: str, job_id: str) -> None:
    """Choose ``job_id`` in a job dropdown as a user does: open it, type the id, take the offered option."""
    from playwright.sync_api import expect

    field = page.locator(f"{field_selector} input")
    field.click()
    option = page.get_by_role("option", name=re.compile(re.escape(job_id)))
    expect(option).to_be_visible()
    option.click()


def type_job(page, field_selector: str, job_id: str) -> None:
    """Type ``job_id`` into a job dropdown and press Enter, as a user does, once the dropdown offers it: a chat
    picker loads its choices when it takes focus, and Enter before they arrive keeps the bare id."""
    from playwright.sync_api import expect

    field = page.locator(f"{field_selector} input")
    field.click()
    expect(page.get_by_role("option", name=re.compile(re.escape(job_id)))).to_be_visible()
    field.fill(job_id)
    field.press("Enter")
    expect(field).to_have_value(re.compile(rf"^{re.escape(job_id)} · "))


def pick_job(page, job_id: str) -> None:
    """Pick a job in the Jobs tab's picker as a user does (type its id, Enter) and wait for its summary."""
    from playwright.sync_api import expect

    picker = page.locator("#job-picker input")
    picker.click()
    picker.fill(job_id)
    picker.press("Enter")
    expect(picker).to_have_value(re.compile(rf"^{job_id} · "))
    # The summary comes in the same answer as the plots, samples and logs (one event a pick).
    expect(page.locator("#job-summary")).to_contain_text(job_id, timeout=15_000)


def queue_job(page) -> str:
    """Click Queue and return the id of the job it queued (not one an earlier Queue left in the result box)."""
    result = page.locator("#queue-result")

    def queued_id() -> str | None:
        found = re.search(r"Queued (\S+)", result.inner_text())
        return found.group(1) if found else None

    before = queued_id()
    page.locator("#queue-button").click()
    wait_for(lambda: queued_id() not in (None, before), 30, what="Queue to answer with a new job id")
    return queued_id()


def follow_job_link(page, job_id: str) -> None:
    """Open the link Queue answered with (Gradio's Markdown opens links in a new browser tab; here, this one)."""
    href = page.locator("#queue-result").get_by_role("link", name=job_id).get_attribute("href")
    goto(page, urljoin(page.url, href))


def wait_in_jobs_tab(page, store, job_id: str, timeout_ms: int = 240_000) -> None:
    """The Jobs tab shows ``job_id`` until it ends; it must succeed."""
    from playwright.sync_api import expect

    summary = page.locator("#job-summary")
    try:
        expect(summary).to_contain_text(
            re.compile(rf"{job_id} · (succeeded|failed|cancelled|interrupted)"), timeout=timeout_ms
        )
    finally:
        job = store.get(job_id)
    assert job.status is JobStatus.succeeded, job.error


# Counts a page keeps of itself, set before its first script runs (``count_page_work``): resize observers made and
# still observing (issue 47: Gradio 6.31's LinePlot made a new one on every redraw and never disconnected the old),
# their callbacks, and the main thread's time in long tasks (over 50 ms each).
PAGE_COUNTERS_SCRIPT = """(() => {
    const counts = {made: 0, live: 0, callbacks: 0, longTaskMs: 0, longTasks: 0};
    window.__pageWork = counts;
    const Native = window.ResizeObserver;
    if (Native) {
        window.ResizeObserver = class extends Native {
            constructor(callback) {
                super((...args) => { counts.callbacks += 1; return callback(...args); });
                this.__targets = new Set();
                counts.made += 1;
            }
            observe(target, options) {
                if (this.__targets.size === 0) counts.live += 1;
                this.__targets.add(target);
                return super.observe(target, options);
            }
            unobserve(target) {
                if (this.__targets.delete(target) && this.__targets.size === 0) counts.live -= 1;
                return super.unobserve(target);
            }
            disconnect() {
                if (this.__targets.size > 0) counts.live -= 1;
                this.__targets.clear();
                return super.disconnect();
            }
        };
    }
    try {
        new PerformanceObserver((list) => {
            for (const entry of list.getEntries()) { counts.longTaskMs += entry.duration; counts.longTasks += 1; }
        }).observe({type: "longtask", buffered: true});
    } catch (e) {}
})();"""


def count_page_work(context_or_page) -> None:
    """Keep ``PAGE_COUNTERS_SCRIPT``'s counts in every document the context (or page) loads from now on."""
    context_or_page.add_init_script(PAGE_COUNTERS_SCRIPT)


def page_work(page) -> dict:
    """The page's counts now: resize observers ``made`` and ``live``, their ``callbacks``, ``longTaskMs``."""
    return page.evaluate("() => ({...window.__pageWork})")


# Gradio's run history in the page's localStorage (its keys start "gradio:run-history"): each key's size in characters.
_STORED_RUNS = """() => Object.fromEntries(Object.keys(localStorage)
    .filter((key) => key.startsWith("gradio:run-history"))
    .map((key) => [key, localStorage.getItem(key).length]))"""


def stored_run_history(page) -> dict[str, int]:
    """The page's localStorage entries of Gradio's run history, with their sizes in characters ({} when none)."""
    return page.evaluate(_STORED_RUNS)


def kept_after_collection(page) -> dict:
    """What the page's renderer keeps alive once its garbage is collected (CDP): DOM ``nodes``, event ``listeners``."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("HeapProfiler.collectGarbage")
        counts = cdp.send("Memory.getDOMCounters")
    finally:
        cdp.detach()
    return {"nodes": counts["nodes"], "listeners": counts["jsEventListeners"]}


def timed_pick(page, job_id: str, timeout_ms: int = 60_000) -> float:
    """Pick ``job_id`` in the Jobs tab's picker (type its id, Enter) and return the seconds from Enter until its
    summary names it (its plots come in the same answer): what a user waits for."""
    from playwright.sync_api import expect

    picker = page.locator("#job-picker input")
    picker.click()
    picker.fill(job_id)
    started = time.monotonic()
    picker.press("Enter")
    expect(page.locator("#job-summary")).to_contain_text(job_id, timeout=timeout_ms)
    return time.monotonic() - started
