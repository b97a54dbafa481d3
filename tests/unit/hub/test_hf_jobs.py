"""HF Jobs scale-out against a local stand-in for the Hub's Jobs API, driven by the real huggingface_hub client.

The server implements the routes ``HfApi`` calls (read in huggingface_hub/hf_api.py): ``GET /api/whoami-v2``,
``POST /api/jobs/{ns}``, ``GET /api/jobs/{ns}/{id}``, ``GET /api/jobs/{ns}/{id}/logs`` (server-sent events) and
``POST /api/jobs/{ns}/{id}/cancel``, with the JSON shapes ``JobInfo`` parses.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import huggingface_hub.constants
import pytest

from backend.core.spec import SpecError, parse_spec
from backend.hub.hf_jobs import (
    DEFAULT_IMAGE,
    JOB_FLAVORS,
    MAX_LOG_LINES,
    RemoteJobError,
    cancel_remote,
    decode_spec,
    default_image,
    remote_job_request,
    remote_logs,
    remote_status,
    submit_remote,
    timeout_seconds,
)

TOKEN = "hf_test_jobs_token_123"
NO_SCOPE_TOKEN = "hf_test_read_only_456"
USER = "alice"
JOB_ID = "68780d00bbe36d38803f645f"


@dataclass
class FakeJobsHub:
    """State of the stand-in Hub: what it was sent, and what it answers."""

    requests: list[tuple[str, str, dict, dict]] = field(default_factory=list)  # method, path, query, headers
    created: list[dict] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    stage: str = "SCHEDULING"
    message: str | None = None
    log_lines: list[str] = field(default_factory=list)
    endpoint: str = ""

    def job_json(self, body: dict) -> dict:
        image = {"spaceId": body["spaceId"]} if "spaceId" in body else {"dockerImage": body.get("dockerImage")}
        return {
            "id": JOB_ID,
            "createdAt": "2026-01-02T03:04:05.000Z",
            **image,
            "command": body.get("command"),
            "arguments": [],
            "environment": body.get("environment", {}),
            "secrets": {k: "(encrypted)" for k in body.get("secrets", {})},
            "flavor": body.get("flavor"),
            "labels": body.get("labels"),
            "status": {"stage": self.stage, "message": self.message},
            "owner": {"id": "u1", "name": USER, "type": "user"},
        }


def make_handler(hub: FakeJobsHub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def _send(self, status: int, payload: dict | list | None = None) -> None:
            body = json.dumps(payload if payload is not None else {}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self) -> str | None:
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if token not in (TOKEN, NO_SCOPE_TOKEN):
                self._send(401, {"error": "Invalid credentials in Authorization header"})
                return None
            return token

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            hub.requests.append((method, url.path, parse_qs(url.query), dict(self.headers)))
            token = self._authorized()
            if token is None:
                return
            parts = url.path.strip("/").split("/")
            if method == "GET" and url.path == "/api/whoami-v2":
                return self._send(200, {"type": "user", "name": USER, "id": "u1"})
            if parts[:2] != ["api", "jobs"] or len(parts) < 3 or parts[2] != USER:
                return self._send(404, {"error": "not found"})
            if method == "POST" and len(parts) == 3:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if token == NO_SCOPE_TOKEN:
                    return self._send(403, {"error": "This token does not have the 'jobs' permission"})
                hub.created.append(body)
                return self._send(200, hub.job_json(body))
            if len(parts) < 4 or parts[3] != JOB_ID:
                return self._send(404, {"error": "Job not found"})
            if method == "GET" and len(parts) == 4:
                return self._send(200, hub.job_json(hub.created[-1] if hub.created else {"flavor": "l4x1"}))
            if method == "GET" and parts[4:] == ["logs"]:
                tail = int(parse_qs(url.query).get("tail", ["0"])[0]) or None
                events = ["===== Job started at 2026-01-02 03:04:06 =====", *hub.log_lines]
                lines = events[-tail:] if tail else events
                stream = "".join(
                    f"data: {json.dumps({'data': line, 'timestamp': '2026-01-02T03:04:06.000Z'})}\n\n" for line in lines
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(stream)))
                self.end_headers()
                self.wfile.write(stream)
                return None
            if method == "POST" and parts[4:] == ["cancel"]:
                hub.cancelled.append(parts[3])
                hub.stage = "CANCELED"
                return self._send(200)
            return self._send(404, {"error": "not found"})

        def do_GET(self):
            self._route("GET")

        def do_POST(self):
            self._route("POST")

    return Handler


@pytest.fixture()
def hub(monkeypatch):
    """A running stand-in Hub on 127.0.0.1 (random port); offline mode lifted for the client."""
    state = FakeJobsHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", state.endpoint)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("STUDIO_JOBS_IMAGE", raising=False)
    yield state
    server.shutdown()
    server.server_close()


def pushing_spec(**changes) -> str:
    data = {
        "method": "sft",
        "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"},
        "dataset": {"source": "hub", "name": "trl-lib/Capybara", "max_rows": 500},
        "output": {"push_to_hub": True, "hub_repo_id": f"{USER}/capybara-lora", "run_name": "capybara v1"},
        **changes,
    }
    return parse_spec(data).to_json()


def test_submit_sends_image_command_env_flavor_timeout_and_token_only_as_secret(hub):
    spec_json = pushing_spec()
    job_id = submit_remote(
        spec_json, TOKEN, flavor="a10g-large", timeout="90m", endpoint=hub.endpoint, local_job_id="job-42"
    )

    assert job_id == JOB_ID
    assert len(hub.created) == 1
    body = hub.created[0]
    create = [r for r in hub.requests if r[0] == "POST"][0]
    assert create[1] == f"/api/jobs/{USER}"  # namespace from whoami
    assert create[3]["authorization"] == f"Bearer {TOKEN}"
    assert body["spaceId"] == DEFAULT_IMAGE.removeprefix("hf.co/spaces/")
    assert body["flavor"] == "a10g-large"
    assert body["timeoutSeconds"] == 90 * 60
    assert body["secrets"] == {"HF_TOKEN": TOKEN}
    assert TOKEN not in json.dumps(body["environment"]) and TOKEN not in json.dumps(body["command"])
    assert "HF_TOKEN" not in body["environment"]
    assert body["environment"]["STUDIO_DATA_DIR"] and body["environment"]["PYTHONUNBUFFERED"] == "1"
    assert body["environment"]["HF_ENDPOINT"] == hub.endpoint
    assert body["labels"]["studio-job"] == "job-42" and body["labels"]["name"] == "studio-sft-capybara-v1"

    command = body["command"]
    assert command[:3] == ["python", "-m", "backend.remote_job"]
    assert command[command.index("--job-id") + 1] == "job-42"
    sent_spec = decode_spec(command[command.index("--spec-b64") + 1])
    assert sent_spec == parse_spec(spec_json)


def test_docker_image_is_sent_as_docker_image(hub):
    submit_remote(pushing_spec(), TOKEN, image="ghcr.io/example/studio:1.0", endpoint=hub.endpoint)
    assert hub.created[0]["dockerImage"] == "ghcr.io/example/studio:1.0"
    assert "spaceId" not in hub.created[0]


def test_status_maps_each_stage_to_a_sentence(hub):
    submit_remote(pushing_spec(), TOKEN, flavor="l4x1", endpoint=hub.endpoint, namespace=USER)
    whoami_calls = lambda: sum(path == "/api/whoami-v2" for _, path, *_ in hub.requests)  # noqa: E731
    assert whoami_calls() == 0  # an explicit namespace saves the rate-limited whoami call
    expected = {
        "SCHEDULING": "Waiting for hardware",
        "RUNNING": "Training on Hugging Face Jobs (l4x1)",
        "COMPLETED": "adapter was pushed to the Hub",
        "CANCELED": "Cancelled on Hugging Face Jobs",
    }
    for stage, words in expected.items():
        hub.stage = stage
        status = remote_status(JOB_ID, TOKEN, namespace=USER, endpoint=hub.endpoint)
        assert status.stage == stage
        assert words in status.message
        assert status.terminal is (stage in {"COMPLETED", "CANCELED"})

    hub.stage, hub.message = "ERROR", "CUDA out of memory"
    stage, message = remote_status(JOB_ID, TOKEN, namespace=USER, endpoint=hub.endpoint)
    assert stage == "ERROR" and message == "Failed on Hugging Face Jobs: CUDA out of memory."
    assert whoami_calls() == 0


def test_logs_come_back_bounded_and_without_the_start_banner(hub):
    hub.log_lines = [f"step {i} loss {1.0 / (i + 1):.3f}" for i in range(10)]
    assert remote_logs(JOB_ID, TOKEN, namespace=USER, endpoint=hub.endpoint) == hub.log_lines
    assert remote_logs(JOB_ID, TOKEN, tail=3, namespace=USER, endpoint=hub.endpoint) == hub.log_lines[-3:]

    remote_logs(JOB_ID, TOKEN, tail=10**9, namespace=USER, endpoint=hub.endpoint)
    log_request = [r for r in hub.requests if r[1].endswith("/logs")][-1]
    assert log_request[2]["tail"] == [str(MAX_LOG_LINES)]


def test_cancel_hits_the_cancel_endpoint(hub):
    submit_remote(pushing_spec(), TOKEN, endpoint=hub.endpoint)
    cancel_remote(JOB_ID, TOKEN, endpoint=hub.endpoint)
    assert hub.cancelled == [JOB_ID]
    assert ("POST", f"/api/jobs/{USER}/{JOB_ID}/cancel") in [(m, p) for m, p, *_ in hub.requests]
    assert remote_status(JOB_ID, TOKEN, endpoint=hub.endpoint).stage == "CANCELED"


def test_token_without_jobs_scope_gets_the_scope_sentence(hub):
    with pytest.raises(RemoteJobError, match="needs the jobs scope") as caught:
        submit_remote(pushing_spec(), NO_SCOPE_TOKEN, endpoint=hub.endpoint)
    assert "403" in str(caught.value) and "\n" not in str(caught.value)
    assert hub.created == []


def test_invalid_token_says_sign_in_again(hub):
    with pytest.raises(RemoteJobError, match="invalid or expired"):
        submit_remote(pushing_spec(), "hf_wrong", endpoint=hub.endpoint)


def test_unknown_job_is_named(hub):
    with pytest.raises(RemoteJobError, match="No Hugging Face job nope"):
        remote_status("nope", TOKEN, namespace=USER, endpoint=hub.endpoint)


def test_no_token_and_unknown_flavor_fail_before_any_request(hub):
    with pytest.raises(RemoteJobError, match="No Hugging Face token"):
        submit_remote(pushing_spec(), None, endpoint=hub.endpoint)
    with pytest.raises(RemoteJobError, match="No Hugging Face token"):
        remote_status(JOB_ID, "  ", endpoint=hub.endpoint)
    with pytest.raises(RemoteJobError, match=r"Unknown Hugging Face Jobs flavor 'h100'.*a10g-small"):
        submit_remote(pushing_spec(), TOKEN, flavor="h100", endpoint=hub.endpoint)
    assert hub.requests == []


def test_unreachable_hub_and_offline_mode_are_one_sentence(hub, monkeypatch):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(RemoteJobError, match=rf"Hub at {closed} is unreachable"):
        remote_status(JOB_ID, TOKEN, namespace=USER, endpoint=closed)

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(RemoteJobError, match="HF_HUB_OFFLINE is set"):
        submit_remote(pushing_spec(), TOKEN, endpoint=hub.endpoint)


def test_specs_that_cannot_run_remotely_are_refused_with_reasons(tmp_path):
    local_model = tmp_path / "my-model"
    local_model.mkdir()
    spec = parse_spec(
        {
            "model": {"name_or_path": str(local_model), "parent_job_id": "abc"},
            "dataset": {"source": "file", "name": str(tmp_path / "rows.jsonl")},
            "output": {"push_to_hub": False},
        }
    )
    with pytest.raises(SpecError) as caught:
        remote_job_request(spec)
    fields = [problem.split(":")[0] for problem in caught.value.problems]
    assert fields == ["model.name_or_path", "model.parent_job_id", "dataset.source", "output.push_to_hub"]

    local_env = pushing_spec(method="grpo", grpo={"num_generations": 2}, environment={"name": "http://127.0.0.1:8011"})
    with pytest.raises(SpecError, match="environment.name"):
        remote_job_request(local_env)
    # built-ins live in the image, so the offline demo model and built-in environments are fine remotely
    builtin = pushing_spec(
        model={"name_or_path": "builtin:tiny-qwen3"},
        method="grpo",
        grpo={"num_generations": 2},
        environment={"name": "builtin:echo"},
        dataset={"source": "builtin", "name": "echo-demo"},
    )
    assert remote_job_request(builtin).command[2] == "backend.remote_job"


def test_timeouts_and_default_image(monkeypatch):
    assert timeout_seconds("90m") == 5400 and timeout_seconds(3600) == 3600 and timeout_seconds("1.5h") == 5400
    for bad in ("soon", 0, "-5m", ""):
        with pytest.raises(RemoteJobError, match="Invalid Hugging Face Jobs timeout"):
            timeout_seconds(bad)
    assert {"cpu-basic", "t4-small", "l4x1", "a10g-small", "a10g-large", "a100-large"} <= set(JOB_FLAVORS)

    monkeypatch.delenv("STUDIO_JOBS_IMAGE", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert default_image() == DEFAULT_IMAGE
    monkeypatch.setenv("SPACE_ID", "bob/my-studio")
    assert default_image() == "hf.co/spaces/bob/my-studio"  # a duplicate runs its own code
    monkeypatch.setenv("STUDIO_JOBS_IMAGE", "ghcr.io/bob/studio:2")
    assert default_image() == "ghcr.io/bob/studio:2"


def test_the_facade_records_follows_and_cancels_a_users_remote_job(hub, paths):
    """Sent from the app: recorded for its owner only, status and logs pulled back, cancel goes through."""
    from backend.api import StudioAPI
    from backend.core.users import User
    from backend.jobs.store_errors import JobNotFound

    api = StudioAPI(paths.root, scheduler="none")
    alice, bob = User(USER, token=TOKEN), User("bob", token="hf_bob_token")
    hf_id = api.hub.send_to_hf_jobs(pushing_spec(), alice, flavor="l4x1", timeout="2h")
    assert hf_id == JOB_ID and [r.hf_job_id for r in api.hub.list_remote_jobs(alice)] == [JOB_ID]
    assert api.hub.list_remote_jobs(bob) == [] and api.jobs.list_jobs() == [], "nothing was queued locally"
    hub.stage, hub.log_lines = "RUNNING", ["step 1 loss 2.0", "step 2 loss 1.5"]
    stage, sentence, logs = api.hub.remote_job_status(JOB_ID, alice)
    assert stage == "RUNNING" and "Training on Hugging Face Jobs" in sentence and logs[-1] == "step 2 loss 1.5"
    assert api.core.remote.get(JOB_ID).last_stage == "RUNNING"
    with pytest.raises(JobNotFound):
        api.hub.remote_job_status(JOB_ID, bob)
    with pytest.raises(JobNotFound):
        api.hub.cancel_remote_job(JOB_ID, bob)
    api.hub.cancel_remote_job(JOB_ID, alice)
    assert hub.cancelled == [JOB_ID]
    assert TOKEN not in (paths.root / "studio.sqlite3").read_bytes().decode("latin-1")
