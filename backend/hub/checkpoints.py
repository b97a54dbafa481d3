"""Checkpoints on the Hub: a long job pushes each one as it is saved (``output.push_checkpoints``), and a job on
another machine continues from the last one pushed (``training.resume_from_hub``).

Transformers does the pushing (``hub_strategy="checkpoint"``: every saved checkpoint goes to the repo's
``last-checkpoint/`` folder, in the background while training goes on). The repo is the adapter push's
(``output.hub_repo_id``, else the run's default name under the token's account), private unless ``output.private`` is
off. The token is the one the scheduler hands the worker in ``HF_TOKEN``; it is not put in the TrainingArguments,
which Transformers pickles into every checkpoint (``training_args.bin``) and pushes with it: the Hub client reads it
from the environment. A push that fails is logged and recorded (``hub_checkpoint_error``), never a failed job, and
the studio's own end-of-run push (``output.push_to_hub``: adapter, card and records) stays the studio's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import traceback
from pathlib import Path

from backend.core.artifacts import HubCheckpoint
from backend.core.hub_names import client_offline, hub_endpoint
from backend.core.spec import JobSpec, SpecError
from backend.jobs.reporter import JobReporter

log = logging.getLogger("studio.checkpoints")

CHECKPOINT_FOLDER = "last-checkpoint"  # where Transformers pushes with hub_strategy="checkpoint"
# Under the job's output dir while downloading; the leading "_" keeps it out of Transformers' uploads of that folder.
DOWNLOAD_PREFIX = "_from_hub"
NO_TOKEN = "no Hugging Face token: sign in, or set HF_TOKEN to a token with write access"


def wants_hub_token(spec: JobSpec) -> bool:
    """Whether the job's worker needs the user's Hub token: it pushes (adapter or checkpoints) or resumes from one."""
    return spec.output.push_to_hub or spec.output.push_checkpoints or spec.training.resume_from_hub is not None


def without_checkpoint_push(spec: JobSpec) -> JobSpec:
    """The spec as a worker that cannot push runs it: checkpoints kept on this machine only."""
    return spec.model_copy(update={"output": spec.output.model_copy(update={"push_checkpoints": False})})


# --- before the job is queued -----------------------------------------------------------------------------------


def hub_token_warnings(spec: JobSpec, token: str | None) -> list[str]:
    """Pre-flight warnings for a job whose worker will have no Hub token (local use without HF_TOKEN)."""
    if token and token.strip():
        return []
    warnings = []
    if spec.output.push_to_hub:
        warnings.append(
            "output.push_to_hub: there is no Hugging Face token, so the adapter cannot be pushed when the job ends "
            "(it is kept on this machine only); sign in, or set HF_TOKEN before starting the app"
        )
    if spec.output.push_checkpoints:
        warnings.append(
            "output.push_checkpoints: there is no Hugging Face token, so the repo cannot be created or written "
            "(nor its default name, under your account, worked out): the job trains and keeps its checkpoints on "
            "this machine only; sign in, or set HF_TOKEN before starting the app"
        )
    if spec.training.resume_from_hub is not None:
        warnings.append(
            f"training.resume_from_hub: there is no Hugging Face token, so {spec.training.resume_from_hub} can only "
            "be read if it is public (pushed checkpoints are private by default); sign in, or set HF_TOKEN before "
            "starting the app"
        )
    return warnings


# --- while the job trains -----------------------------------------------------------------------------------------


def push_refusal(token: str | None) -> str | None:
    """Why this worker cannot push checkpoints at all (no token, the Hub client offline), or None."""
    if not token or not token.strip():
        return f"{NO_TOKEN}; the checkpoints are kept on this machine only"
    if client_offline():
        return (
            "the Hub is not reachable: offline mode is on (HF_HUB_OFFLINE); the checkpoints are kept on this "
            "machine only"
        )
    return None


def repo_creation_failed(exc: BaseException) -> bool:
    """Whether building a trainer failed where Transformers creates the repo to push to (``Trainer.init_hf_repo``)."""
    return any(frame.name == "init_hf_repo" for frame in traceback.extract_tb(exc.__traceback__))


def describe_checkpoint_failure(
    exc: BaseException, repo_id: str, output_dir: Path, step: int | None = None, token: str | None = None
) -> str:
    """One sentence for a checkpoint push that failed, naming what to do; the token, if it appears, is scrubbed."""
    from backend.hub.publish import describe_push_failure

    namespace = repo_id.split("/")[0] if "/" in repo_id else "your account"
    reason = describe_push_failure(
        exc, repo_id, namespace, output_dir, hub_endpoint(), kept=f"the checkpoints are kept in {output_dir}"
    )
    what = f"the checkpoint of step {step}" if step is not None else "checkpoints"
    sentence = f"{what} could not be pushed to {repo_id}: {reason}; the job goes on without it"
    return sentence.replace(token, "<token>") if token else sentence


def record_push_target(store: JobReporter, job_id: str, repo_id: str, private: bool) -> None:
    """Say where the checkpoints go, before the first one is pushed."""
    store.merge_artifacts(job_id, hub_checkpoint=_checkpoint(repo_id, None, private))
    log.info("pushing each checkpoint to %s/%s as it is saved", repo_id, CHECKPOINT_FOLDER)


def record_pushed(store: JobReporter, job_id: str, repo_id: str, step: int, private: bool) -> None:
    """A checkpoint that reached the Hub: its step becomes the job's ``hub_checkpoint``."""
    store.merge_artifacts(job_id, hub_checkpoint=_checkpoint(repo_id, step, private), hub_checkpoint_error=None)
    log.info("pushed the checkpoint of step %d to %s/%s", step, repo_id, CHECKPOINT_FOLDER)


def record_push_failure(store: JobReporter, job_id: str, sentence: str) -> None:
    """A checkpoint push that failed: logged and kept as ``hub_checkpoint_error``; the job goes on."""
    store.merge_artifacts(job_id, hub_checkpoint_error=sentence)
    log.warning("checkpoint push failed: %s", sentence)


def _checkpoint(repo_id: str, step: int | None, private: bool | None) -> HubCheckpoint:
    url = f"{hub_endpoint()}/{repo_id}/tree/main/{CHECKPOINT_FOLDER}"
    return HubCheckpoint(repo_id=repo_id, step=step, url=url, private=private, at=time.time())


# --- a job that starts from a pushed checkpoint ---------------------------------------------------------------------


def fetch_checkpoint(repo_id: str, output_dir: Path, token: str | None) -> Path:
    """Download ``repo_id``'s ``last-checkpoint/`` into ``output_dir`` as ``checkpoint-N`` (N: its global step) and
    return that folder; SpecError with one sentence when it cannot.

    The folder appears whole or not at all (downloaded beside it, then renamed), so a checkpoint that is there is
    complete, also for the other processes of a multi-GPU job doing the same.
    """
    import httpx2
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"training.resume_from_hub: {repo_id}"
    if client_offline():
        raise SpecError([f"{where}: the Hub is not reachable: offline mode is on (HF_HUB_OFFLINE)"])
    scratch = output_dir / f"{DOWNLOAD_PREFIX}-{os.getpid()}"
    try:
        snapshot_download(
            repo_id,
            repo_type="model",
            allow_patterns=f"{CHECKPOINT_FOLDER}/*",
            local_dir=scratch,
            token=token or None,
            endpoint=hub_endpoint(),
        )
        state = scratch / CHECKPOINT_FOLDER / "trainer_state.json"
        if not state.is_file():
            raise SpecError(
                [
                    f"{where} has no {CHECKPOINT_FOLDER}/ folder with a trainer_state.json: push checkpoints there "
                    "first (output.push_checkpoints), or check the repo id"
                ]
            )
        try:
            step = int(json.loads(state.read_text())["global_step"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecError(
                [f"{where}: its {CHECKPOINT_FOLDER}/trainer_state.json has no global_step ({exc})"]
            ) from None
        target = output_dir / f"checkpoint-{step}"
        try:
            (scratch / CHECKPOINT_FOLDER).rename(target)
        except OSError:
            if not (target / "trainer_state.json").is_file():  # else another process of this job got there first
                raise
        return target
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise SpecError(
            [
                f"{where} was not found, or the token cannot read it (pushed checkpoints are private): check the "
                "id, and sign in with (or set HF_TOKEN to) the account that pushed them"
            ]
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        raise SpecError([f"{where}: the Hub refused the download (HTTP {status}); try again later"]) from None
    except (LocalEntryNotFoundError, httpx2.TransportError) as exc:  # the client's words for a Hub it cannot reach
        cause = exc.__cause__ or exc
        raise SpecError(
            [f"{where}: the Hub is not reachable ({type(cause).__name__}) at {hub_endpoint()}; try again later"]
        ) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
