"""Jobs of several processes without running them: the spec (num_gpus's alias, the refusals), the launch command
accelerate reads, the batch each process takes, the memory estimate, the exports and the dead rank's sentence."""

import pytest

from backend.api import StudioAPI
from backend.core.artifacts import DistributedRun, JobArtifacts
from backend.core.spec import JobSpec, SpecError, parse_spec
from backend.hub.model_card import settings_rows
from backend.hub.trl_cli import trl_cli_yaml
from backend.jobs.multiprocess import dead_rank_sentence, launch_plan
from backend.platform.hardware import DeviceInfo
from backend.training.distributed import batch_split_problem, per_process_spec, whole_spec
from backend.training.memory import check_memory, estimate_memory, load_model_config
from tests.helpers import tiny_spec

CPU = DeviceInfo(kind="cpu", name="CPU", count=0, total_memory_gb=None, free_memory_gb=None, bf16=False)

# What torchrun (torch.distributed.elastic) prints when a rank fails, as it reaches the job's log.
SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
backend.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-05_19:20:01
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_19:20:01
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4243)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4243
============================================================"""


def test_num_gpus_of_stored_specs_loads_as_num_processes():
    old = JobSpec.from_json('{"schema_version": 2, "training": {"num_gpus": 4}}')
    assert old.training.num_processes == 4 and old.training.distributed == "ddp"
    assert "num_gpus" not in old.to_json() and JobSpec.from_json(old.to_json()) == old
    with pytest.raises(SpecError, match="num_gpus: give it once, as training.num_processes"):
        parse_spec(tiny_spec(training={"num_gpus": 2, "num_processes": 2}))
    with pytest.raises(SpecError, match="training.distributed"):
        parse_spec(tiny_spec(training={"distributed": "zero1"}))


@pytest.mark.parametrize("strategy", ["fsdp2", "zero2", "zero3"])
def test_sharding_strategies_are_refused_without_a_gpu_naming_the_field(paths, strategy):
    api = StudioAPI(paths.root, scheduler="none")
    with pytest.raises(SpecError, match=f"training.distributed: {strategy} shards the model over GPUs and this"):
        api.jobs.submit(tiny_spec(training={"num_processes": 2, "distributed": strategy}))
    assert api.jobs.list_jobs() == []


def test_cpu_processes_launch_with_gloo_and_gpus_with_trl_configs(paths):
    from accelerate.commands.launch import launch_command_parser

    one = launch_plan("J1", paths, 1, on_gpu=False)
    assert (one.module, one.args, one.env) == ("backend.worker", ["--job-id", "J1", "--data-dir", str(paths.root)], {})
    cpu = launch_plan("J2", paths, 2, "ddp", on_gpu=False, port=29555)
    assert cpu.module == "accelerate.commands.launch" and cpu.env == {"ACCELERATE_USE_CPU": "1"}
    parsed = launch_command_parser().parse_args(cpu.args)  # accelerate's own parser reads what we pass
    assert parsed.multi_gpu and not parsed.cpu and parsed.num_processes == 2 and parsed.main_process_port == 29555
    assert parsed.training_script == "backend.worker" and parsed.module
    assert parsed.training_script_args == ["--job-id", "J2", "--data-dir", str(paths.root)]
    assert cpu.command_line().startswith("ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2")
    fsdp = launch_command_parser().parse_args(launch_plan("J3", paths, 4, "fsdp2", config_file="/x/fsdp2.yaml").args)
    assert fsdp.config_file == "/x/fsdp2.yaml" and not fsdp.multi_gpu and fsdp.num_processes == 4
    assert launch_plan("J4", paths, 2).args != launch_plan("J5", paths, 2).args  # each job its own port and id


def test_trl_ships_the_configs_the_strategies_name():
    import trl

    from backend.jobs.multiprocess import TRL_ACCELERATE_CONFIGS, trl_config_file

    for strategy, name in TRL_ACCELERATE_CONFIGS.items():
        path = trl_config_file(strategy, __import__("sys").executable)
        assert path.endswith(f"accelerate_configs/{name}") and __import__("os").path.isfile(path)
    assert trl.__file__


def test_the_same_spec_keeps_its_global_batch_over_processes():
    spec = parse_spec(tiny_spec(training={"num_processes": 2, "batch_size": 8, "gradient_accumulation_steps": 3}))
    share = per_process_spec(spec, 2).training
    assert (share.batch_size, share.gradient_accumulation_steps) == (4, 3)
    odd = parse_spec(tiny_spec(training={"num_processes": 2, "batch_size": 3, "gradient_accumulation_steps": 4}))
    assert per_process_spec(odd, 2).training.gradient_accumulation_steps == 2
    assert per_process_spec(spec, 1) is spec and batch_split_problem(spec) is None
    # The job folder's spec.json (the process's spec made whole) trains the same when submitted again.
    again = per_process_spec(parse_spec(whole_spec(per_process_spec(spec, 2), 2).model_dump()), 2).training
    assert (again.batch_size, again.gradient_accumulation_steps) == (4, 3)
    uneven = parse_spec(tiny_spec(training={"num_processes": 2, "batch_size": 3}))
    assert batch_split_problem(uneven).startswith("training.num_processes: 2 processes share each step's batch")


def test_memory_is_per_process_and_all_processes_share_a_cpu(models_dir):
    spec = parse_spec(tiny_spec(training={"num_processes": 2, "batch_size": 8}))
    config = load_model_config(spec, models_dir)
    share = estimate_memory(per_process_spec(spec, 2), config, CPU)
    whole = estimate_memory(parse_spec(tiny_spec(training={"batch_size": 8})), config, CPU)
    assert share.processes == 2 and share.total_bytes < whole.total_bytes  # half the batch in each process
    assert share.all_processes_bytes == 2 * share.total_bytes
    assert "per process" in share.describe() and "for the 2 processes" in share.describe()
    # Two CPU processes need their sum of the RAM.
    assert check_memory(share, CPU, available_ram_bytes=share.total_bytes + 1).startswith("Estimated")
    assert check_memory(share, CPU, available_ram_bytes=share.all_processes_bytes + 1) is None


def test_cards_and_exports_say_how_the_job_was_launched():
    spec = parse_spec(tiny_spec(training={"num_processes": 2, "batch_size": 8}))
    text = trl_cli_yaml(spec)
    assert "--accelerate_config multi_gpu --num_processes 2" in text and "per_device_train_batch_size: 4" in text
    run = DistributedRun(
        processes=2,
        backend="gloo",
        launch="ACCELERATE_USE_CPU=1 accelerate launch",
        per_process_batch=4,
        global_batch=8,
    )
    rows = dict(settings_rows(spec, JobArtifacts(distributed=run)))
    assert rows["processes"] == "2 processes, ddp over gloo, 4 examples per process, 8 per step"
    assert rows["launched with"] == "`ACCELERATE_USE_CPU=1 accelerate launch`"


def test_the_dead_rank_is_named_from_torchruns_summary():
    assert (
        dead_rank_sentence(SUMMARY, 2) == "rank 1 of 2 died (killed by signal 9); the launcher stopped the other ranks"
    )
    exited = SUMMARY.replace("exitcode  : -9", "exitcode  : 3")
    assert dead_rank_sentence(exited, 2).startswith("rank 1 of 2 died (exit code 3)")
    assert dead_rank_sentence("Traceback ...\nValueError: boom", 2) is None
