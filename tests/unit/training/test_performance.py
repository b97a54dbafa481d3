"""Every job's speed figures: the FLOPs/MFU arithmetic, and the figures a real SFT and GRPO run record and show."""

import dataclasses
import doctest
import math
import threading
import time
from types import SimpleNamespace

import pytest
from transformers import TrainerCallback

import backend.training.flops
from backend.core.artifacts import JobArtifacts
from backend.core.spec import parse_spec
from backend.data.loading import load_training_dataset
from backend.hub.model_card import build_model_card
from backend.jobs.records import JobStatus
from backend.methods.sft import build_sft_trainer
from backend.training.callbacks import StoreReportingCallback
from backend.training.flops import (
    flops_per_token,
    live_figures,
    matmul_parameters,
    model_flops_utilization,
    peak_bf16_flops,
    performance_line,
)
from backend.training.memory import parameter_breakdown
from backend.training.meter import PerformanceMeter
from backend.worker import build_trainer
from components.jobs.views import summary_markdown
from tests.helpers import job_data, tiny_spec

# Qwen3-0.6B's shape (its config.json), built without a download.
QWEN3_0_6B = dict(
    hidden_size=1024,
    num_hidden_layers=28,
    intermediate_size=3072,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    tie_word_embeddings=True,
)


def test_the_doctests_hold():
    assert doctest.testmod(backend.training.flops).failed == 0


def test_flops_per_token_and_mfu_for_a_qwen3_0_6b_shape():
    from transformers import Qwen3Config

    params = parameter_breakdown(Qwen3Config(**QWEN3_0_6B))
    # Per layer: q 1024x2048, k and v 1024x1024, o 2048x1024, gate/up/down 3 x 1024x3072; plus the (tied) LM head.
    n = 28 * (2 * 1024 * 2048 + 2 * 1024 * 1024 + 3 * 1024 * 3072) + 151936 * 1024
    assert matmul_parameters(params) == n == 595_984_384
    lora = flops_per_token(params, trains_base_weights=False, recomputes_forward=False)
    assert lora == 4 * n
    assert flops_per_token(params, trains_base_weights=False, recomputes_forward=True) == 6 * n
    assert flops_per_token(params, trains_base_weights=True, recomputes_forward=False) == 6 * n
    assert flops_per_token(params, trains_base_weights=False, recomputes_forward=False, extra_forwards=2) == 8 * n
    # The best measured run on an H200: 3,580 tokens/s, LoRA without checkpointing.
    mfu = model_flops_utilization(3580, lora, peak_bf16_flops("NVIDIA H200"))
    assert mfu == pytest.approx(3580 * 4 * 595_984_384 / 989.5e12) and 0.008 < mfu < 0.009
    assert model_flops_utilization(3580, lora, peak_bf16_flops("NVIDIA H200"), devices=2) == pytest.approx(mfu / 2)
    assert model_flops_utilization(3580, lora, None) is None


@pytest.mark.parametrize(
    "name, tflops",
    [
        ("NVIDIA H200", 989.5),
        ("NVIDIA H100 80GB HBM3", 989.5),
        ("NVIDIA H100 PCIe", 756.5),
        ("NVIDIA A100-SXM4-80GB", 312),
        ("NVIDIA A100 80GB PCIe", 312),
        ("NVIDIA L40S", 362.05),
        ("NVIDIA L4", 121),
        ("NVIDIA A10", 125),
        # Unknown or without bf16: no MFU rather than a guess (the L40 and A10G must not borrow the L4's or A10's).
        ("NVIDIA L40", None),
        ("NVIDIA A10G", None),
        ("Tesla T4", None),
        ("NVIDIA H100 NVL", None),
        ("CPU", None),
        ("NVIDIA GeForce RTX 4090", None),
        (None, None),
    ],
)
def test_peak_bf16_flops_by_device_name(name, tflops):
    assert peak_bf16_flops(name) == (tflops * 1e12 if tflops else None)


def test_the_line_leaves_out_what_is_unknown():
    cpu = {
        "tokens_per_second": 812.3,
        "step_seconds": 0.0412,
        "peak_memory_gb": 1.26,
        "peak_memory_kind": "CPU RSS",
        "mfu": None,
        "device": "CPU",
    }
    assert performance_line(cpu) == "812 tokens/s · 0.04 s/step · peak 1.3 GB CPU RSS · CPU"
    assert performance_line(None) == "" and performance_line({"device": "CPU"}) == ""
    assert live_figures([{"loss": 1.0}]) is None


def _assert_figures_on_every_training_row(rows):
    logged = [m for m in rows if "loss" in m]
    assert logged
    for m in logged:
        assert m["perf/tokens_per_second"] > 0 and math.isfinite(m["perf/tokens_per_second"]), m
        assert m["perf/step_seconds"] > 0 and math.isfinite(m["perf/step_seconds"]), m
        assert m["perf/peak_memory_gb"] > 0 and m["perf/peak_memory_kind"] == "CPU RSS", m
        assert m["perf/mfu"] is None and m["perf/device"] == "CPU", "no MFU on a CPU: its peak is not known"
    return logged


def check_the_figures_of_a_finished_sft_job(api, done, demo_model_path):
    """A real 4-step SFT job records, shows and publishes its figures. Called by the worker test in
    tests/unit/training/test_sft_training.py, which runs that job once for both."""
    from transformers import AutoConfig

    metrics = api.jobs.metrics(done.id)
    logged = _assert_figures_on_every_training_row(metrics)
    assert [m["step"] for m in logged] == [1, 2, 3, 4]

    perf = done.artifacts.performance
    assert perf["steps"] == 4 and perf["device"] == "CPU" and perf["mfu"] is None
    assert perf["tokens"] == logged[-1]["num_tokens"] > 0, "the summary counts the tokens TRL counted"
    assert perf["tokens_per_second"] > 0 and perf["step_seconds"] > 0
    assert perf["peak_memory_kind"] == "CPU RSS" and perf["peak_memory_gb"] > 0.1, "torch alone takes more"
    n = matmul_parameters(parameter_breakdown(AutoConfig.from_pretrained(demo_model_path)))
    assert perf["flops_per_token"] in {4 * n, 6 * n}, "LoRA: 4N, or 6N when gradient checkpointing recomputes"

    line = performance_line(perf)
    assert "tokens/s" in line and "s/step" in line and "CPU RSS" in line and "MFU" not in line
    assert f"Performance: {line}" in summary_markdown(api, done)
    card = build_model_card(done, metrics).text
    assert "## Training performance" in card and line in card
    assert "MFU is left out" in card

    # A running job (no summary yet) shows its latest logged figures.
    running = dataclasses.replace(done, status=JobStatus.running, artifacts=JobArtifacts())
    assert "tokens/s" in summary_markdown(api, running, metrics)
    assert "Performance:" not in summary_markdown(api, running)


@pytest.mark.slow
def test_a_grpo_run_records_figures_for_prompt_and_completion_tokens(paths, store):
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "math-demo"},
            grpo={
                "num_generations": 4,
                "max_completion_length": 8,
                "rewards": [{"name": "length", "target_length": 4}],
            },
            training={"max_steps": 2, "batch_size": 4, "max_length": 128, "save_steps": 100},
        )
    )
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, _ = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths))
    trainer.train()
    logged = _assert_figures_on_every_training_row(store.metrics(job.id))
    assert len(logged) == 2
    summary = callback.performance.summary()
    assert summary["tokens"] == logged[-1]["num_tokens"] == trainer.state.num_input_tokens_seen > 0
    # Every step: 4 completions of at least one token each, and their prompts.
    assert summary["tokens"] > 2 * 4 * (1 + 1)
    params = parameter_breakdown(trainer.model.config)
    recompute = bool(trainer.args.gradient_checkpointing)
    assert summary["flops_per_token"] == flops_per_token(
        params, trains_base_weights=False, recomputes_forward=recompute, extra_forwards=1
    )  # generation; beta is 0


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_eta_follows_the_recent_step_rate_not_the_average_since_the_start(store):
    """A slow first step (loading, warm-up), then steps that slow down (GRPO's completions grow): the ETA reads the
    recent steps, so it neither keeps the start's slowness nor lags behind the slow-down."""
    callback = StoreReportingCallback(store, store.add(parse_spec(tiny_spec())).id, threading.Event())
    clock = FakeClock()
    callback.performance = meter = PerformanceMeter(clock=clock)
    meter.begin()

    def run(seconds: float, steps: int) -> dict:
        for _ in range(steps):
            clock.now += seconds
            meter.step_end()
        done = len(meter.step_seconds)
        return callback._progress(SimpleNamespace(global_step=done, max_steps=40, epoch=0))

    assert callback._progress(SimpleNamespace(global_step=0, max_steps=40, epoch=0))["eta_seconds"] is None
    assert run(20.0, 1)["eta_seconds"] == pytest.approx(39 * 20.0), "one slow step: no underestimate"
    assert run(2.0, 9)["eta_seconds"] == pytest.approx(30 * 2.0), "the slow start no longer counts"
    # 10 s steps from step 10 on: two of them move the ETA up without swinging it to the new rate (they may be saves).
    assert 28 * 2.0 < run(10.0, 2)["eta_seconds"] < 28 * 3.0
    # Once they are all the recent steps, the ETA is the new rate (the since-start mean, 7.5 s, would say 113 s).
    assert run(10.0, 13)["eta_seconds"] == pytest.approx(15 * 10.0), "the new rate, once it is all the recent steps"
    assert meter.speed()["step_seconds"] == pytest.approx((20 + 9 * 2 + 15 * 10) / 25), "s/step is the whole run's"


class WallClock(TrainerCallback):
    """Registered before the studio's callback: the wall clock of training as a person would time it, a cancel at
    ``cancel_at`` (the store's callback sees the request at that step's end), and a checkpoint write that takes
    ``save_seconds`` (a slow disk): the s/step every view shows must count it, as the wall clock does."""

    def __init__(self, stop: threading.Event, cancel_at: int | None, save_seconds: float):
        self.stop, self.cancel_at, self.save_seconds = stop, cancel_at, save_seconds
        self.began = self.last_step_end = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.last_step_end = time.perf_counter()
        if state.global_step == self.cancel_at:
            self.stop.set()

    def on_save(self, args, state, control, **kwargs):
        time.sleep(self.save_seconds)


@pytest.mark.parametrize("ending", ["finished", "cancelled"])
def test_running_finished_and_cancelled_views_say_one_speed_that_agrees_with_the_wall_clock(
    ending, paths, store, models_dir
):
    from backend.api import StudioAPI

    spec = parse_spec(tiny_spec(training={"max_steps": 6, "save_steps": 2}))
    job = store.add(spec)
    stop = threading.Event()
    wall_clock = WallClock(stop, cancel_at=4 if ending == "cancelled" else None, save_seconds=0.3)
    callback = StoreReportingCallback(store, job.id, stop)
    dataset, fmt = load_training_dataset(spec.dataset, spec.method)
    trainer = build_sft_trainer(spec, paths.job_output(job.id), models_dir, [wall_clock, callback], dataset, fmt)
    trainer.train()
    steps = trainer.state.global_step
    assert steps == (4 if ending == "cancelled" else 6) and callback.cancelled is (ending == "cancelled")
    wall = (wall_clock.last_step_end - wall_clock.began) / steps

    metrics = store.metrics(job.id)
    running = live_figures(metrics)  # what the running view showed after the last step
    summary = callback.performance.summary()  # what the finished or cancelled view and the model card show
    assert summary["steps"] == steps
    for figures in (running, summary):
        assert figures["step_seconds"] == pytest.approx(wall, rel=0.2), (figures, wall)
    assert running["tokens_per_second"] == pytest.approx(summary["tokens_per_second"], rel=0.2)
    # tokens/s and s/step read the same clock: together they give back the tokens counted.
    assert summary["tokens_per_second"] * summary["step_seconds"] * steps == pytest.approx(summary["tokens"])
    assert summary["tokens"] == [m for m in metrics if "loss" in m][-1]["num_tokens"]

    api = StudioAPI(paths.root, scheduler="none")
    as_running = dataclasses.replace(store.get(job.id), status=JobStatus.running)
    status = JobStatus.cancelled if ending == "cancelled" else JobStatus.succeeded
    ended = dataclasses.replace(as_running, status=status, artifacts=JobArtifacts(performance=summary))

    def speed_words(markdown: str) -> list[str]:
        line = next(line for line in markdown.splitlines() if line.startswith("Performance: "))
        return line.removeprefix("Performance: ").split(" · ")[:2]  # tokens/s and s/step

    shown = speed_words(summary_markdown(api, ended))
    assert shown == speed_words(summary_markdown(api, as_running, metrics))
    assert " · ".join(shown) in build_model_card(ended, metrics).text
