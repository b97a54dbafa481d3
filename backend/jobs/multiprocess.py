"""How a job of several training processes is launched (``accelerate launch``) and how the death of one of its
ranks is put in a sentence.

A job with ``training.num_processes`` above 1 runs ``python -m accelerate.commands.launch ... --module
backend.worker``: accelerate's launcher (torchrun's agent, in-process) starts one worker per rank, each in a process
session of its own. On GPUs DDP is ``--multi_gpu`` (NCCL) and FSDP2 / ZeRO take the accelerate config TRL ships
(``trl/accelerate_configs``); without a GPU the ranks are CPU processes and DDP runs over gloo, which accelerate
picks when ``ACCELERATE_USE_CPU`` is set (its ``--cpu`` flag would start a single process).
"""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from backend.core.paths import DataPaths
from backend.jobs.launchers import WORKER_MODULE

LAUNCH_MODULE = "accelerate.commands.launch"
# training.distributed -> the accelerate config file TRL ships for it (DDP needs none: --multi_gpu says it).
TRL_ACCELERATE_CONFIGS = {"fsdp2": "fsdp2.yaml", "zero2": "zero2.yaml", "zero3": "zero3.yaml"}
GPU_ONLY_STRATEGIES = tuple(TRL_ACCELERATE_CONFIGS)


@dataclass(frozen=True)
class LaunchPlan:
    """What the scheduler starts for one job: a module, its arguments, and variables added to its environment."""

    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def command_line(self) -> str:
        """The plan as a shell line a person can read (``accelerate launch ...``), for logs, cards and exports."""
        head = "accelerate launch" if self.module == LAUNCH_MODULE else f"python -m {self.module}"
        env = " ".join(f"{k}={v}" for k, v in sorted(self.env.items()))
        return " ".join(part for part in (env, head, *self.args) if part)


def launch_flags(processes: int, strategy: str, on_gpu: bool, config_file: str | None = None) -> list[str]:
    """accelerate launch's flags for ``processes`` ranks with ``strategy`` (before ``--module``); ``config_file``:
    TRL's accelerate config for FSDP2 / ZeRO (``trl_config_file``)."""
    flags = ["--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no"]
    if strategy in GPU_ONLY_STRATEGIES and on_gpu:
        return ["--config_file", config_file or TRL_ACCELERATE_CONFIGS[strategy], *flags]
    return ["--multi_gpu", *flags]  # DDP: torchrun's launcher; on a CPU with ACCELERATE_USE_CPU, over gloo


def launch_plan(
    job_id: str,
    paths: DataPaths,
    processes: int = 1,
    strategy: str = "ddp",
    on_gpu: bool = True,
    *,
    port: int | None = None,
    config_file: str | None = None,
) -> LaunchPlan:
    """The worker itself for one process; else ``accelerate launch`` of ``processes`` workers. Either runs under the
    trainer's interpreter, and accelerate starts its ranks with its own ``sys.executable``, so every rank trains in
    the trainer's environment. ``port``: the ranks' rendezvous port (a free one when None, so two studios on one
    machine never meet on accelerate's default 29500)."""
    args = ["--job-id", job_id, "--data-dir", str(paths.root)]
    if processes <= 1:
        return LaunchPlan(WORKER_MODULE, args)
    flags = launch_flags(processes, strategy, on_gpu, config_file)
    flags += ["--main_process_port", str(port if port is not None else free_port())]
    env = {} if on_gpu else {"ACCELERATE_USE_CPU": "1"}
    return LaunchPlan(LAUNCH_MODULE, [*flags, "--module", WORKER_MODULE, *args], env)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def trl_config_file(strategy: str, python: str) -> str:
    """The path of TRL's accelerate config for ``strategy`` in the environment of ``python`` (the trainer's, which
    may not be this one); asked of that interpreter without importing TRL."""
    name = TRL_ACCELERATE_CONFIGS[strategy]
    code = "import importlib.util as u; print(u.find_spec('trl').submodule_search_locations[0])"
    found = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return str(Path(found.stdout.strip()) / "accelerate_configs" / name)


def installed_in(python: str, module: str) -> bool:
    """Whether ``module`` can be imported by ``python`` (the trainer's interpreter), asked without importing it."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0


# torchrun's failure summary (torch.distributed.elastic): one block per failed rank.
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def dead_rank_sentence(log_text: str, processes: int) -> str | None:
    """ "rank 1 of 2 died (...)": the rank whose end brought the job down, read from torchrun's failure summary in the
    job's log; None when the log has none.

    A rank that loses a peer fails itself with exit code 1 in a collective, so the culprit is a rank ended by a
    signal or another code first, then a rank other than 0 (rank 0 records its own failures before exiting)."""
    failures = [(int(rank), int(code)) for rank, code in _FAILURE.findall(log_text)]
    if not failures:
        return None
    rank, code = min(failures, key=lambda f: (f[1] == 1, f[0] == 0, f[0]))
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return f"rank {rank} of {processes} died ({how}); the launcher stopped the other ranks"
