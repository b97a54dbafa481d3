"""Checks run at submit time, before anything is queued: the model can be found and the data fits the method."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.hub_names import hub_offline, is_local_path
from backend.core.spec import JobSpec, ModelSpec, SpecError, quote_input, shorten
from backend.core.wording import counted
from backend.data.loading import AUTO_HOLDOUT_MIN_DATASET, JobData, holdout_size, load_job_data, split_holdout
from backend.methods.table import support
from backend.models.demo import ARITH_MODEL_ID, BUILTIN_MODELS, environment_recipe
from backend.platform.hub_status import HUB_UNREACHABLE, hub_reachable

if TYPE_CHECKING:
    from backend.training.autotune import Tuning


def check_model(model: ModelSpec) -> None:
    """SpecError unless the base model can be found: a saved local folder, the local cache, or the Hub."""
    name = model.name_or_path
    if name in BUILTIN_MODELS:
        return
    if is_local_path(name):
        path = Path(name).expanduser()
        if not path.is_dir():
            raise SpecError([f"model.name_or_path: folder {name} does not exist"])
        if not (path / "config.json").is_file():
            raise SpecError([f"model.name_or_path: {name} has no config.json; is it a saved transformers model?"])
        return
    if not hub_reachable():
        # Only the local cache can answer: asked without any network (and none of the client's ~23 s of retries).
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(name, "config.json", revision=model.revision), str):
            return
        raise SpecError(
            [
                f"model.name_or_path: {quote_input(name)} is not in the local cache and "
                f"{HUB_UNREACHABLE}{_offline_note()}; pick a local folder or {ARITH_MODEL_ID} (a "
                "built-in model that knows a little arithmetic), or try again once the Hub can be reached"
            ]
        )
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(name, revision=model.revision, trust_remote_code=model.trust_remote_code)
    except Exception as exc:  # transformers raises OSError/ValueError/HTTP errors for the same "not found"
        first = shorten(str(exc).strip().splitlines()[0], 200) if str(exc).strip() else type(exc).__name__
        raise SpecError(
            [f"model.name_or_path: {quote_input(name)} was not found on the Hub; check the id ({first})"]
        ) from None


def _offline_note() -> str:
    return " (HF_HUB_OFFLINE is set)" if hub_offline() else ""


def check_hub_dataset(spec: JobSpec) -> None:
    """A Hub dataset with the Hub unreachable: refused at once (with HF_HUB_OFFLINE set, ``datasets`` reads its
    cache without waiting, so that case is left to it)."""
    if spec.dataset.source == "hub" and not hub_offline() and not hub_reachable():
        raise SpecError(
            [
                f"dataset.name: Hub dataset {quote_input(spec.dataset.name)} cannot be loaded: "
                f"{HUB_UNREACHABLE}; set HF_HUB_OFFLINE=1 to use a copy in the local cache, or upload "
                "the data as a file"
            ]
        )


def check_spec(spec: JobSpec, models_dir: Path, uploads_dir: Path | None = None) -> list[str]:
    """Raise SpecError with every problem found; return warnings (the job can still be queued). ``spec`` is as it runs
    (a job it names already its folder: the facade's pre-flight is ``training.prepared.prepare_job``'s).

    ``uploads_dir`` is the job owner's uploads folder (for ``dataset.source: upload``).
    """
    data = checked_data(spec, models_dir, uploads_dir)
    return advisories(spec, models_dir, data)[0] + hub_push_warnings(spec)


def checked_data(
    spec: JobSpec, models_dir: Path, uploads_dir: Path | None = None, kept_in: Path | None = None
) -> JobData:
    """SpecError with every reason the job cannot run (its model, its method's own checks, its data, the Hub, its
    batch and processes); else its rows, loaded here once as the trainer reads them (``loading.load_job_data``). With
    ``kept_in`` (a folder the caller holds, ``backend/data/user_cache.py``) the rows are memory-mapped from there,
    not held in memory."""
    problems: list[str] = []
    data = None
    try:
        check_model(spec.model)
        # The method's own checks (a distillation teacher's tokenizer against the student's) read the base model.
        problems.extend(support(spec.method).preflight(spec, models_dir))
    except SpecError as exc:
        problems.extend(exc.problems)
    try:
        check_hub_dataset(spec)
        data = load_job_data(spec, uploads_dir, kept_in)
        # The worker splits the same way; a hold-out that leaves nothing to train on is refused here, not there.
        split_holdout(data.rows, spec.eval.holdout_fraction, spec.eval.holdout_rows, spec.training.seed)
    except SpecError as exc:
        problems.extend(exc.problems)
    problems.extend(hub_checkpoint_problems(spec))
    method = support(spec.method)
    if spec.training.batch_size != "auto" and spec.training.batch_size < method.min_batch:
        problems.append(
            f"training.batch_size: {method.label} needs at least {method.min_batch} examples per device "
            f"(got {spec.training.batch_size}); raise it or use auto"
        )
    problems.extend(process_problems(spec))
    if problems or data is None:
        raise SpecError(problems)
    return data


def process_problems(spec: JobSpec) -> list[str]:
    """Why this machine cannot run ``training.num_processes`` processes with ``training.distributed`` (sentences):
    more GPUs than it has, more CPU processes than its cores without a GPU, FSDP2 / ZeRO without a GPU, or a global
    batch the processes cannot share evenly."""
    from backend.jobs.multiprocess import installed_in
    from backend.platform.hardware import gpu_count_without_torch
    from backend.platform.interpreters import trainer_python
    from backend.training.distributed import batch_split_problem
    from backend.training.process_limit import process_ceiling_problems
    from backend.training.remote_fit import gpu_count_offer

    t, problems = spec.training, []
    have = gpu_count_without_torch()
    if t.distributed != "ddp" and have == 0:
        problems.append(
            f"training.distributed: {t.distributed} shards the model over GPUs and this machine has none; use ddp "
            "(CPU processes over gloo) or send the job to a machine with GPUs"
        )
    if t.distributed.startswith("zero") and have and not installed_in(trainer_python(), "deepspeed"):
        problems.append(
            f"training.distributed: {t.distributed} is DeepSpeed ZeRO and the trainer's environment has no deepspeed "
            "package; pip install deepspeed there, or use ddp or fsdp2"
        )
    if t.num_processes > 1 and have and have < t.num_processes:
        problems.append(
            f"training.num_processes: the job asks for {t.num_processes} GPU processes and this machine has "
            f"{have} GPUs; lower it, or {gpu_count_offer(spec)}"
        )
    problems.extend(process_ceiling_problems(spec))
    split = batch_split_problem(spec)
    if split:
        problems.append(split)
    return problems


def advisories(spec: JobSpec, models_dir: Path, data: JobData) -> tuple[list[str], Tuning]:
    """What a practitioner would flag before a run: the job's ``data`` rendered through the chat template, and memory
    (the estimate of the job as auto-tune would run it, from the examples' measured lengths)."""
    from backend.models.loading import load_tokenizer, resolve_model
    from backend.platform.hardware import detect_device
    from backend.training.autotune import plan
    from backend.training.distributed import per_process_spec
    from backend.training.memory import check_memory
    from backend.training.preview import preview_dataset
    from backend.training.remote_fit import memory_offer

    warnings: list[str] = []
    tokenizer = load_tokenizer(resolve_model(spec.model, models_dir), spec.model)
    # Raises SpecError when chat data meets a model without a chat template.
    preview = preview_dataset(spec, tokenizer, data, rows=8)
    if preview.summary.over_max_length:
        warnings.append(
            f"{preview.summary.over_max_length} of the first {len(preview.rows)} rows are longer than "
            f"training.max_length ({spec.training.max_length} tokens) and will be cut; raise max_length if the "
            "ends of the examples matter"
        )
    if spec.environment.name:
        warnings.extend(environment_advisories(spec, tokenizer))
    device = detect_device()
    # The job as one of its processes runs it: its share of the batch (each process holds a copy of the model).
    tuning = plan(per_process_spec(spec, spec.training.num_processes), models_dir, data, tokenizer, device)
    memory_warning = check_memory(tuning.estimate, device)
    if memory_warning:
        warnings += [memory_warning, memory_offer(tuning.estimate, device, spec)]
    # The rows left to train on, counted rather than split a second time (checked_data split them once).
    rows = len(data.rows)
    held_out = holdout_size(rows, spec.eval.holdout_fraction, spec.eval.holdout_rows)
    if spec.eval.holdout_rows == "auto" and held_out == 0:
        warnings.append(
            f"eval.holdout_rows: the dataset has {counted(rows, 'row')}, too few to hold any out for a before/after "
            f"evaluation (a tenth is held out from {AUTO_HOLDOUT_MIN_DATASET} rows up), so the job trains on "
            f"{'it' if rows == 1 else 'all of them'} and ends without a verdict; add rows to get one, or set it to 0 "
            "to train without one"
        )
    tiny = tiny_dataset_warning(tuning.spec, rows - held_out)
    if tiny:
        warnings.append(tiny)
    return warnings, tuning


FEW_STEPS = 3  # a dataset with fewer rows than this many steps' worth is worth a word before the run


def tiny_dataset_warning(spec: JobSpec, train_rows: int) -> str | None:
    """A sentence when the rows to train on are fewer than one step takes, or than a few steps' worth: the run then
    repeats the same rows over and over, which teaches them by heart rather than the task. ``spec`` is the job as it
    will run (auto-tune's batch decided).

    >>> from backend.core.spec import parse_spec
    >>> said = tiny_dataset_warning(parse_spec({"method": "dpo", "training": {"batch_size": 2, "max_steps": 30}}), 1)
    >>> said.split(": ")[0], said.split("; ")[0].split(", and ")[1]
    ('the dataset has 1 row to train on, fewer than one step takes (2 rows per step)', '30 steps go over it 60 times')
    """
    from backend.core.spec import OnlinePart
    from backend.core.wording import counted

    batch = spec.training.batch_or(1) * spec.training.gradient_accumulation_steps
    part = getattr(spec, spec.method.value, None)
    per_step = max(1, batch // spec.rollout.num_generations) if isinstance(part, OnlinePart) else batch
    steps = spec.training.max_steps
    if train_rows >= FEW_STEPS * per_step:
        return None
    what = counted(train_rows, "row")
    over = f", and {steps} steps go over it {steps * per_step // max(train_rows, 1)} times" if steps else ""
    if train_rows < per_step:
        return (
            f"the dataset has {what} to train on, fewer than one step takes ({counted(per_step, 'row')} per step): "
            f"every step repeats {'it' if train_rows == 1 else 'them'}{over}; add rows, or lower training.batch_size"
        )
    return (
        f"the dataset has {what} to train on, fewer than {FEW_STEPS} steps' worth ({counted(per_step, 'row')} per "
        f"step){over}: the model sees the same rows again and again and learns them by heart; add rows"
    )


ENVIRONMENT_CHECK_BUDGET_S = 20.0  # the whole network part of a remote environment's pre-flight


def environment_advisories(spec: JobSpec, tokenizer) -> list[str]:
    """Problems (raised) and warnings for a GRPO job with an environment: tool-calling template, a reachable server
    with enough sessions, an episode budget that fits, and a starting point that can earn some reward."""
    from trl.chat_template_utils import supports_tool_calling

    from backend.environments.connection import EnvironmentUnavailable, resolve_url, time_budget
    from backend.environments.discovery import check_sessions, describe
    from backend.environments.probe import probe_rewards
    from backend.environments.runtime import builtin_of, concurrent_episodes, display_name

    env = spec.environment
    if not supports_tool_calling(tokenizer):
        raise SpecError(
            [
                f"model.name_or_path: the chat template of {spec.model.name_or_path} cannot render tool calls, so the "
                "model cannot act in an environment; pick an instruct model whose template supports tools "
                "(Qwen2.5/Qwen3)"
            ]
        )
    warnings = []
    if builtin_of(env) is None:
        try:
            with time_budget(ENVIRONMENT_CHECK_BUDGET_S):  # every call together: a slow server holds one submit
                url = resolve_url(env.name)
                info = describe(url, timeout_s=min(env.timeout_s, 15.0))
                check_sessions(
                    url,
                    concurrent_episodes(spec),
                    timeout_s=min(env.timeout_s, 15.0),
                    least=spec.rollout.num_generations,
                )
                if not info.tools:
                    raise SpecError([f"environment.name: {info.summary()} offers no tools"])
                never_rewards = probe_rewards(info, timeout_s=min(env.timeout_s, 15.0)).warning(display_name(env))
        except EnvironmentUnavailable as exc:
            raise SpecError([f"environment.name: {exc}"]) from None
        warnings += [never_rewards] if never_rewards else []
    warnings += episode_budget_warnings(spec)
    return warnings


def episode_budget_warnings(spec: JobSpec) -> list[str]:
    """Pre-flight's word on an environment job's episode budget and starting point, judged against the measured
    recipe of its model in its environment where there is one (``backend.models.demo.environment_recipe``): the
    completion length it measured enough (else the environment's typical episode), and no tool-use warm-up for a
    model that learned to call the tools without one.

    >>> from backend.core.spec import parse_spec
    >>> arith = {"method": "grpo", "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
    ...          "environment": {"name": "builtin:arithmetic"}, "training": {"batch_size": 16}}
    >>> episode_budget_warnings(parse_spec({**arith, "rollout": {"max_completion_length": 96}}))
    []
    >>> said = episode_budget_warnings(parse_spec({**arith, "rollout": {"max_completion_length": 24}}))
    >>> len(said), said[0].split(" tokens")[0], said[0].split(", so ")[-1]
    (1, 'rollout.max_completion_length (24) is below the 96', 'raise it to at least 96')
    """
    from backend.environments.runtime import display_name, typical_episode_tokens

    env, model = spec.environment, spec.model.name_or_path
    measured = environment_recipe(model, spec.method.value, env.name)
    warnings = []
    needed = measured.get("rollout.max_completion_length")
    have = spec.rollout.max_completion_length
    if needed is None and have < (typical := typical_episode_tokens(spec)):
        warnings.append(
            f"rollout.max_completion_length ({have}) is below a typical {display_name(env)} episode (~{typical} "
            f"tokens of model turns and tool results together); episodes cut off early score 0, so raise it to at "
            f"least {typical}"
        )
    elif needed is not None and have < needed:
        warnings.append(
            f"rollout.max_completion_length ({have}) is below the {needed} tokens that {model}'s measured recipe "
            f"for {display_name(env)} gives an episode; episodes cut off early score 0, so raise it to at least "
            f"{needed}"
        )
    if spec.model.parent_job_id is None and not measured:
        warnings.append(
            "GRPO learns only from groups where some episodes earn a reward: if the model does not call the "
            "environment's tools yet, first run SFT on a few tool-call demonstrations and continue from that job "
            "(model.parent_job_id); try a dry run to see what it does now"
        )
    return warnings


def hub_push_warnings(spec: JobSpec) -> list[str]:
    """Pre-flight's word on a push at the end of the job while the Hub cannot be reached: the job would train in
    full and then fail to push, so it is said before it starts (the job may still be queued: the Hub may be back)."""
    if not spec.output.push_to_hub or hub_reachable():
        return []
    why = f"{HUB_UNREACHABLE}{_offline_note()}"
    return [
        f"output.push_to_hub: {why}, so the adapter cannot be pushed when the job ends (it is kept on this machine "
        "only); untick it, or queue the job once the Hub can be reached"
    ]


def hub_checkpoint_problems(spec: JobSpec) -> list[str]:
    """Pre-flight refusals: pushing or resuming from the Hub where the Hub cannot be reached."""
    problems = []
    if spec.output.push_checkpoints and hub_offline():
        problems.append(
            "output.push_checkpoints: HF_HUB_OFFLINE is set, so no checkpoint can reach the Hub; turn it off, or "
            "unset HF_HUB_OFFLINE"
        )
    repo = spec.training.resume_from_hub
    if repo is not None:
        if not hub_reachable():
            why = "HF_HUB_OFFLINE is set" if hub_offline() else HUB_UNREACHABLE
            problems.append(
                f"training.resume_from_hub: the checkpoint of {repo} cannot be downloaded: {why}; try again once the "
                "Hub can be reached, or resume a job of this machine instead"
            )
    return problems
