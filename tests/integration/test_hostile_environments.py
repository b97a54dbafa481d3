"""Issue 36: environment servers that flood, trickle, lie about their shapes or sit on the Space's own network, against
the app as it runs on a Space (tests/helpers/apps.py), through the real API of the three places that talk to them: the
submit pre-flight (/submit_job), the dry run (/dry_run) and the chat's tool runs (/chat_run_tools).

Every hostile server is a real one on 127.0.0.1 (tests/helpers/env_servers/hostile_server.py), one per mode, allowed by
the app's ``STUDIO_ENVIRONMENT_HOSTS`` so that the guard on private addresses is not what stops them. Each case must end
in a sentence (no traceback, no Gradio "upstream" error), store nothing, keep the app's memory flat, and leave other
users served: while a batch of hostile calls runs, alice's plain submit and bob's tool call (in a well-behaved
environment) are timed from a bystander thread. The sentences' fragments are the constants below, in one place.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from gradio_client.exceptions import AppError

from backend.core.paths import DataPaths
from backend.core.spec import parse_spec
from backend.environments.launcher import free_port
from backend.jobs.records import new_job_id, storable_spec_json
from backend.jobs.store import JobStore
from backend.jobs.store_errors import InvalidTransition, JobNotFound
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.env_servers.hostile_server import (
    CANARY_STATUS,
    HTTP_MODES,
    LONG_STATUS,
    TRICKLE_S,
    WS_MODES,
    HostileServer,
)
from tests.integration.test_app import _form, _job_id
from tests.unit.chat.test_chat_tool_calls import QUESTION, build_tool_adapter

pytestmark = pytest.mark.slow

# --- What the guarded app says: the fragments each sentence is checked for (align them with its wording here) -------
ALLOW_LIST_SETTING = "STUDIO_ENVIRONMENT_HOSTS"  # in the refusal of a private, loopback or link-local address
OVERSIZE = ("more than",)  # an answer over the size cap
DEADLINE = ("did not answer", "within")  # a call past its total deadline
QUERY = "query"  # a query string (or fragment) in the environment's URL, refused at the field
# A wrong shape is named by what was asked (and the server's URL is named too).
WHERE = {"health-list": "/health", "metadata-string": "/metadata", "schema-list": "/schema"} | dict.fromkeys(
    ("reward-string", "reward-dict", "reward-list", "frame-not-json", "frame-list"), "step"
)
NEVER_SAID = ("Traceback", "AttributeError", "JSONDecodeError", "upstream Gradio app has raised")
STATUS_ECHO_AT_MOST = 80  # characters of a server's own status quoted back
RSS_GROWTH_AT_MOST_MB = 200
OTHER_USER_WITHIN_S = 2.0  # alice's plain submit and bob's tool call, while the hostile calls run
DEADLINE_AT_MOST_S = 20.0  # a hostile call answers within this (the pre-flight's 15 s deadline, and some slack)

# The addresses a Space must not reach unless its owner allows them; P is a port nothing was allowed on.
PRIVATE_FORMS = (
    "http://127.0.0.1:{P}",
    "http://localhost:{P}",
    "http://0.0.0.0:{P}",
    "http://[::1]:{P}",
    "http://2130706433:{P}",
    "http://0x7f000001:{P}",
    "http://127.1:{P}",
    "http://10.0.0.1:{P}",
    "http://169.254.169.254:{P}",  # link-local (cloud metadata); not port 80: main would really ask it
    "http://[::ffff:127.0.0.1]:{P}",
)

BYSTANDER_DELAY_S = 2.5  # the bystander starts once the hostile calls are in the app
RESULT_TIMEOUT_S = 150.0  # a call that never answers fails the test instead of hanging it
SUBMIT_CASES = HTTP_MODES + WS_MODES
DRY_RUN_CASES = HTTP_MODES  # a random tiny model makes no tool call, so a dry run never reaches a step
CHAT_CASES = HTTP_MODES + WS_MODES
MEASURED: list[dict] = []  # what each case measured, printed at the end of the module (the before/after table)
assert TRICKLE_S > DEADLINE_AT_MOST_S  # the trickle outlasts the deadline: it is the app that must end a trickle


# --- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def servers():
    """One server per mode (``normal`` the well-behaved one bob plays, ``canary`` one nobody allowed); stopped after."""
    started: dict[str, HostileServer] = {}
    try:
        for mode in ("normal", "canary", *HTTP_MODES, *WS_MODES):
            started[mode] = HostileServer(mode).start()
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def space(tmp_path_factory, models_dir, servers):
    """The app on a Space; its owner allowed every hostile server but the canary."""
    allowed = ",".join(s.address for mode, s in servers.items() if mode != "canary")
    root = data_dir_with_models(tmp_path_factory.mktemp("hostile") / "data", models_dir)
    extra = {
        "STUDIO_ENVIRONMENT_HOSTS": allowed,
        "STUDIO_MAX_QUEUED_PER_USER": "1000",  # alice submits once per batch; her jobs are cancelled at once
        "STUDIO_MAX_CHAT_TOOL_ENVIRONMENTS": "64",  # a chat environment per case, all open at once
        "STUDIO_MAX_TOOL_RUNS": "64",
        "STUDIO_MAX_DRY_RUNS": "64",
    }
    with launch_app(root, space=True, extra_env=extra) as app:
        yield app
    _print_measured()


@pytest.fixture(scope="module")
def store(space) -> JobStore:
    """The module Space's store (its data dir, not the test's own): the conftest ``store`` is the test's."""
    return JobStore(DataPaths(space.data_dir).db)


class Clients(dict):
    """One gradio_client per user, made once (a client reads the app's config when it is made)."""

    def __init__(self, app):
        super().__init__()
        self.app, self._lock = app, threading.Lock()

    def __call__(self, user: str):
        with self._lock:
            return self[user] if user in self else self.setdefault(user, self.app.client(user))


@pytest.fixture(scope="module")
def clients(space) -> Clients:
    return Clients(space)


def grpo_form(env_url: str) -> list:
    """The Train form of a GRPO job on echo-demo in the environment at ``env_url`` (as test_space_mode's dry run)."""
    grpo = {"method": "grpo", "builtin_dataset": "echo-demo", "rollout_rewards": "", "batch_size": 4}
    return _form(**grpo, env_name=env_url, rollout_max_completion_length=32, env_max_iterations=1)


def finished_env_job(store: JobStore, owner: str, env_url: str, adapter: str) -> str:
    """A succeeded GRPO job of ``owner`` that played ``env_url``, with ``adapter`` as its adapter, written as one row:
    the app's scheduler never sees it queued (the chat needs only the job's spec and adapter)."""
    spec = parse_spec(
        {
            "method": "grpo",
            "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
            "dataset": {"source": "builtin", "name": "echo-demo"},
            "environment": {"name": env_url, "max_tool_calling_iterations": 1},
            "rollout": {"max_completion_length": 32},
            "training": {"max_steps": 1, "batch_size": 4, "max_length": 128},
        }
    ).model_copy(update={"owner": owner})
    job_id, now = new_job_id(), time.time()
    with store.writing() as con:
        con.execute(
            "INSERT INTO jobs (id, owner, spec, status, created_at, started_at, finished_at, artifacts) "
            "VALUES (?, ?, ?, 'succeeded', ?, ?, ?, ?)",
            (job_id, owner, storable_spec_json(spec), now, now, now, json.dumps({"adapter_dir": adapter})),
        )
    return job_id


# What the tool adapter answers QUESTION with, greedily: one call of the hostile server's only tool.
TOOL_ANSWER = 'Calling.\n<tool_call>\n{"name": "message", "arguments": {"message": "hello"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tool_adapter(tmp_path_factory) -> str:
    """builtin:tiny-qwen3-arith taught to answer QUESTION with TOOL_ANSWER (test_chat_tool_calls.build_tool_adapter):
    the chat's tool runs need an answer that really made a call, kept in the user's session by /chat_send."""
    return str(build_tool_adapter(tmp_path_factory.mktemp("message-adapter") / "adapter", answer=TOOL_ANSWER))


def asked(client, job_id: str) -> tuple:
    """A fresh chat of ``job_id`` in the client's session, QUESTION asked: /chat_run_tools's inputs for the tuned
    side's call (the call itself is kept in the session's state, where /chat_send put it)."""
    client.predict(api_name="/chat_clear")
    base, tuned, _ = client.predict(job_id, QUESTION, [], [], "", 0.0, 96, 0, api_name="/chat_send")
    assert "Tool call: message" in json.dumps(tuned), f"the tuned side made no call: {json.dumps(tuned)[:400]}"
    return (job_id, "tuned", base, tuned)


@pytest.fixture(scope="module")
def bobs_job(store, servers, tool_adapter) -> str:
    return finished_env_job(store, "bob", servers["normal"].url, tool_adapter)


# --- what a call said, how long it took, and what else happened meanwhile -----------------------------------------
@dataclass
class Said:
    """A call's answer as the user reads it: what the handler returned (or the error it raised), and its time."""

    text: str
    took_s: float
    raised: bool = False


def call(client, *args, api_name: str, timeout: float = RESULT_TIMEOUT_S) -> Said:
    started = time.monotonic()
    job = client.submit(*args, api_name=api_name)
    try:
        result = job.result(timeout=timeout)
    except AppError as exc:
        return Said(str(exc), time.monotonic() - started, raised=True)
    except TimeoutError:
        return Said(f"(no answer within {timeout:.0f} s)", time.monotonic() - started, raised=True)
    parts = result if isinstance(result, tuple) else (result,)
    return Said("\n".join(filter(None, map(readable, parts))), time.monotonic() - started)


def readable(part) -> str:
    """An output as read: text as it is, a chat's turns after its last question, nothing for a widget update."""
    if isinstance(part, str):
        return part
    if isinstance(part, list) and all(isinstance(m, dict) and "role" in m for m in part):
        asked_at = max((i for i, m in enumerate(part) if m["role"] == "user"), default=-1)
        return "\n".join(_message_text(m.get("content")) for m in part[asked_at + 1 :])
    return "" if isinstance(part, dict) and "__type__" in part else json.dumps(part, default=str)


def _message_text(content) -> str:
    parts = content if isinstance(content, list) else [{"text": str(content or "")}]
    return " ".join(c.get("text", "") for c in parts if isinstance(c, dict))


class PeakRss:
    """The app's resident memory, sampled every 50 ms on a thread: its peak over the baseline when stopped."""

    def __init__(self, app):
        self.app, self.base = app, app.rss_mb()
        self.peak, self._stop = self.base, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(OSError, StopIteration):
                self.peak = max(self.peak, self.app.rss_mb())

    def growth_mb(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return self.peak - self.base


@dataclass
class Batch:
    """Hostile calls run together: each one's answer, the app's memory growth, and how long the bystanders waited."""

    said: dict[str, Said]
    rss_growth_mb: float
    bystanders: dict[str, Said] = field(default_factory=dict)


class Bystanders:
    """alice's plain SFT submit and bob's tool call in the well-behaved environment, at once, each timed. bob's question
    is asked before (``ready``), so that only running his call is timed; alice's job is cancelled as soon as it is
    queued: it is here to be answered, not trained."""

    def __init__(self, clients: Clients, store: JobStore, bobs_job: str):
        self.clients, self.store, self.bobs_job = clients, store, bobs_job
        self._bobs_call: tuple | None = None

    def ready(self) -> Bystanders:
        self._bobs_call = asked(self.clients("bob"), self.bobs_job)
        return self

    def run(self) -> dict[str, Said]:
        with ThreadPoolExecutor(2) as pool:
            submit = pool.submit(call, self.clients("alice"), *_form(max_steps=2), api_name="/submit_job")
            tool = pool.submit(call, self.clients("bob"), *self._bobs_call, api_name="/chat_run_tools")
            said = {"alice's submit": submit.result(), "bob's tool call": tool.result()}
        if said["alice's submit"].text.startswith("Queued [**"):
            cancel(self.store, [_job_id(said["alice's submit"].text)])
        return said


def cancel(store: JobStore, job_ids: list[str]) -> None:
    """Cancel what was queued only to be answered, or what a hostile server let through (a tiny job may be done)."""
    for job_id in job_ids:
        with contextlib.suppress(InvalidTransition, JobNotFound):
            store.request_cancel(job_id)


def run_batch(space, bystanders: Bystanders | None, calls: dict[str, Callable[[], Said]]) -> Batch:
    """Every call at once (a thread each); the bystanders once they are under way; the app's peak memory throughout."""
    if bystanders is not None:
        bystanders.ready()
    rss = PeakRss(space)
    with ThreadPoolExecutor(max(1, len(calls))) as pool:
        futures = {case: pool.submit(fn) for case, fn in calls.items()}
        time.sleep(BYSTANDER_DELAY_S)
        waited = bystanders.run() if bystanders is not None else {}
        said = {case: future.result() for case, future in futures.items()}
    return Batch(said, rss.growth_mb(), waited)


@pytest.fixture(scope="module")
def others(clients, store, bobs_job) -> Bystanders:
    return Bystanders(clients, store, bobs_job)


def record(entry: str, case: str, batch: Batch) -> None:
    said, waited = batch.said[case], {who: round(s.took_s, 1) for who, s in batch.bystanders.items()}
    row = {"entry": entry, "case": case, "said": excerpt(said.text), "took_s": round(said.took_s, 1)}
    MEASURED.append({**row, "rss_growth_mb": round(batch.rss_growth_mb), **waited})


def excerpt(text: str, chars: int = 200) -> str:
    """The sentence of an answer, for the table: without the form's pointer to where its problems are shown."""
    lines = [line for line in text.splitlines() if not line.startswith(("⚠️ Not queued", "**The dry run did not"))]
    return " ".join(" ".join(lines).split())[:chars]


def _print_measured() -> None:
    if MEASURED:  # shown with pytest -s: the before/after table
        print("\n".join(["", "hostile environments: what each case measured", *map(json.dumps, MEASURED)]))


# --- the assertions every hostile case shares ---------------------------------------------------------------------
def assert_a_sentence(case: str, said: Said, server: HostileServer) -> None:
    text = said.text
    for never in NEVER_SAID:
        assert never not in text, f"{case}: {text[:400]}"
    if case == "flood" or case == "frame-huge":
        assert all(f in text for f in OVERSIZE), f"{case}: {text[:400]}"
    elif case == "trickle":
        assert all(f in text for f in DEADLINE), f"{case}: {text[:400]}"
    elif case == "status-echo":
        assert LONG_STATUS[:7] in text or server.url in text, f"{case} is said, briefly: {text[:400]}"
        assert "z" * STATUS_ECHO_AT_MOST not in text, f"{case}: the status is quoted at length: {text[:400]}"
    else:
        assert WHERE[case] in text and server.url in text, f"{case}: {text[:400]}"
    assert said.took_s < DEADLINE_AT_MOST_S, f"{case} answered after {said.took_s:.1f} s: {text[:200]}"


def assert_others_served(case: str, batch: Batch) -> None:
    assert batch.rss_growth_mb < RSS_GROWTH_AT_MOST_MB, f"{case}: the app grew by {batch.rss_growth_mb:.0f} MB"
    for who, said in batch.bystanders.items():
        assert said.took_s < OTHER_USER_WITHIN_S, f"{case}: {who} waited {said.took_s:.1f} s ({said.text[:200]})"
        assert not said.raised, f"{case}: {who} was refused: {said.text[:300]}"


# --- the control: the same server, well-behaved, is an environment like any other -----------------------------------
def test_the_well_behaved_server_passes_the_pre_flight_and_plays_a_tool_call(clients, servers, bobs_job, others):
    checked = call(clients("carol"), *grpo_form(servers["normal"].url), api_name="/check_job")
    assert "Pre-flight passed" in checked.text, checked.text[:600]
    ran = call(clients("bob"), *asked(clients("bob"), bobs_job), api_name="/chat_run_tools")
    assert not ran.raised and "HELLO" in ran.text, ran.text[:600]  # the server shouted the call's message back
    quiet = others.ready().run()
    MEASURED.append({"entry": "quiet", "case": "no hostile call", **{w: round(s.took_s, 1) for w, s in quiet.items()}})
    for who, said in quiet.items():
        assert not said.raised and said.took_s < OTHER_USER_WITHIN_S, (who, said)


# --- the submit pre-flight ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def submit_batches(space, clients, store, servers, others) -> dict[str, Batch]:
    """Every case's submit by its own user: the flood alone (its memory is measured alone), the rest together."""

    def submit(case: str) -> Callable[[], Said]:
        return lambda: call(clients(f"sub-{case}"), *grpo_form(servers[case].url), api_name="/submit_job")

    flood = run_batch(space, others, {"flood": submit("flood")})
    rest = run_batch(space, others, {c: submit(c) for c in SUBMIT_CASES if c != "flood"})
    cancel(store, [job.id for case in SUBMIT_CASES for job in store.list(owner=f"sub-{case}")])  # never trained
    return {case: flood if case == "flood" else rest for case in SUBMIT_CASES}


@pytest.mark.parametrize("case", SUBMIT_CASES)
def test_a_hostile_environment_at_submit_is_a_sentence_and_nothing_is_queued(case, submit_batches, store, servers):
    batch = submit_batches[case]
    record("submit", case, batch)
    assert store.list(owner=f"sub-{case}") == [], "nothing is queued"
    assert_a_sentence(case, batch.said[case], servers[case])
    assert_others_served(case, batch)


def test_eight_trickling_submits_hold_only_their_own_user(space, clients, store, servers, others):
    """mallory's eight submits to a server that trickles: alice's plain submit and bob's tool call still answer."""
    mallory = clients("mallory")
    calls = {
        f"mallory-{i}": (lambda: call(mallory, *grpo_form(servers["trickle"].url), api_name="/submit_job"))
        for i in range(8)
    }
    batch = run_batch(space, others, calls)
    cancel(store, [job.id for job in store.list(owner="mallory")])
    record("submit x8 (one user)", "mallory-0", batch)
    assert store.list(owner="mallory") == []
    # Each is a sentence in time; one at least is the deadline's (the others may be refused sooner: one at a time).
    for said in batch.said.values():
        assert not any(never in said.text for never in NEVER_SAID), said.text[:400]
        assert said.took_s < DEADLINE_AT_MOST_S, f"mallory waited {said.took_s:.1f} s: {said.text[:200]}"
    assert any(all(f in said.text for f in DEADLINE) for said in batch.said.values()), batch.said["mallory-0"].text
    assert_others_served("eight trickling submits", batch)


# --- the dry run --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dry_run_batches(space, clients, servers, others) -> dict[str, Batch]:
    def dry(case: str) -> Callable[[], Said]:
        return lambda: call(clients(f"dry-{case}"), *grpo_form(servers[case].url), api_name="/dry_run")

    flood = run_batch(space, others, {"flood": dry("flood")})
    rest = run_batch(space, others, {c: dry(c) for c in DRY_RUN_CASES if c != "flood"})
    return {case: flood if case == "flood" else rest for case in DRY_RUN_CASES}


@pytest.mark.parametrize("case", DRY_RUN_CASES)
def test_a_hostile_environment_in_a_dry_run_is_a_sentence(case, dry_run_batches, store, servers):
    batch = dry_run_batches[case]
    record("dry run", case, batch)
    assert store.list(owner=f"dry-{case}") == []
    assert_a_sentence(case, batch.said[case], servers[case])
    assert_others_served(case, batch)


# --- the chat's tool runs -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chat_batches(space, clients, store, servers, tool_adapter, others) -> dict[str, Batch]:
    """A finished job per case, each of its own user, played in that case's server; its question asked (the chat
    touches no environment for that), then one tool call each. The trickle is played by two users at once (trudy
    and chat-trickle), as many as the app's tool-run threads were."""
    users = {case: f"chat-{case}" for case in CHAT_CASES} | {"trickle-2": "trudy"}
    jobs = {
        case: finished_env_job(store, user, servers[case.removesuffix("-2")].url, tool_adapter)
        for case, user in users.items()
    }
    inputs = {case: asked(clients(users[case]), job_id) for case, job_id in jobs.items()}

    def run(case: str) -> Callable[[], Said]:
        return lambda: call(clients(users[case]), *inputs[case], api_name="/chat_run_tools")

    flood = run_batch(space, others, {"flood": run("flood")})
    rest = run_batch(space, others, {c: run(c) for c in jobs if c != "flood"})
    return {case: flood if case == "flood" else rest for case in jobs}


@pytest.mark.parametrize("case", [*CHAT_CASES, "trickle-2"])
def test_a_hostile_environment_in_a_chat_tool_run_is_a_sentence(case, chat_batches, store, servers):
    batch = chat_batches[case]
    record("chat tool run", case, batch)
    mode = "trickle" if case == "trickle-2" else case
    assert_a_sentence(mode, batch.said[case], servers[mode])
    assert_others_served(case, batch)


# --- addresses the Space's owner did not allow ----------------------------------------------------------------------
def test_private_addresses_are_refused_alike_whether_or_not_a_server_listens_and_nothing_connects(
    space, clients, store, servers
):
    """Every spelling of a loopback, private or link-local address is refused with the allow-list's name, in the same
    words whether a server listens there or not, and the server that listens is never connected to."""
    canary = servers["canary"]  # listens on 127.0.0.1, not allowed
    closed = free_port()  # nothing listens
    canary.forget()

    def submit(user: str, url: str) -> Callable[[], Said]:
        return lambda: call(clients(user), *grpo_form(url), api_name="/submit_job")

    calls = {f"open {form}": submit(f"ssrf-{i}", form.format(P=canary.port)) for i, form in enumerate(PRIVATE_FORMS)}
    calls[f"closed {PRIVATE_FORMS[0]}"] = submit("ssrf-closed", PRIVATE_FORMS[0].format(P=closed))
    batch = run_batch(space, None, calls)
    cancel(store, [job.id for job in store.list() if job.owner.startswith("ssrf-")])
    for case in calls:
        record("submit (private address)", case, batch)
    assert canary.connections == 0 and canary.targets == [], f"the canary was reached: {canary.targets}"
    assert not any(store.list(owner=f"ssrf-{i}") for i in range(len(PRIVATE_FORMS)))
    assert store.list(owner="ssrf-closed") == []
    problems = []
    for case, said in batch.said.items():
        if ALLOW_LIST_SETTING not in said.text or CANARY_STATUS in said.text:
            problems.append(f"{case}: {said.text[:300]}")
    open_, shut = batch.said[f"open {PRIVATE_FORMS[0]}"].text, batch.said[f"closed {PRIVATE_FORMS[0]}"].text
    if open_.replace(str(canary.port), "P") != shut.replace(str(closed), "P"):
        problems.append(f"an open and a closed port read differently:\n  open: {open_[:300]}\n  shut: {shut[:300]}")
    assert not problems, "\n".join(problems)


QUERY_TAILS = {"/any/path?x=": "query-path", "/any/path#x=": "query-fragment", "?x=": "query-bare"}  # -> user


@pytest.mark.parametrize("tail", QUERY_TAILS)
def test_a_query_string_or_fragment_never_reaches_the_server(tail, space, clients, store, servers):
    """Refused at the field (a sentence about the query), or at most asked as a plain path: what the user typed after
    ``?`` or ``#`` never becomes part of a request."""
    server = servers["status-echo"]  # allowed, and never healthy: nothing could be queued through it
    server.forget()
    user = QUERY_TAILS[tail]
    said = call(clients(user), *grpo_form(server.url + tail), api_name="/submit_job")
    cancel(store, [job.id for job in store.list(owner=user)])
    MEASURED.append({"entry": "submit (query)", "case": tail, "said": excerpt(said.text)})
    assert store.list(owner=user) == []
    for never in NEVER_SAID:
        assert never not in said.text, said.text[:400]
    sent = [t for t in server.targets if "?" in t or "#" in t or "x=" in t]
    assert not sent, f"the URL's {tail!r} reached the server as {sent}"
    if server.targets == []:
        assert QUERY in said.text and "environment" in said.text, said.text[:400]
