"""training.auto_tune: what it chooses for a device, and why, from the memory estimate and the examples' lengths."""

import pytest

from backend.core.artifacts import JobArtifacts
from backend.core.spec import parse_spec
from backend.platform.hardware import DeviceInfo
from backend.training.autotune import ExampleLengths, as_run, record, tune
from backend.training.memory import GB, format_bytes
from tests.helpers import tiny_spec
from tests.unit.training.test_memory_calibration import _config

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", count=1, total_memory_gb=139.8, free_memory_gb=139.0, bf16=True)
SMALL_GPU = DeviceInfo(kind="cuda", name="NVIDIA T4", count=1, total_memory_gb=2.7, free_memory_gb=2.3, bf16=False)
CPU = DeviceInfo(kind="cpu", name="CPU", count=0, total_memory_gb=None, free_memory_gb=None, bf16=False)
SHORT = ExampleLengths(longest=40, median=30)  # chat-demo with the demo tokenizer
QWEN3_06B = _config("qwen3-0.6b")


def _tune(device=H200, lengths=SHORT, installed=(), total_ram=None, **overrides):
    spec = parse_spec(tiny_spec(**overrides))
    return tune(spec, QWEN3_06B, device, lengths, total_ram=total_ram, is_installed=lambda m: m in installed)


def test_a_short_sft_job_on_a_large_gpu_gets_every_speed_setting_with_a_reason():
    tuning = _tune(installed=("flash_attn", "liger_kernel"), training={"max_length": 1024})
    t = tuning.spec.training
    assert t.gradient_checkpointing is False and t.use_liger_kernel is True
    assert t.attn_implementation == "flash_attention_2" and tuning.spec.sft.packing is True
    text = tuning.describe()
    assert "gradient checkpointing: off (the job fits without it" in text
    assert "packing: on (examples are ~30 tokens, so one 1024-token sequence holds about 34" in text
    assert "Liger kernels: on" in text and "attention: flash_attention_2" in text
    assert tuning.estimate.total_bytes <= tuning.budget_bytes


def test_without_the_optional_kernels_it_says_what_to_install():
    text = _tune().describe()
    assert "attention: sdpa, PyTorch's fused attention (flash-attn is not installed)" in text
    assert "Liger kernels: off (liger-kernel is not installed)" in text


def test_a_job_that_does_not_fit_without_checkpointing_keeps_it():
    tuning = _tune(device=SMALL_GPU, training={"batch_size": 16, "max_length": 1024}, lengths=ExampleLengths(900, 800))
    assert tuning.spec.training.gradient_checkpointing is True
    assert "gradient checkpointing: on (without it the job needs" in tuning.describe()
    assert tuning.spec.sft.packing is False and "packing: off (examples are ~800 tokens" in tuning.describe()


def test_on_a_cpu_checkpointing_goes_when_ram_allows_and_nothing_is_packed():
    tuning = _tune(device=CPU, total_ram=16 * GB)
    assert tuning.spec.training.gradient_checkpointing is False
    assert tuning.spec.sft.packing is False and "on a CPU packing gains no speed" in tuning.describe()
    assert tuning.spec.training.attn_implementation == "sdpa" and tuning.spec.training.use_liger_kernel is False


def test_what_the_user_set_is_kept():
    tuning = _tune(
        training={"gradient_checkpointing": True, "attn_implementation": "eager"},
        sft={"packing": False},
        installed=("flash_attn",),
    )
    t = tuning.spec.training
    assert t.gradient_checkpointing is True and t.attn_implementation == "eager" and tuning.spec.sft.packing is False
    assert set(tuning.settings) == {"training.use_liger_kernel"}


def test_auto_tune_off_takes_trls_defaults():
    tuning = _tune(training={"auto_tune": False}, installed=("flash_attn", "liger_kernel"))
    t = tuning.spec.training
    assert t.gradient_checkpointing is True and t.use_liger_kernel is False and tuning.spec.sft.packing is False
    assert t.attn_implementation is None
    assert tuning.choices == [
        "memory: the job may use 118.8 GB (85% of NVIDIA H200's memory)",
        "auto-tune is off (training.auto_tune): settings left empty take TRL's defaults "
        "(gradient checkpointing on, no packing, no fused kernels, the model's default attention)",
    ]


def test_on_a_gpu_accumulation_moves_into_the_batch_keeping_the_effective_batch():
    tuning = _tune(training={"batch_size": 2, "gradient_accumulation_steps": 8})
    t = tuning.spec.training
    assert (t.batch_size, t.gradient_accumulation_steps) == (16, 1)
    assert "batch: 16 per device x 1 accumulation steps (was 2 x 8; the same 16 examples" in tuning.describe()
    cpu = _tune(device=CPU, total_ram=16 * GB, training={"batch_size": 2, "gradient_accumulation_steps": 8})
    assert (cpu.spec.training.batch_size, cpu.spec.training.gradient_accumulation_steps) == (2, 8)


@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_other_methods_are_tuned_without_packing(method):
    data = {
        "dpo": {"source": "builtin", "name": "preferences-demo"},
        "grpo": {"source": "builtin", "name": "math-demo"},
    }
    tuning = _tune(method=method, dataset=data[method], training={"batch_size": 4})
    assert tuning.spec.sft.packing is None and tuning.spec.training.gradient_checkpointing is False


def test_vllm_colocate_memory_is_taken_out_of_the_budget():
    grpo = dict(
        method="grpo",
        dataset={"source": "builtin", "name": "math-demo"},
        training={"batch_size": 4},
        grpo={"vllm_gpu_memory_utilization": 0.5},
    )
    plain = _tune(**grpo)
    colocated = _tune(installed=("vllm",), **grpo)
    assert colocated.budget_bytes < plain.budget_bytes
    assert "memory: vLLM colocate keeps 50% of the GPU (69.9 GB) for generation" in colocated.describe()
    assert "vLLM" not in _tune(installed=("vllm",), **{**grpo, "grpo": {"use_vllm": "off"}}).describe()


def test_the_recorded_choices_replay_onto_the_users_spec():
    spec = parse_spec(tiny_spec())
    tuning = tune(spec, QWEN3_06B, H200, SHORT, is_installed=lambda m: False)
    ran = as_run(spec, JobArtifacts(auto_tune=record(tuning)))
    assert ran == tuning.spec and spec.training.gradient_checkpointing is None


def test_an_auto_batch_is_the_largest_power_of_two_that_fits_the_gpu():
    big = _tune(training={"batch_size": "auto"}, sft={"packing": False})
    l4 = DeviceInfo(kind="cuda", name="NVIDIA L4", count=1, total_memory_gb=9.4, free_memory_gb=8.0, bf16=True)
    small = _tune(
        device=l4,
        training={"batch_size": "auto", "max_length": 1024},
        sft={"packing": False},
        lengths=ExampleLengths(1000, 900),
    )
    assert big.spec.training.batch_size == 64 and big.spec.training.gradient_checkpointing is False
    assert "batch: 64 per device (auto: the largest power of two up to 64 that fits without gradient" in big.describe()
    b = small.spec.training.batch_size
    assert 1 <= b < 64 and b & (b - 1) == 0 and small.estimate.total_bytes <= small.budget_bytes


def test_an_auto_batch_elsewhere_is_small_or_one_generation_group():
    assert _tune(device=CPU, total_ram=16 * GB, training={"batch_size": "auto"}).spec.training.batch_size == 4
    grpo = _tune(
        method="grpo",
        dataset={"source": "builtin", "name": "math-demo"},
        training={"batch_size": "auto"},
        grpo={"num_generations": 6},
    )
    assert grpo.spec.training.batch_size == 6
    off = _tune(training={"batch_size": "auto", "auto_tune": False})
    assert off.spec.training.batch_size == 1


@pytest.mark.parametrize(
    "value, problem",
    [
        (0, "training.batch_size: must be from 1 to 1024, or auto (got 0)"),
        ("big", "training.batch_size: must be a whole number from 1 to 1024, or auto (got 'big')"),
        (2.5, "training.batch_size: must be a whole number from 1 to 1024, or auto (got 2.5)"),
    ],
)
def test_a_batch_size_is_a_whole_number_or_auto(value, problem):
    from backend.core.spec import SpecError

    with pytest.raises(SpecError) as caught:
        parse_spec(tiny_spec(training={"batch_size": value}))
    assert caught.value.problems == [problem]


def test_the_forms_empty_batch_field_is_auto_and_round_trips():
    from components.train.form import FIELDS, form_to_spec, spec_to_form

    values = {**FIELDS, "batch_size": None}
    spec = parse_spec(form_to_spec(values))
    assert spec.training.batch_size == "auto"
    assert spec_to_form(spec)["batch_size"] is None
    assert parse_spec(form_to_spec({**FIELDS, "batch_size": 4})).training.batch_size == 4


def test_check_shows_what_auto_tune_will_choose_on_this_machine_and_submit_stores_the_users_spec(data_dir):
    from backend.api import StudioAPI

    api = StudioAPI(data_dir, scheduler="none")
    _, text = api.jobs.check(tiny_spec(training={"batch_size": "auto"}))
    assert "\nAuto-tune on this machine:\n" in text
    assert "- batch: 4 per device (auto on a CPU, where bigger batches gain little speed)" in text
    assert "- gradient checkpointing: off (the job fits without it" in text
    # The estimate is of the job as it will run: 4 examples of their measured length, not 1 x max_length.
    assert "activations:" in text and "runtime (torch, transformers, TRL)" in text
    job = api.jobs.submit(tiny_spec(training={"batch_size": "auto"})).job
    assert job.spec.training.batch_size == "auto", "the stored spec is the user's; the worker tunes it"


def test_check_and_the_job_read_one_memory_budget(paths, store, monkeypatch):
    """The budget is the device's, not the moment's: the worker, whose own process (torch, the data) already holds
    memory when it plans, says the same figure and makes the same choices as Check did for the same spec."""
    import backend.training.memory
    from backend.api import StudioAPI
    from backend.platform.hardware import detect_device
    from backend.training.memory import memory_budget, read_total_ram
    from backend.training.named_jobs import read_named_jobs
    from backend.worker import prepare_stored_job
    from components.jobs.views import summary_markdown

    api = StudioAPI(paths.root, scheduler="none")
    available = {"now": 20 * GB}
    monkeypatch.setattr(backend.training.memory, "read_available_ram", lambda *_: available["now"])
    monkeypatch.setattr("backend.training.autotune.read_available_ram", lambda *_: available["now"], raising=False)
    _, checked = api.jobs.check(tiny_spec())
    checked_choices = [line[2:] for line in checked.split("\nAuto-tune on this machine:\n")[1].splitlines()]

    available["now"] = 18 * GB  # the worker's own process takes from what the machine has available
    job = store.add(parse_spec(tiny_spec()))
    prepare_stored_job(job, read_named_jobs(job.spec, store, stored=True), paths, store, None)
    ran = store.get(job.id)

    device = detect_device()
    budget = memory_budget(device, None if device.kind == "cuda" else read_total_ram())
    assert budget and ran.artifacts.auto_tune.budget_bytes == budget
    assert ran.artifacts.auto_tune.choices == checked_choices
    said = f"memory: the job may use {format_bytes(budget)}"
    assert checked_choices[0].startswith(said)
    assert said in summary_markdown(api, ran)
