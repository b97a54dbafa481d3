"""How many training processes one job may start here: processes are a resource like memory and queue places.

Two ceilings, the lower one applies:

- the machine's: without a GPU each process is a CPU process (DDP over gloo), and more of them than the cores the
  studio may use only fight over those cores (``usable_cores``: the CPU affinity, less a container's CPU quota);
  everyone is held to it, the CLI and an admin included. With GPUs the GPU count is the rule (``process_problems``).
- the Space's: on a Space each signed-in user who is not an admin may start at most ``STUDIO_MAX_PROCESSES_PER_JOB``
  processes per job (default 1: a shared Space is shared). The owner raises it for a Space of their own hardware.
"""

from __future__ import annotations

from backend.core.paths import on_space
from backend.core.spec import JobSpec
from backend.core.users import User
from backend.platform import hardware
from backend.platform.limits import int_setting

SPACE_SETTING = "STUDIO_MAX_PROCESSES_PER_JOB"
DEFAULT_SPACE_PROCESSES = 1


def space_process_limit(user: User | None) -> int | None:
    """The most processes ``user``'s job may start on this Space, or None where no such limit holds: off a Space, for a
    trusted caller (``user=None``: the CLI, a script) and for an admin.

    >>> space_process_limit(None) is None
    True
    """
    if user is None or user.is_admin or not on_space():
        return None
    return int_setting(SPACE_SETTING, DEFAULT_SPACE_PROCESSES, low=1, high=64)


def process_ceiling_problems(spec: JobSpec, user: User | None = None) -> list[str]:
    """Why ``spec``'s ``training.num_processes`` is more than this machine (no GPU: its cores) or, for ``user``, this
    Space allows (one sentence, naming the lower ceiling), or nothing. Cheap: no torch, no model, no data."""
    asked = spec.training.num_processes
    if asked <= 1:
        return []
    space = space_process_limit(user)
    cores = hardware.usable_cores() if hardware.gpu_count_without_torch() == 0 else None
    if space is not None and asked > space and (cores is None or space <= cores):
        return [
            f"training.num_processes: a job on this Space may start at most {space} training "
            f"{'process' if space == 1 else 'processes'} ({SPACE_SETTING} = {space}, set by the Space's owner) and "
            f"this one asks for {asked}; lower it to {space}, or duplicate the Space to run more"
        ]
    if cores is not None and asked > cores:
        return [
            f"training.num_processes: this machine has no GPU, so each of the {asked} processes would be a CPU "
            f"process, and the studio may use {cores} {'core' if cores == 1 else 'cores'} here; lower it to "
            f"{cores} or fewer, or send the job to a machine with GPUs"
        ]
    return []
