"""Multi-GPU launch through accelerate, vLLM colocate settings, and the ZeroGPU / Space rules (no GPU needed)."""

import importlib.util

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError, parse_spec
from backend.jobs.records import JobStatus
from backend.jobs.scheduler import Scheduler, worker_command
from backend.methods.grpo import to_grpo_config
from backend.methods.rollout import vllm_settings
from backend.platform.space_runtime import gpu_task
from components.header import notices
from tests.helpers import tiny_spec


def test_a_multi_gpu_job_is_launched_through_accelerate_launch_with_one_process_per_gpu(paths):
    from accelerate.commands.launch import launch_command_parser

    assert worker_command("J1", paths, 1) == ("backend.worker", ["--job-id", "J1", "--data-dir", str(paths.root)])
    module, args = worker_command("J2", paths, 4)
    assert module == "accelerate.commands.launch"
    parsed = launch_command_parser().parse_args(args)  # accelerate's own parser reads what we pass
    assert parsed.multi_gpu and parsed.num_processes == 4 and parsed.module
    assert parsed.training_script == "backend.worker"
    assert parsed.training_script_args == ["--job-id", "J2", "--data-dir", str(paths.root)]


def test_a_multi_gpu_job_waits_for_the_machine_and_holds_it(paths, store, monkeypatch):
    launched = []
    scheduler = Scheduler(paths, max_concurrent=4)

    def fake_launch(job):
        gpus = job.spec.training.num_processes
        launched.append((job.id, gpus))
        scheduler._running[job.id] = type("R", (), {"gpus": gpus, "slot": len(scheduler._running), "export": False})()

    monkeypatch.setattr(scheduler, "_launch", fake_launch)
    monkeypatch.setattr(scheduler.reaper, "reap", lambda: None)
    one = store.add(parse_spec(tiny_spec()))
    big = store.add(parse_spec(tiny_spec(training={"num_processes": 2})))
    after = store.add(parse_spec(tiny_spec()))
    scheduler.tick()
    assert launched == [(one.id, 1)], "the 2-GPU job waits while another job runs"
    scheduler._running.pop(one.id)
    store.finish(one.id, JobStatus.succeeded)
    scheduler.tick()
    assert launched[-1] == (big.id, 2) and len(launched) == 2, "and holds the machine while it runs"
    scheduler._running.pop(big.id)
    scheduler.tick()
    assert launched[-1] == (after.id, 1)


def test_more_gpu_processes_than_gpus_are_refused_at_submit_and_cpu_processes_are_not(paths, monkeypatch):
    api = StudioAPI(paths.root, scheduler="none")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a machine of one GPU, as the scheduler counts them
    with pytest.raises(SpecError, match="asks for 2 GPU processes and this machine has 1 GPUs"):
        api.jobs.submit(tiny_spec(training={"num_processes": 2}))
    if importlib.util.find_spec("deepspeed") is None:  # ZeRO needs DeepSpeed in the trainer's environment
        with pytest.raises(SpecError, match="zero2 is DeepSpeed ZeRO and the trainer's environment has no deepspeed"):
            api.jobs.submit(tiny_spec(training={"distributed": "zero2"}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: two CPU processes (DDP over gloo)
    assert api.jobs.submit(tiny_spec(training={"num_gpus": 2})).job.spec.training.num_processes == 2


def test_vllm_colocate_when_available_transformers_otherwise(tmp_path):
    spec = parse_spec(
        tiny_spec(method="grpo", grpo={"num_generations": 2}, dataset={"source": "builtin", "name": "math-demo"})
    )
    kwargs, notice = vllm_settings(spec, available=True)
    config = to_grpo_config(spec, tmp_path, [1.0], kwargs)
    assert config.use_vllm and config.vllm_mode == "colocate" and config.vllm_gpu_memory_utilization == 0.3
    kwargs, notice = vllm_settings(spec, available=False)
    assert kwargs == {"use_vllm": False} and "needs a CUDA GPU" in notice
    # vLLM cannot be installed beside the app: the notice says which environment it goes into
    assert "requirements-trainer-gpu.txt into the trainer environment, STUDIO_TRAINER_PYTHON's" in notice
    assert vllm_settings(spec)[0] == {"use_vllm": False}, "this machine has no CUDA GPU"
    forced = parse_spec(
        tiny_spec(
            method="grpo",
            grpo={"num_generations": 2, "use_vllm": "on"},
            dataset={"source": "builtin", "name": "math-demo"},
        )
    )
    with pytest.raises(SpecError, match="vLLM needs a CUDA GPU and the vllm package in the trainer's environment"):
        vllm_settings(forced, available=False)


def test_zero_gpu_refuses_training_with_the_reason_and_chat_still_works(paths, monkeypatch):
    @gpu_task(duration=30)  # off ZeroGPU, spaces.GPU leaves the (streaming) handler as it is
    def streamed(n):
        yield from range(n)

    assert list(streamed(3)) == [0, 1, 2]
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    api = StudioAPI(paths.root, scheduler="none")
    with pytest.raises(SpecError, match="ZeroGPU") as err:
        api.jobs.submit(tiny_spec())
    assert "Duplicate the Space" in str(err.value) and api.jobs.list_jobs() == []


def test_space_notices(monkeypatch):
    from backend.core.users import User
    from backend.platform.hardware import DeviceInfo

    cpu = DeviceInfo("cpu", "CPU", 0, None, None, False)
    assert notices(User("local", True), cpu) == [], "nothing to say on your own machine"
    monkeypatch.setenv("SPACE_ID", "owner/studio")
    monkeypatch.setenv("SPACE_AUTHOR_NAME", "owner")
    said = notices(User("visitor"), cpu)
    assert any("no GPU" in n for n in said) and any("owner's Space" in n for n in said)
    assert not any("owner's Space" in n for n in notices(User("owner", True), cpu))
