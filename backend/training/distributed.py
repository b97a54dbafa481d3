"""A worker that is one rank of several: its place in torch.distributed, its share of the batch, the stop every
rank agrees on, and what rank 0 records of the run.

Decided once for every method: the same spec means the same training, so with N processes the global batch
(``batch_size x gradient_accumulation_steps``) stays what the spec says and each process takes 1/N of it (the
per-process batch divided when it can be, else the accumulation). Pre-flight refuses a global batch that N processes
cannot share evenly.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal

from backend.core.artifacts import DistributedRun
from backend.core.spec import JobSpec

log = logging.getLogger("studio.worker")

PR_SET_PDEATHSIG = 1


def launched_as_rank() -> bool:
    """Whether this process is one rank of ``accelerate launch`` (torchrun sets LOCAL_RANK)."""
    return "LOCAL_RANK" in os.environ


def main_rank() -> bool:
    """Whether this process is rank 0 (or the only process): the one that writes the job's files and store."""
    return int(os.environ.get("RANK", "0")) == 0


def die_with_launcher() -> None:
    """Ask Linux to SIGKILL this rank when its launcher dies: torchrun starts each rank in a session of its own,
    out of reach of the scheduler's kill of the launcher's process group, so a killed launcher would leave its ranks
    training as orphans."""
    if not launched_as_rank():
        return
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the launcher's own SIGTERM handling stops the ranks
        return
    if os.getppid() != parent:  # the launcher died before the request took: nobody would signal us
        os._exit(1)


def world() -> tuple[int, int, str | None]:
    """(rank, world size, backend) of the initialised process group, else (0, 1, None)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    return 0, 1, None


def per_process_spec(spec: JobSpec, processes: int) -> JobSpec:
    """The spec one of ``processes`` ranks trains: the same global batch, 1/N of it per process (a batch left to
    auto-tune is per process already). The spec as it is for one process, or when N does not divide it (pre-flight
    refused that; a stored job from before keeps its batch per process)."""
    t = spec.training
    if processes <= 1 or t.batch_size == "auto":
        return spec
    if t.batch_size % processes == 0:
        update = {"batch_size": t.batch_size // processes}
    elif t.gradient_accumulation_steps % processes == 0:
        update = {"gradient_accumulation_steps": t.gradient_accumulation_steps // processes}
    else:
        return spec
    return spec.model_copy(update={"training": t.model_copy(update=update)})


def whole_spec(spec: JobSpec, processes: int) -> JobSpec:
    """A process's spec as a spec for all ``processes`` again (the batch times N), so that submitting it anew (the
    job folder's spec.json) trains the same: :func:`per_process_spec` of it is ``spec``'s training once more."""
    t = spec.training
    if processes <= 1 or t.batch_size == "auto":
        return spec
    return spec.model_copy(update={"training": t.model_copy(update={"batch_size": t.batch_size * processes})})


def batch_split_problem(spec: JobSpec) -> str | None:
    """Why ``training.num_processes`` cannot share the spec's global batch evenly (a sentence), or None."""
    t = spec.training
    n = t.num_processes
    if n <= 1 or t.batch_size == "auto" or per_process_spec(spec, n) is not spec:
        return None
    return (
        f"training.num_processes: {n} processes share each step's batch (training.batch_size {t.batch_size} x "
        f"gradient_accumulation_steps {t.gradient_accumulation_steps}) evenly; make the batch size or the "
        f"accumulation a multiple of {n}"
    )


def run_record(spec: JobSpec, on_gpu: bool) -> DistributedRun | None:
    """What rank 0 records of a run of several processes, from torch.distributed's own state (None: one process)."""
    from backend.jobs.multiprocess import launch_flags

    _, size, backend = world()
    if size <= 1 or backend is None:
        return None
    t = spec.training
    strategy = t.distributed if on_gpu else "ddp"
    flags = " ".join(launch_flags(size, strategy, on_gpu))
    env = "" if on_gpu else "ACCELERATE_USE_CPU=1 "
    per_process = t.batch_or(0) or None
    return DistributedRun(
        processes=size,
        backend=backend,
        strategy=strategy,
        launch=f"{env}accelerate launch {flags} --module backend.worker",
        per_process_batch=per_process,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        global_batch=per_process * t.gradient_accumulation_steps * size if per_process else None,
    )


def agree_to_stop(stop: bool) -> bool:
    """True on every rank when any rank wants to stop (a cancel seen, SIGTERM), so all leave the training loop at
    the same step instead of one waiting in a collective for a peer that left; ``stop`` itself in one process."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return stop
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([1 if stop else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def lost_a_peer(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective that failed because another rank is gone: the launcher's summary names that
    rank (the scheduler records it), so this rank's own error is not the job's story."""
    import torch.distributed as dist

    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc)
    return any(
        mark in text
        for mark in ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL", "[gloo")
    )
