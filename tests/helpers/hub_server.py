"""A local stand-in for the Hugging Face Hub API, enough for the real ``huggingface_hub`` client to push a model.

It speaks whoami-v2, repo creation, model info (for a base model's license and ``repo_info``; with ``blobs`` each
file's size, as ``files_metadata=True`` asks), README metadata validation, preupload (every file ``regular``, so no
LFS or Xet) and the NDJSON commit endpoint, with the request and response shapes of ``huggingface_hub/hf_api.py`` and
``_commit_api.py``; and for downloads (``snapshot_download``), the recursive tree listing and the file resolve
endpoint (HEAD and GET, files as of a revision: ``main`` or a commit id), as ``file_download.py`` reads them. Every
request is recorded (method, path, headers, body, parsed JSON or NDJSON); committed files are decoded and kept per
repo and commit. Tests can make an endpoint answer an error status, or stop the server to play an unreachable Hub.

It also speaks the Jobs API (``run_job``, ``inspect_job``, ``fetch_job_logs``, ``cancel_job``, ``list_jobs``), and
its jobs really run: each one's command is a process on this machine, in this checkout, that talks back to this
fake Hub (tests/helpers/hub_jobs.py says how the image is mapped onto the checkout).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from tests.helpers.hub_jobs import FakeJobs

# Hugging Face Jobs (hub_jobs.py runs them): run_job, list_jobs, inspect_job, fetch_job_logs and cancel_job.
JOB_ENDPOINTS = ("run_job", "list_jobs", "inspect_job", "job_logs", "cancel_job")
_JOBS = re.compile(r"^/api/jobs/(?P<ns>[^/]+)(/(?P<job>[^/]+)(/(?P<op>logs|cancel))?)?$")

ENDPOINTS = (
    "whoami",
    "create",
    "model_info",
    "validate_yaml",
    "preupload",
    "commit",
    "tree",
    "resolve",
    *JOB_ENDPOINTS,
)
# Endpoints anyone may call on a public repo; a private one answers them only with the token.
_READS = ("model_info", "tree", "resolve")

_REPO_OP = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<op>preupload|commit)/(?P<rev>[^/]+)$")
_MODEL_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(/revision/(?P<rev>[^/]+))?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(/(?P<path>.*))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")

_DEFAULT_MESSAGES = {
    401: "Invalid credentials in Authorization header",
    403: "You don't have the rights to write to this repository",
    404: "Repository not found",
    409: "A conflicting operation is in progress on this repository",
    500: "Internal error",
}


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    json: Any = None
    ndjson: list[dict[str, Any]] | None = None


@dataclass
class FakeCommit:
    oid: str
    summary: str
    description: str
    files: dict[str, bytes]


@dataclass
class FakeRepo:
    repo_id: str
    private: bool
    repo_type: str
    commits: list[FakeCommit] = field(default_factory=list)

    @property
    def files(self) -> dict[str, bytes]:
        """The repo's current content: every commit's files, later ones winning."""
        merged: dict[str, bytes] = {}
        for commit in self.commits:
            merged.update(commit.files)
        return merged

    @property
    def sha(self) -> str:
        return self.commits[-1].oid if self.commits else "0" * 40

    def files_at(self, revision: str) -> dict[str, bytes] | None:
        """The content as of ``revision`` (``main`` or a commit id), or None for a revision the repo does not have."""
        if revision == "main":
            return self.files
        oids = [commit.oid for commit in self.commits]
        if revision not in oids:
            return None
        merged: dict[str, bytes] = {}
        for commit in self.commits[: oids.index(revision) + 1]:
            merged.update(commit.files)
        return merged


def git_blob_id(content: bytes) -> str:
    """The id git (and the Hub's tree listing and ETag) gives a regular file."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class FakeHub:
    """The fake Hub; use as a context manager or call :meth:`start` / :meth:`stop`.

    ``token`` is the only accepted bearer token, ``user`` its account and ``orgs`` the organisations it may write
    to; ``role`` is what whoami reports for the token (``write`` or ``read``); ``models`` maps model ids to the
    JSON ``model_info`` returns (e.g. ``{"Qwen/Qwen3-0.6B": {"cardData": {"license": "apache-2.0"}}}``).
    """

    def __init__(
        self,
        token: str,
        user: str = "tester",
        orgs: tuple[str, ...] = (),
        role: str = "write",
        models: dict[str, dict[str, Any]] | None = None,
        jobs_models_dir: Path | None = None,
        jobs_schedule_delay: float = 0.5,
    ):
        self.token = token
        self.user = user
        self.orgs = tuple(orgs)
        self.role = role
        self.models = dict(models or {})
        self.requests: list[RecordedRequest] = []
        self.repos: dict[str, FakeRepo] = {}
        self._failures: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self._jobs_settings = {"models_dir": jobs_models_dir, "schedule_delay": jobs_schedule_delay}
        self.jobs: FakeJobs | None = None  # made at start, when the URL the jobs talk back to is known

    # --- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.jobs = FakeJobs(self.url, **self._jobs_settings)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut the server down; later requests to :attr:`url` are refused (an unreachable Hub)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = None
        if self.jobs is not None:
            self.jobs.close()  # a job process never outlives its fake Hub

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- steering ---------------------------------------------------------------------------------------
    def fail(self, status: int, on: str = "*", message: str | None = None) -> None:
        """Answer ``status`` on one endpoint (one of ENDPOINTS) or on all of them (``*``)."""
        if on != "*" and on not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {on!r}; use one of {', '.join(ENDPOINTS)} or '*'")
        self._failures[on] = (status, message or _DEFAULT_MESSAGES.get(status, "error"))

    def clear_failures(self) -> None:
        self._failures.clear()

    def add_repo(self, repo_id: str, private: bool = False) -> FakeRepo:
        """A repo that exists before the test pushes (e.g. someone else's)."""
        repo = FakeRepo(repo_id, private, "model")
        self.repos[repo_id] = repo
        return repo

    def requests_to(self, endpoint: str) -> list[RecordedRequest]:
        return [r for r in self.requests if _endpoint_of(r.method, r.path) == endpoint]

    def can_write(self, namespace: str) -> bool:
        return self.role == "write" and namespace in (self.user, *self.orgs)

    def _failure(self, endpoint: str) -> tuple[int, str] | None:
        return self._failures.get(endpoint) or self._failures.get("*")


def _endpoint_of(method: str, path: str) -> str | None:
    if method == "GET" and path == "/api/whoami-v2":
        return "whoami"
    if method == "POST" and path == "/api/repos/create":
        return "create"
    if method == "POST" and path == "/api/validate-yaml":
        return "validate_yaml"
    if method == "POST" and (m := _REPO_OP.match(path)):
        return m.group("op")
    if method == "GET" and _MODEL_INFO.match(path):
        return "model_info"
    if method == "GET" and _TREE.match(path):
        return "tree"
    if method in ("GET", "HEAD") and _RESOLVE.match(path):
        return "resolve"
    if m := _JOBS.match(path):
        op = m.group("op") or ("job" if m.group("job") else None)
        return {
            ("POST", None): "run_job",
            ("GET", None): "list_jobs",
            ("GET", "job"): "inspect_job",
            ("GET", "logs"): "job_logs",
            ("POST", "cancel"): "cancel_job",
        }.get((method, op))
    return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub  # set on the per-server subclass

    def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name; keep test output quiet
        pass

    # --- plumbing ---------------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":  # a HEAD answer has the headers of the GET one and no body
            self.wfile.write(body)

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, {"error": message}, headers)

    def _record(self) -> RecordedRequest:
        parts = urlsplit(self.path)
        body = self._read_body() if self.command == "POST" else b""
        record = RecordedRequest(self.command, unquote(parts.path), parts.query, dict(self.headers.items()), body)
        content_type = self.headers.get("Content-Type", "")
        if "ndjson" in content_type:
            record.ndjson = [json.loads(line) for line in body.splitlines() if line.strip()]
        elif body:
            try:
                record.json = json.loads(body)
            except ValueError:
                pass
        with self.fake._lock:
            self.fake.requests.append(record)
        return record

    def _authorized(self, record: RecordedRequest) -> bool:
        given = {k.lower(): v for k, v in record.headers.items()}.get("authorization")
        return given == f"Bearer {self.fake.token}"

    # --- routing ----------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._route(self._record())

    def do_POST(self) -> None:  # noqa: N802
        self._route(self._record())

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(self._record())

    def _route(self, record: RecordedRequest) -> None:
        endpoint = _endpoint_of(record.method, record.path)
        if endpoint is None:
            return self._error(404, f"the fake hub does not implement {record.method} {record.path}")
        failure = self.fake._failure(endpoint)
        if failure is not None:
            return self._error(*failure)
        if endpoint not in _READS and not self._authorized(record):
            return self._error(401, _DEFAULT_MESSAGES[401])
        return getattr(self, f"_{endpoint}")(record)

    # --- endpoints --------------------------------------------------------------------------------------
    def _whoami(self, record: RecordedRequest) -> None:
        fake = self.fake
        self._send(
            200,
            {
                "type": "user",
                "name": fake.user,
                "fullname": fake.user.title(),
                "orgs": [{"type": "org", "name": org, "roleInOrg": "write"} for org in fake.orgs],
                "auth": {"type": "access_token", "accessToken": {"displayName": "test token", "role": fake.role}},
            },
        )

    def _create(self, record: RecordedRequest) -> None:
        payload = record.json or {}
        namespace = payload.get("organization") or self.fake.user
        repo_id = f"{namespace}/{payload.get('name')}"
        if not self.fake.can_write(namespace):
            return self._error(403, f'You don\'t have the rights to create a model under the namespace "{namespace}"')
        url = f"{self.fake.url}/{repo_id}"
        with self.fake._lock:
            if repo_id in self.fake.repos:
                return self._send(
                    409,
                    {"error": "You already created this model repo", "url": url},
                    {"X-Error-Message": "You already created this model repo"},
                )
            self.fake.repos[repo_id] = FakeRepo(
                repo_id, payload.get("visibility") == "private", payload.get("type") or "model"
            )
        self._send(200, {"url": url, "name": repo_id, "id": hashlib.sha1(repo_id.encode()).hexdigest()[:24]})

    def _model_info(self, record: RecordedRequest) -> None:
        repo_id = _MODEL_INFO.match(record.path).group("repo")
        repo = self.fake.repos.get(repo_id)
        if repo is not None:
            if repo.private and not self._authorized(record):
                return self._error(401, "Repository not found", "RepoNotFound")
            siblings = [{"rfilename": name} for name in sorted(repo.files)]
            if parse_qs(record.query).get("blobs", [""])[0].lower() == "true":  # files_metadata: sizes and blob ids
                files = repo.files
                siblings = [
                    {**s, "size": len(files[s["rfilename"]]), "blobId": git_blob_id(files[s["rfilename"]])}
                    for s in siblings
                ]
            return self._send(200, {"id": repo_id, "private": repo.private, "sha": repo.sha, "siblings": siblings})
        if repo_id in self.fake.models:
            return self._send(200, {"id": repo_id, "private": False, **self.fake.models[repo_id]})
        self._error(404, "Repository not found", "RepoNotFound")

    def _readable_files(self, record: RecordedRequest, match: re.Match) -> tuple[FakeRepo, dict[str, bytes]] | None:
        """The repo and its files at the revision the path names; or None, the error answered (as the Hub does)."""
        repo = self.fake.repos.get(match.group("repo"))
        if repo is None or (repo.private and not self._authorized(record)):
            self._error(401 if repo is not None else 404, "Repository not found", "RepoNotFound")
            return None
        files = repo.files_at(match.group("rev"))
        if files is None:
            self._error(404, f"Invalid rev id: {match.group('rev')}", "RevisionNotFound")
            return None
        return repo, files

    def _tree(self, record: RecordedRequest) -> None:
        match = _TREE.match(record.path)
        found = self._readable_files(record, match)
        if found is None:
            return
        under = (match.group("path") or "").strip("/")
        entries = [
            {"type": "file", "oid": git_blob_id(content), "size": len(content), "path": name}
            for name, content in sorted(found[1].items())
            if not under or name.startswith(under + "/")
        ]
        self._send(200, entries)

    def _resolve(self, record: RecordedRequest) -> None:
        match = _RESOLVE.match(record.path)
        found = self._readable_files(record, match)
        if found is None:
            return
        repo, files = found
        content = files.get(match.group("path"))
        if content is None:
            return self._error(404, "Entry not found", "EntryNotFound")
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(content)))
        self.send_header("ETag", f'"{git_blob_id(content)}"')
        rev = match.group("rev")
        self.send_header("X-Repo-Commit", repo.sha if rev == "main" else rev)
        self.end_headers()
        if record.method == "GET":
            self.wfile.write(content)

    def _validate_yaml(self, record: RecordedRequest) -> None:
        content = (record.json or {}).get("content", "")
        match = re.match(r"^---\n(.*?)\n---", content, re.S)
        try:
            if match:
                yaml.safe_load(match.group(1))
        except yaml.YAMLError as exc:
            return self._send(400, {"errors": [{"message": f"invalid YAML: {exc}"}], "warnings": []})
        warnings = [] if match else [{"message": "empty or missing yaml metadata in repo card"}]
        self._send(200, {"errors": [], "warnings": warnings})

    def _repo_for_write(self, record: RecordedRequest) -> FakeRepo | None:
        repo_id = _REPO_OP.match(record.path).group("repo")
        repo = self.fake.repos.get(repo_id)
        if repo is None:
            self._error(404, "Repository not found", "RepoNotFound")
            return None
        if not self.fake.can_write(repo_id.split("/")[0]):
            self._error(403, f"You don't have the rights to write to {repo_id}")
            return None
        return repo

    def _preupload(self, record: RecordedRequest) -> None:
        if self._repo_for_write(record) is None:
            return
        files = (record.json or {}).get("files", [])
        self._send(
            200,
            {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files
                ],
                "commitOid": "0" * 40,
            },
        )

    def _commit(self, record: RecordedRequest) -> None:
        repo = self._repo_for_write(record)
        if repo is None:
            return
        lines = record.ndjson or []
        if not lines or lines[0].get("key") != "header":
            return self._error(400, "the commit payload must start with a header line")
        files: dict[str, bytes] = {}
        for line in lines[1:]:
            value = line.get("value", {})
            if line.get("key") != "file" or value.get("encoding") != "base64":
                return self._error(400, f"the fake hub only takes base64 regular files, not {line.get('key')!r}")
            files[value["path"]] = base64.b64decode(value["content"])
        oid = hashlib.sha1(record.body).hexdigest()
        header = lines[0]["value"]
        with self.fake._lock:
            repo.commits.append(FakeCommit(oid, header.get("summary", ""), header.get("description", ""), files))
        self._send(
            200,
            {
                "success": True,
                "commitOid": oid,
                "commitUrl": f"{self.fake.url}/{repo.repo_id}/commit/{oid}",
                "pullRequestUrl": None,
            },
        )

    # --- Hugging Face Jobs (tests/helpers/hub_jobs.py runs them) -------------------------------------------------
    def _jobs_namespace(self, record: RecordedRequest) -> str | None:
        """The namespace the path names, if the token may use it; None, the error answered, otherwise."""
        namespace = _JOBS.match(record.path).group("ns")
        if namespace not in (self.fake.user, *self.fake.orgs):
            self._error(403, f"You don't have the rights to run jobs in the namespace {namespace}")
            return None
        return namespace

    def _job(self, record: RecordedRequest):
        """The job the path names, in a namespace the token may use; None, the error answered, otherwise."""
        namespace = self._jobs_namespace(record)
        if namespace is None:
            return None
        job = self.fake.jobs.jobs.get(_JOBS.match(record.path).group("job"))
        if job is None or job.namespace != namespace:
            self._error(404, "Job not found")
            return None
        return job

    def _run_job(self, record: RecordedRequest) -> None:
        namespace = self._jobs_namespace(record)
        if namespace is None:
            return
        body = record.json or {}
        if not body.get("command") or not body.get("flavor"):
            return self._error(400, "a job needs a command and a flavor")
        self._send(200, self.fake.jobs.info(self.fake.jobs.run(namespace, body)))

    def _list_jobs(self, record: RecordedRequest) -> None:
        namespace = self._jobs_namespace(record)
        if namespace is not None:
            jobs = [job for job in self.fake.jobs.jobs.values() if job.namespace == namespace]
            self._send(200, [self.fake.jobs.info(job) for job in jobs])

    def _inspect_job(self, record: RecordedRequest) -> None:
        job = self._job(record)
        if job is not None:
            self._send(200, self.fake.jobs.info(job))

    def _job_logs(self, record: RecordedRequest) -> None:
        job = self._job(record)
        if job is None:
            return
        tail = parse_qs(record.query).get("tail", ["0"])[0]
        stream = self.fake.jobs.log_events(job, int(tail) if tail.isdigit() else None)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(stream)))
        self.end_headers()
        self.wfile.write(stream)

    def _cancel_job(self, record: RecordedRequest) -> None:
        job = self._job(record)
        if job is not None:
            self.fake.jobs.cancel(job)
            self._send(200, {})
