"""Scale-out: send a job to Hugging Face Jobs (same image, same worker, same spec, bigger GPU) and follow it there.

The request is built first (:func:`remote_job_request`: image, command, env, flavor, timeout; the HF token is
only ever a *secret*, never in the env or the command), then sent with ``huggingface_hub``'s ``run_job``.
Inside the container ``python -m backend.remote_job --spec-b64 ...`` stores the spec as a job in a fresh data
directory, runs the worker on it and pushes the adapter with the token from the environment.

Every Hub failure becomes a :class:`RemoteJobError` with one sentence a person can act on.
"""

from __future__ import annotations

import base64
import os
import re
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlparse

import httpx2  # huggingface_hub's HTTP client: its transport errors are what "the Hub is unreachable" looks like
from huggingface_hub import HfApi, JobStage
from huggingface_hub.errors import HfHubHTTPError, JobNotFoundError, LocalTokenNotFoundError, OfflineModeIsEnabled

from backend.core.hub_names import DEFAULT_ENDPOINT, hub_endpoint, hub_model_id, is_builtin
from backend.core.spec import JobSpec, SpecError, parse_spec
from backend.platform.flavors import DEFAULT_FLAVOR, FLAVORS

# The published Space whose image carries this code (a Gradio Space's image holds the repo in /home/user/app
# with requirements.txt installed). A Space sends jobs to its *own* image instead (SPACE_ID), so a duplicate runs
# the code it was duplicated with; STUDIO_JOBS_IMAGE overrides both (e.g. an image built from the Dockerfile).
DEFAULT_SPACE = "post-training-studio/post-training-studio"
DEFAULT_IMAGE = f"hf.co/spaces/{DEFAULT_SPACE}"
IMAGE_ENV = "STUDIO_JOBS_IMAGE"
# Where the code lives inside the image: WORKDIR of the Dockerfile and of Gradio Spaces alike.
APP_DIR = "/home/user/app"
# The container's disk is thrown away with it; the data dir only needs to outlive the run.
REMOTE_DATA_DIR = "/tmp/studio-data"
ENTRY_MODULE = "backend.remote_job"
TOKEN_SECRET = "HF_TOKEN"

# Flavors come from the one table (backend/platform/flavors.py; its test keeps it in step with JobHardware).
JOB_FLAVORS: tuple[str, ...] = tuple(FLAVORS)
# HF Jobs stops a job after 30 minutes unless told otherwise; training needs longer. Kept well under the
# Space's OAuth token lifetime (README front matter) because the token must still push the adapter at the end.
DEFAULT_TIMEOUT = "6h"
MAX_LOG_LINES = 1000

_TIMEOUT_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_LOCAL_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LOOPBACK_HOSTS = {"localhost", "0.0.0.0", "::1", "[::1]"}

_STAGE_TEXT = {
    JobStage.SCHEDULING.value: "Waiting for hardware on Hugging Face Jobs.",
    JobStage.RUNNING.value: "Training on Hugging Face Jobs.",
    JobStage.COMPLETED.value: "Finished on Hugging Face Jobs; the adapter was pushed to the Hub.",
    JobStage.CANCELED.value: "Cancelled on Hugging Face Jobs.",
    JobStage.DELETED.value: "Deleted from Hugging Face Jobs.",
}
_TERMINAL_STAGES = {
    JobStage.COMPLETED.value,
    JobStage.CANCELED.value,
    JobStage.ERROR.value,
    JobStage.DELETED.value,
}


class RemoteJobError(RuntimeError):
    """Sending or following a Hugging Face job failed; the message is one sentence a person can act on."""


class RemoteStatus(NamedTuple):
    """Where a Hugging Face job stands: its raw stage (``RUNNING``...) and a sentence to show."""

    stage: str
    message: str

    @property
    def terminal(self) -> bool:
        """True once the job will not change any more (completed, failed, cancelled, deleted)."""
        return self.stage in _TERMINAL_STAGES


@dataclass(frozen=True)
class RemoteJobRequest:
    """What is sent to Hugging Face Jobs. Holds no token: secrets are named here and filled in at send time."""

    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    flavor: str
    timeout_s: int
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    secret_names: tuple[str, ...] = (TOKEN_SECRET,)

    def run_job_kwargs(self, token: str) -> dict[str, Any]:
        """Keyword arguments for ``HfApi.run_job``: the token goes in ``secrets`` and nowhere else."""
        return {
            "image": self.image,
            "command": list(self.command),
            "env": dict(self.env),
            "secrets": {name: token for name in self.secret_names},
            "flavor": self.flavor,
            "timeout": self.timeout_s,
            "name": self.name,
            "labels": dict(self.labels),
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description to show before sending (the spec argument shortened, secrets by name only)."""
        command = [part if len(part) <= 80 else f"{part[:40]}...({len(part)} chars)" for part in self.command]
        return {
            "image": self.image,
            "command": command,
            "env": dict(self.env),
            "secrets": list(self.secret_names),
            "flavor": self.flavor,
            "timeout_s": self.timeout_s,
            "name": self.name,
            "labels": dict(self.labels),
        }


# --- building the request ---------------------------------------------------------------------------------------
def default_image() -> str:
    """``$STUDIO_JOBS_IMAGE``, else this Space's own image (``$SPACE_ID``), else :data:`DEFAULT_IMAGE`."""
    configured = os.environ.get(IMAGE_ENV, "").strip()
    if configured:
        return configured
    space_id = os.environ.get("SPACE_ID", "").strip()
    return f"hf.co/spaces/{space_id}" if space_id else DEFAULT_IMAGE


def check_flavor(flavor: str) -> str:
    """The flavor if Hugging Face Jobs knows it, else a RemoteJobError listing the ones it does."""
    if flavor not in JOB_FLAVORS:
        raise RemoteJobError(f"Unknown Hugging Face Jobs flavor {flavor!r}: choose one of {', '.join(JOB_FLAVORS)}.")
    return flavor


def timeout_seconds(timeout: str | int) -> int:
    """A job time limit in seconds from ``5400``, ``"5400"``, ``"90m"``, ``"6h"`` or ``"1d"``."""
    text = str(timeout).strip().lower()
    factor = 1
    if text and text[-1] in _TIMEOUT_UNITS:
        factor, text = _TIMEOUT_UNITS[text[-1]], text[:-1]
    try:
        seconds = int(float(text) * factor)
    except ValueError:
        seconds = 0
    if isinstance(timeout, bool) or seconds <= 0:
        raise RemoteJobError(
            f"Invalid Hugging Face Jobs timeout {timeout!r}: give seconds or a number with s, m, h or d, such as 6h."
        )
    return seconds


def encode_spec(spec: JobSpec) -> str:
    """The spec as URL-safe base64 of its JSON: one shell-proof argument."""
    return base64.urlsafe_b64encode(spec.to_json().encode()).decode("ascii")


def decode_spec(encoded: str) -> JobSpec:
    """The inverse of :func:`encode_spec`, validated again (the remote entry point's first step)."""
    try:
        text = base64.urlsafe_b64decode(encoded.encode("ascii")).decode("utf-8")
    except (ValueError, UnicodeError) as exc:
        raise SpecError([f"--spec-b64 is not base64 JSON ({exc})"]) from None
    return parse_spec(text)


def remote_problems(spec: JobSpec) -> list[str]:
    """What in the spec cannot work on a remote machine that sees only the Hub and the image."""
    problems = []
    model = spec.model.name_or_path
    if not is_builtin(model) and hub_model_id(model) is None:
        problems.append(
            f"model.name_or_path: {model!r} is a local folder the remote machine cannot see; "
            "push it to the Hub and use its id"
        )
    if spec.model.parent_job_id:
        problems.append(
            "model.parent_job_id: the parent's adapter is on this machine, not on the remote one; "
            "run staged training here, or start the remote job from a Hub model"
        )
    if spec.dataset.source in ("file", "upload"):
        what = "an uploaded file" if spec.dataset.source == "upload" else "a local file"
        problems.append(
            f"dataset.source: {what} is not on the remote machine; push it to the Hub as a dataset "
            "and use source 'hub' (or pick a built-in dataset)"
        )
    env = spec.environment.name or ""
    if env.startswith(("http://", "https://")):
        host = (urlparse(env).hostname or "").lower()
        if host in _LOOPBACK_HOSTS or host.startswith("127."):
            problems.append(
                f"environment.name: {env} is on this machine; use a built-in environment or a Space id instead"
            )
    if not spec.output.push_to_hub:
        problems.append(
            "output.push_to_hub: a remote job's files are deleted when it ends, so it must push its adapter; "
            "turn on push to Hub"
        )
    return problems


def _job_name(spec: JobSpec, local_job_id: str | None) -> str:
    tail = spec.output.run_name or local_job_id or spec.dataset.name
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"studio-{spec.method.value}-{tail}")[:64]


def remote_job_request(
    spec_json: str | JobSpec,
    *,
    image: str | None = None,
    flavor: str = DEFAULT_FLAVOR,
    timeout: str | int = DEFAULT_TIMEOUT,
    endpoint: str | None = None,
    local_job_id: str | None = None,
) -> RemoteJobRequest:
    """Describe the Hugging Face job that runs ``spec_json`` with the studio's worker in ``image``.

    Raises :class:`SpecError` for a spec that cannot run remotely (local files, a parent job, no push to the
    Hub) and :class:`RemoteJobError` for an unknown flavor or a bad timeout. The token is not an argument: it is
    always sent as the ``HF_TOKEN`` secret, because the adapter must be pushed before the container goes away.
    """
    spec = spec_json if isinstance(spec_json, JobSpec) else parse_spec(spec_json)
    problems = remote_problems(spec)
    if problems:
        raise SpecError(problems)
    if local_job_id is not None and not _LOCAL_JOB_ID.match(local_job_id):
        raise RemoteJobError(f"Invalid local job id {local_job_id!r}: use letters, digits, '-' and '_' only.")
    command = ["python", "-m", ENTRY_MODULE, "--spec-b64", encode_spec(spec)]
    if local_job_id:
        command += ["--job-id", local_job_id]
    env = {
        "STUDIO_DATA_DIR": REMOTE_DATA_DIR,
        "PYTHONPATH": APP_DIR,  # the entry module imports whatever the image's working directory is
        "PYTHONUNBUFFERED": "1",  # log lines reach fetch_job_logs as they are printed
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # progress bars would fill the bounded log view
        # huggingface_hub 1.x+ dropped hf_transfer (HF_HUB_ENABLE_HF_TRANSFER only warns); Xet is its fast path.
        "HF_XET_HIGH_PERFORMANCE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    hub = (endpoint or hub_endpoint()).rstrip("/")
    if hub != DEFAULT_ENDPOINT:
        env["HF_ENDPOINT"] = hub  # the job downloads from and pushes to the Hub it was sent through
    labels = {"app": "post-training-studio", "method": spec.method.value}
    if local_job_id:
        labels["studio-job"] = local_job_id
    return RemoteJobRequest(
        image=(image or default_image()).strip(),
        command=tuple(command),
        env=env,
        flavor=check_flavor(flavor),
        timeout_s=timeout_seconds(timeout),
        name=_job_name(spec, local_job_id),
        labels=labels,
    )


# --- talking to the Hub --------------------------------------------------------------------------------------------
def _api(token: str | None, endpoint: str | None) -> HfApi:
    # Never fall back to a token saved on the machine: on a shared Space that would be the owner's, and the
    # owner would pay for every visitor's job.
    if not isinstance(token, str) or not token.strip():
        raise RemoteJobError(
            "No Hugging Face token: sign in with Hugging Face (or set HF_TOKEN locally) to use Hugging Face Jobs."
        )
    # The endpoint is read now, not at import (a self-hosted or test Hub).
    return HfApi(endpoint=endpoint or hub_endpoint(), token=token.strip())


def _server_detail(exc: HfHubHTTPError) -> str:
    detail = (exc.server_message or "").strip().splitlines()
    return f": {detail[0].rstrip('.')}" if detail else ""


@contextmanager
def _hub_errors(action: str, api: HfApi, job_id: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub and transport errors into one RemoteJobError sentence."""
    try:
        yield
    except RemoteJobError:
        raise
    except OfflineModeIsEnabled:
        raise RemoteJobError(
            f"Cannot {action}: the Hub is switched off on this machine (HF_HUB_OFFLINE is set)."
        ) from None
    except LocalTokenNotFoundError:
        raise RemoteJobError(f"Cannot {action}: no Hugging Face token was given; sign in first.") from None
    except JobNotFoundError:
        raise RemoteJobError(
            f"No Hugging Face job {job_id} in this namespace: it was deleted, or belongs to another account."
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code
        if status == 401:
            message = (
                f"Hugging Face rejected the token (401) while trying to {action}: it is invalid or expired; "
                "sign in again"
            )
        elif status == 403:
            message = (
                f"Hugging Face refused to {action} (403): the token needs the jobs scope; sign in again so the "
                "Space asks for it, or use a token with the Jobs permission"
            )
        elif status == 402:
            message = (
                f"Hugging Face refused to {action} (402): Jobs need a payment method or credits on the account "
                "(or the organization) that runs them"
            )
        elif status == 429:
            message = f"Hugging Face is rate-limiting requests (429) while trying to {action}; wait a minute and retry"
        else:
            message = f"Hugging Face Jobs answered {status} while trying to {action}{_server_detail(exc)}"
        raise RemoteJobError(message + ".") from None
    except httpx2.RequestError as exc:
        cause = str(exc) or type(exc).__name__
        raise RemoteJobError(
            f"Cannot {action}: the Hugging Face Hub at {api.endpoint} is unreachable ({cause})."
        ) from None


def submit_remote(
    spec: str | JobSpec,
    token: str | None,
    *,
    flavor: str = DEFAULT_FLAVOR,
    timeout: str | int = DEFAULT_TIMEOUT,
    namespace: str | None = None,
    endpoint: str | None = None,
    image: str | None = None,
    local_job_id: str | None = None,
) -> str:
    """Send the job to Hugging Face Jobs; returns the Hugging Face job id.

    ``namespace`` defaults to the token's user (one ``whoami`` call); pass an organization to bill it instead.
    """
    request = remote_job_request(
        spec, image=image, flavor=flavor, timeout=timeout, endpoint=endpoint, local_job_id=local_job_id
    )
    api = _api(token, endpoint)
    with _hub_errors("start a Hugging Face job", api):
        info = api.run_job(**request.run_job_kwargs(api.token), namespace=namespace)
    return info.id


def remote_status(
    job_id: str, token: str | None, *, namespace: str | None = None, endpoint: str | None = None
) -> RemoteStatus:
    """The job's stage and a sentence for it (pass ``namespace`` when polling: it saves a ``whoami`` per call)."""
    api = _api(token, endpoint)
    with _hub_errors("read the Hugging Face job's status", api, job_id):
        info = api.inspect_job(job_id=job_id, namespace=namespace)
    stage = str(getattr(info.status.stage, "value", info.status.stage))
    detail = (info.status.message or "").strip()
    if stage == JobStage.ERROR.value:
        text = f"Failed on Hugging Face Jobs: {detail or 'see the job logs'}."
    else:
        text = _STAGE_TEXT.get(stage, f"Hugging Face Jobs reports stage {stage}.")
        if stage == JobStage.RUNNING.value and info.flavor:
            text = f"Training on Hugging Face Jobs ({getattr(info.flavor, 'value', info.flavor)})."
    return RemoteStatus(stage, text)


def remote_logs(
    job_id: str,
    token: str | None,
    *,
    tail: int = 200,
    namespace: str | None = None,
    endpoint: str | None = None,
) -> list[str]:
    """The job's last ``tail`` log lines (at most :data:`MAX_LOG_LINES`), without waiting for new ones."""
    lines = max(1, min(int(tail), MAX_LOG_LINES))
    api = _api(token, endpoint)
    with _hub_errors("read the Hugging Face job's logs", api, job_id):
        stream = api.fetch_job_logs(job_id=job_id, namespace=namespace, follow=False, tail=lines)
        # The server honours ``tail``; the bounded deque keeps memory flat even if it sent the whole log.
        return [line.rstrip("\n") for line in deque(stream, maxlen=lines)]


def cancel_remote(job_id: str, token: str | None, *, namespace: str | None = None, endpoint: str | None = None) -> None:
    """Ask Hugging Face Jobs to stop the job (its stage becomes CANCELED)."""
    api = _api(token, endpoint)
    with _hub_errors("cancel the Hugging Face job", api, job_id):
        api.cancel_job(job_id=job_id, namespace=namespace)
