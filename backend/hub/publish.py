"""Pushes a finished job's adapter to the Hugging Face Hub in one commit, with a model card and the run's records.

The token is used for the HTTP calls only: it is never written to the store, the job folder, the uploaded files
or a log line, and error messages are scrubbed of it. A failed push leaves the adapter on disk untouched and
records one sentence per cause in the job's artifacts (``hub_error``); a successful one records ``hub``.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.artifacts import GgufExport, HubPush
from backend.core.hub_names import (
    HUB_REPO_ID_RULE,
    client_offline,
    hub_endpoint,
    hub_model_id,
    is_namespaced_repo_id,
    run_repo_name,
)
from backend.core.paths import DataPaths
from backend.core.spec import JobSpec, quote_input
from backend.core.uploads import dataset_file_name
from backend.hub.gguf_card import build_gguf_card
from backend.hub.model_card import PLOT_FILENAME, build_merged_card, build_model_card, draw_training_curves
from backend.hub.trl_cli import trl_cli_yaml
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.store import JobStore
from backend.jobs.store_errors import JobNotFound

if TYPE_CHECKING:
    from huggingface_hub import HfApi, ModelCard

log = logging.getLogger("studio.publish")

# Files of the saved adapter folder that are not uploaded: PEFT's generic card (README.md is ours) and the
# pickled TrainingArguments (training_config.yaml and spec.json say the same in plain text).
SKIPPED_ADAPTER_FILES = frozenset({"README.md", "training_args.bin"})


class PushError(RuntimeError):
    """A push that did not happen, with one sentence saying why and what to do."""


@dataclass(frozen=True)
class PushResult:
    """A finished push: the Hub repo, its URL, the commit's URL and the files sent."""

    repo_id: str
    url: str
    commit_url: str
    files: list[str]


def default_repo_name(job: JobRecord) -> str:
    """The repo name a job's adapter gets when none is given: its run name, else method and job id."""
    return repo_name_for(job.spec, job.id)


def repo_name_for(spec: JobSpec, job_id: str) -> str:
    """:func:`default_repo_name` from the spec and the job id (the worker's checkpoints go to the same repo)."""
    return run_repo_name(spec.output.run_name, spec.method.value, job_id)


def _account(api: HfApi) -> tuple[str, set[str], str | None]:
    """(user name, namespaces the token's account may write to, the token's role) from whoami."""
    info = api.whoami()
    name = info["name"]
    orgs = {org["name"] for org in info.get("orgs", []) if org.get("name")}
    role = ((info.get("auth") or {}).get("accessToken") or {}).get("role")
    return name, {name, *orgs}, role


def writable_target(api: HfApi, target: str | None, default_name: str) -> str:
    """The repo to push to (``target``, else ``<the token's user>/<default_name>``), or PushError when the token
    cannot write there (read-only, or another namespace)."""
    user, writable, role = _account(api)
    target = target or f"{user}/{default_name}"
    namespace = target.split("/")[0]
    if role == "read":
        raise PushError(f"the token cannot write to {namespace}: it needs write access (this one is read-only)")
    if namespace not in writable:
        raise PushError(
            f"the repo {target} is under {namespace}, which {user} cannot write to: "
            f"push to {user}/{target.split('/', 1)[1]} or one of your organisations"
        )
    return target


def _dataset_label(spec: JobSpec) -> str:
    """The dataset as the commit names it: a local file by its name only, not its path on this machine."""
    return dataset_file_name(spec.dataset) if spec.dataset.source in ("file", "upload") else spec.dataset.name


def _metrics_jsonl(metrics: list[dict[str, Any]]) -> bytes:
    rows = [{k: v for k, v in row.items() if k != "id"} for row in metrics]  # the store's row id means nothing there
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _base_license(api: HfApi, job: JobRecord) -> str | None:
    """The base model's license from its card; None when it is not a Hub model or the lookup fails."""
    base = hub_model_id(job.spec.model.name_or_path)
    if base is None:
        return None
    try:
        card_data = api.model_info(base, revision=job.spec.model.revision).card_data
    except Exception as exc:  # noqa: BLE001 - a license is a nicety; a failed lookup must not stop the push
        log.info("no license for %s (%s)", base, type(exc).__name__)
        return None
    license_ = getattr(card_data, "license", None) if card_data is not None else None
    return license_ if isinstance(license_, str) and license_ else None


def describe_push_failure(
    exc: BaseException, repo_id: str, namespace: str, adapter_dir: Path, endpoint: str, kept: str | None = None
) -> str:
    """One sentence for a failed Hub call, naming what to do; ``kept`` says what stays on disk (default: the
    adapter, at ``adapter_dir``)."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    kept = kept or f"the adapter is kept at {adapter_dir}; retry later"
    if isinstance(exc, OfflineModeIsEnabled):
        return f"the Hub is not reachable: offline mode is on (HF_HUB_OFFLINE); {kept}"
    if isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError)):
        return f"the Hub is not reachable: {endpoint} did not answer ({type(exc).__name__}); {kept}"
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            return (
                f"the token cannot write to {namespace}: the Hub did not accept it (401, invalid or expired); "
                "sign in again or set HF_TOKEN to a token with write access"
            )
        if status == 403:
            return (
                f"the token cannot write to {namespace}: it needs write access (a write token, or a "
                f"fine-grained one allowed to write to {namespace})"
            )
        if status == 409:
            return (
                f"the repo {repo_id} exists and the Hub refused to write to it (409 conflict): it may belong to "
                "someone else or another push is under way; choose another hub_repo_id or retry"
            )
        if status == 404:
            return f"the repo {repo_id} was not found (404): check the name and that the token can see it"
        if status is not None and status >= 500:
            return f"the Hub failed (HTTP {status}); {kept}"
        first_line = (str(exc).strip().splitlines() or [""])[0]
        return f"the Hub refused the push (HTTP {status}: {first_line})"
    if isinstance(exc, ValueError) and "README.md" in str(exc):
        return f"the Hub refused the model card's metadata: {' '.join(str(exc).split())}"
    return f"the push failed ({type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]})"


def _scrub(text: str, token: str | None) -> str:
    return text.replace(token, "<token>") if token else text


def _fail(store: JobStore, job: JobRecord, message: str, token: str | None) -> PushError:
    message = _scrub(message, token)
    store.merge_artifacts(job.id, hub_error=message)
    log.warning("push of job %s failed: %s", job.id, message)
    return PushError(message)


def _operations(files: dict[str, bytes], adapter_dir: Path) -> list:
    """One commit's additions: the adapter folder's files, then the generated ones (the card replaces PEFT's)."""
    from huggingface_hub import CommitOperationAdd

    operations = [
        CommitOperationAdd(path_in_repo=child.name, path_or_fileobj=str(child))
        for child in sorted(adapter_dir.iterdir())
        if child.is_file() and child.name not in SKIPPED_ADAPTER_FILES and child.name not in files
    ]
    operations += [CommitOperationAdd(path_in_repo=name, path_or_fileobj=content) for name, content in files.items()]
    return operations


def push_job(
    job: JobRecord,
    paths: DataPaths,
    store: JobStore,
    token: str | None,
    *,
    repo_id: str | None = None,
    private: bool | None = None,
    endpoint: str | None = None,
) -> PushResult:
    """Create the repo (private unless told otherwise) and upload the job in one commit; raise PushError if not.

    ``repo_id`` defaults to the spec's ``output.hub_repo_id``, else ``<your user>/<run name or method-job id>``;
    ``private`` to the spec's ``output.private``; ``endpoint`` to ``$HF_ENDPOINT`` or the public Hub.
    """
    from huggingface_hub import HfApi

    job = store.get(job.id)  # the latest artifacts (evaluation, environment results)
    spec = job.spec
    adapter_dir = Path(job.artifacts.adapter_dir or paths.job_adapter(job.id))
    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    target = repo_id or spec.output.hub_repo_id
    namespace = target.split("/")[0] if target and "/" in target else "your account"
    if job.status is not JobStatus.succeeded or not adapter_dir.is_dir():
        raise _fail(store, job, f"job {job.id} is {job.status.value} and has no saved adapter to push", token)
    if not token or not token.strip():
        raise _fail(store, job, "no Hugging Face token: sign in, or set HF_TOKEN to a token with write access", token)
    if target and not is_namespaced_repo_id(target):
        raise _fail(store, job, f"the hub repo id {quote_input(target)} must look like {HUB_REPO_ID_RULE}", token)
    if client_offline():
        raise _fail(
            store,
            job,
            "the Hub is not reachable: offline mode is on (HF_HUB_OFFLINE); the adapter is kept "
            f"at {adapter_dir}; retry later",
            token,
        )

    api = HfApi(endpoint=endpoint, token=token, library_name="post-training-studio")
    try:
        try:
            target = writable_target(api, target, default_repo_name(job))
        except PushError as exc:
            raise _fail(store, job, str(exc), token) from None
        namespace = target.split("/")[0]
        private = spec.output.private if private is None else private
        api.create_repo(target, private=private, exist_ok=True, repo_type="model")
        metrics = store.metrics(job.id)
        parent = None
        if spec.model.parent_job_id:
            try:
                parent = store.get(spec.model.parent_job_id)
            except JobNotFound:  # a deleted parent only loses the card's lineage details
                parent = None
        files: dict[str, bytes] = {
            "training_config.yaml": trl_cli_yaml(spec, output_dir=target.split("/")[-1]).encode(),
            "spec.json": spec.model_dump_json(indent=2).encode(),
            "metrics.jsonl": _metrics_jsonl(metrics),
            "final_metrics.json": json.dumps(job.artifacts.final_metrics or {}, indent=2).encode(),
        }
        for name, result in (
            ("evaluation", job.artifacts.evaluation),
            ("environment_evaluation", job.artifacts.environment_evaluation),
            ("benchmarks", job.artifacts.benchmarks.model_dump(mode="json") if job.artifacts.benchmarks else None),
        ):
            if result:
                files[f"{name}.json"] = json.dumps(result, indent=2).encode()
        with tempfile.TemporaryDirectory(prefix="studio-push-") as scratch:
            plot = draw_training_curves(metrics, spec.method, Path(scratch) / PLOT_FILENAME)
            if plot is not None:
                files[PLOT_FILENAME] = plot.read_bytes()
            card = build_model_card(job, metrics, _base_license(api, job), plot, repo_id=target, parent=parent)
            files["README.md"] = str(card).encode()
            operations = _operations(files, adapter_dir)
            commit = api.create_commit(
                target,
                operations,
                repo_type="model",
                commit_message=f"{spec.method.value.upper()} adapter from Post-Training Studio job {job.id}",
                commit_description=f"Base model: {spec.model.name_or_path}. Dataset: {_dataset_label(spec)}.",
            )
    except PushError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes one recorded sentence
        raise _fail(
            store, job, describe_push_failure(exc, target or "?", namespace, adapter_dir, endpoint), token
        ) from exc

    uploaded = sorted(op.path_in_repo for op in operations)
    url = f"{endpoint}/{target}"
    store.merge_artifacts(
        job.id,
        hub_error=None,
        hub=HubPush(repo_id=target, url=url, commit=commit.commit_url, private=private, pushed_at=time.time()),
    )
    log.info("pushed job %s to %s (%d files)", job.id, url, len(uploaded))
    return PushResult(repo_id=target, url=url, commit_url=commit.commit_url, files=uploaded)


def _push_export(
    job: JobRecord,
    folder: Path,
    token: str | None,
    *,
    what: str,
    default_name: str,
    card: Callable[[HfApi, str], ModelCard | None],
    commit_message: str,
    commit_description: str,
    repo_id: str | None,
    private: bool,
    endpoint: str | None,
) -> PushResult:
    """Push an export folder as a model repository in one commit, its README.md the card ``card(api, repo)`` builds
    (the folder's own when None); PushError with a sentence if not."""
    from huggingface_hub import CommitOperationAdd, HfApi

    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    kept = f"the {what} is kept at {folder}; retry later"
    namespace = repo_id.split("/")[0] if repo_id and "/" in repo_id else "your account"
    if not token or not token.strip():
        raise PushError("no Hugging Face token: sign in, or set HF_TOKEN to a token with write access")
    if repo_id and not is_namespaced_repo_id(repo_id):
        raise PushError(f"the hub repo id {quote_input(repo_id)} must look like {HUB_REPO_ID_RULE}")
    if client_offline():
        raise PushError(f"the Hub is not reachable: offline mode is on (HF_HUB_OFFLINE); {kept}")
    api = HfApi(endpoint=endpoint, token=token, library_name="post-training-studio")
    target = repo_id
    try:
        target = writable_target(api, repo_id, default_name)
        namespace = target.split("/")[0]
        api.create_repo(target, private=private, exist_ok=True, repo_type="model")
        readme = card(api, target)
        operations = [
            CommitOperationAdd(path_in_repo=child.name, path_or_fileobj=str(child))
            for child in sorted(folder.iterdir())
            if child.is_file() and not (readme is not None and child.name == "README.md")
        ]
        if readme is not None:
            operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=str(readme).encode()))
        commit = api.create_commit(
            target,
            operations,
            repo_type="model",
            commit_message=commit_message,
            commit_description=commit_description,
        )
    except PushError as exc:
        raise PushError(_scrub(str(exc), token)) from None
    except Exception as exc:  # noqa: BLE001 - every failure becomes one sentence
        message = describe_push_failure(exc, target or "?", namespace, folder, endpoint, kept=kept)
        raise PushError(_scrub(message, token)) from exc
    log.info("pushed the %s of job %s to %s", what, job.id, target)
    return PushResult(
        repo_id=target,
        url=f"{endpoint}/{target}",
        commit_url=commit.commit_url,
        files=sorted(op.path_in_repo for op in operations),
    )


def push_merged(
    job: JobRecord,
    folder: Path,
    token: str | None,
    *,
    dtype: str,
    dequantized: bool,
    repo_id: str | None = None,
    private: bool = True,
    endpoint: str | None = None,
) -> PushResult:
    """Push a merged export (``folder``) as a model repository in one commit, its card naming the repo; PushError
    with a sentence if not. ``repo_id`` defaults to ``<your user>/<run name or method-job id>-merged``."""
    return _push_export(
        job,
        folder,
        token,
        what="merged model",
        default_name=f"{default_repo_name(job)}-merged",
        card=lambda api, target: build_merged_card(job, target, dtype, dequantized, _base_license(api, job)),
        commit_message=f"Merged model from Post-Training Studio job {job.id}",
        commit_description=f"Base model: {job.spec.model.name_or_path}, merged in {dtype}.",
        repo_id=repo_id,
        private=private,
        endpoint=endpoint,
    )


def push_gguf(
    job: JobRecord,
    folder: Path,
    token: str | None,
    repo_id: str | None = None,
    private: bool = True,
    *,
    export: GgufExport | None = None,
    endpoint: str | None = None,
) -> PushResult:
    """Push a GGUF export (``folder``: the .gguf file, its Modelfile and card) as a model repository in one commit,
    the card rebuilt to name the repo (from ``export``, else the job's ``gguf`` artifact); PushError with a sentence
    if not. ``repo_id`` defaults to ``<your user>/<run name or method-job id>-GGUF``."""
    record = export or job.artifacts.gguf
    return _push_export(
        job,
        folder,
        token,
        what="GGUF export",
        default_name=f"{default_repo_name(job)}-GGUF",
        card=lambda api, target: (
            build_gguf_card(job, record, target, _base_license(api, job)) if record is not None else None
        ),
        commit_message=f"GGUF from Post-Training Studio job {job.id}",
        commit_description=f"Base model: {job.spec.model.name_or_path}"
        + (f", {record.gguf_type}." if record is not None else "."),
        repo_id=repo_id,
        private=private,
        endpoint=endpoint,
    )
