"""An environment for one job (or one dry run): start the built-in server if it is one, describe it, check it can
hold the job's concurrent episodes, and hand back the class for TRL's ``environment_factory``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from backend.core.hub_names import BUILTIN_PREFIX
from backend.core.spec import EnvironmentSpec, JobSpec
from backend.environments.adapter import OpenEnvEpisode, environment_class
from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS, BuiltinEnvironment
from backend.environments.connection import resolve_url, time_budget
from backend.environments.discovery import EnvironmentInfo, check_sessions, describe

log = logging.getLogger("studio.environments")

# Episodes whose model turns and tool results are typically this long, for environments that do not say.
REMOTE_TOKENS_PER_TURN = 64
# Opening a remote environment while someone waits (dry run, chat tool run, arena): all its calls together.
INTERACTIVE_BUDGET_S = 15.0


@dataclass
class ActiveEnvironment:
    """The environment a job trains against: its description, episode class, and the built-in server if any."""

    info: EnvironmentInfo
    factory: type[OpenEnvEpisode]
    builtin: BuiltinEnvironment | None
    server_pid: int | None = None  # the built-in server this job started

    @property
    def url(self) -> str:
        """The environment server's URL."""
        return self.info.url


def builtin_of(spec: EnvironmentSpec) -> BuiltinEnvironment | None:
    """The built-in environment a spec names (``builtin:<name>``), or None for a remote one."""
    if spec.name and spec.name.startswith(BUILTIN_PREFIX):
        return BUILTIN_ENVIRONMENTS[spec.name.removeprefix(BUILTIN_PREFIX)]
    return None


def display_name(spec: EnvironmentSpec) -> str:
    """``builtin:echo`` -> ``echo``; ``openenv/echo_env`` -> ``echo_env``; a URL -> its host and path."""
    name = spec.name or ""
    if name.startswith(BUILTIN_PREFIX):
        return name.removeprefix(BUILTIN_PREFIX)
    if "://" in name:
        return name.split("://", 1)[1].rstrip("/")
    return name.split("/")[-1]


def reward_name(spec: EnvironmentSpec, info: EnvironmentInfo) -> str:
    """What the environment's class, and so TRL's ``rewards/<Env>/mean`` metric, is named after: the built-in or
    Space name, or for a URL the name the server gives itself (a host and port make no metric name)."""
    if "://" in (spec.name or "") and info.name and info.name.lower() not in ("environment", "env"):
        return info.name
    return display_name(spec)


def concurrent_episodes(spec: JobSpec) -> int:
    """Episodes TRL runs at once: one per rollout of a generation batch (batch x grad accumulation, one process)."""
    return spec.training.batch_or(spec.rollout.num_generations) * spec.training.gradient_accumulation_steps


def typical_episode_tokens(spec: JobSpec) -> int:
    """About how many tokens one episode takes, for the memory estimate."""
    builtin = builtin_of(spec.environment)
    if builtin is not None:
        return builtin.typical_episode_tokens
    return REMOTE_TOKENS_PER_TURN * min(spec.environment.max_tool_calling_iterations, 4)


@contextmanager
def open_environment(
    spec: JobSpec, *, sessions: int | None = None, budget_s: float | None = None
) -> Iterator[ActiveEnvironment]:
    """The job's environment, ready for ``environment_factory``; a built-in server is stopped on the way out.
    ``budget_s`` bounds describing a remote server and checking its sessions, all calls together (someone waits on
    a dry run, a chat tool run or the arena: :data:`INTERACTIVE_BUDGET_S`)."""
    env_spec = spec.environment
    if not env_spec.name:
        raise ValueError("the job names no environment")
    needed = sessions if sessions is not None else concurrent_episodes(spec)
    builtin = builtin_of(env_spec)
    server = factory = None
    try:
        if builtin is not None:
            from backend.environments.launcher import start_builtin

            server = start_builtin(builtin.name, max_sessions=max(64, needed + 2))
            url = server.url
            log.info(
                "started built-in environment %s at %s (pid %d, under %s)",
                builtin.name,
                url,
                server.pid,
                server.process.args[0],
            )
        else:
            url = resolve_url(env_spec.name)
        with time_budget(budget_s) if budget_s is not None and builtin is None else contextlib.nullcontext():
            info = describe(url, timeout_s=min(env_spec.timeout_s, 30.0))
            check_sessions(
                url, needed, timeout_s=min(env_spec.timeout_s, 30.0), least=min(needed, spec.rollout.num_generations)
            )
        log.info("environment: %s; %d concurrent sessions available", info.summary(), needed)
        factory = environment_class(
            info,
            reward_mode=spec.environment.reward,  # not env_spec.reward: that reads as the method's part
            timeout_s=env_spec.timeout_s,
            name=reward_name(env_spec, info),
            observation_template=env_spec.observation_template,
        )
        yield ActiveEnvironment(info=info, factory=factory, builtin=builtin, server_pid=server.pid if server else None)
    finally:
        if factory is not None:
            factory._close_all()  # explicitly, now: never left to interpreter shutdown (see _close_all)
        if server is not None:
            server.stop()
