"""A job too big for this machine is offered the smallest Hugging Face Jobs flavor that holds it, with the estimate:
in pre-flight's memory warning, in its GPU-count refusal, and as the flavor ``auto`` sends."""

from __future__ import annotations

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError, parse_spec
from backend.platform.flavors import GIB
from backend.platform.hardware import DeviceInfo
from backend.training import memory
from backend.training.remote_fit import fitting_flavor, gpus_needed, memory_offer, offer_sentence
from tests.helpers import tiny_spec

T4 = DeviceInfo(kind="cuda", name="Tesla T4", count=1, total_memory_gb=15.0, free_memory_gb=14.6, bf16=False)
CPU = DeviceInfo(kind="cpu", name="CPU", count=0, total_memory_gb=None, free_memory_gb=None, bf16=False)


def test_the_offer_names_the_estimate_what_this_machine_has_and_the_flavor():
    assert offer_sentence(31.2 * GIB, 1, "this machine has 14.6 GiB free on Tesla T4") == (
        "the job needs about 31.2 GiB per GPU; this machine has 14.6 GiB free on Tesla T4: "
        "run it on Hugging Face Jobs as l40sx1 (1x L40S, 48 GiB)"
    )
    assert offer_sentence(20 * GIB, 4, "this machine has no GPU") == (
        "the job needs about 20.0 GiB per GPU on 4 GPUs (80.0 GiB in all); this machine has no GPU: "
        "run it on Hugging Face Jobs as l4x4 (4x L4, 24 GiB each, 96 GiB in all)"
    )
    too_big = offer_sentence(300 * GIB, 1, "this machine has no GPU")
    assert "no Hugging Face Jobs flavor has 1 GPUs that hold it" in too_big and too_big.endswith("make the job smaller")


def test_memory_offer_reads_the_gpus_the_spec_asks_for_and_the_device():
    spec = parse_spec(tiny_spec(training={"num_processes": 2}))
    assert gpus_needed(spec) == 2
    estimate = memory.MemoryEstimate(total_bytes=int(18 * GIB), breakdown=[("all", int(18 * GIB))], parameters=1)
    offer = memory_offer(estimate, T4, spec)
    assert offer.startswith("The job needs about 18.0 GiB per GPU on 2 GPUs (36.0 GiB in all); this machine has ")
    assert "14.6 GiB free on Tesla T4" in offer and offer.endswith(
        "as a10g-largex2 (2x A10G, 24 GiB each, 48 GiB in all)"
    )
    assert "this machine has no GPU" in memory_offer(estimate, CPU, parse_spec(tiny_spec()))


def test_check_offers_a_flavor_when_the_job_does_not_fit_this_machine(paths, monkeypatch):
    monkeypatch.setattr(memory, "read_available_ram", lambda *a: 64 * 2**20)  # a machine with 64 MiB free
    api = StudioAPI(paths.root, scheduler="none")
    warnings, _ = api.jobs.check(tiny_spec())
    (offer,) = [w for w in warnings if "Hugging Face Jobs" in w]
    assert "this machine has no GPU: run it on Hugging Face Jobs as t4-small (1x T4, 16 GiB)" in offer
    assert any(w.startswith("Estimated ") and "free on this machine" in w for w in warnings)

    monkeypatch.undo()
    warnings, _ = api.jobs.check(tiny_spec())
    assert not any("Hugging Face Jobs" in w for w in warnings), "a job that fits is offered nothing"


def test_more_gpus_than_this_machine_has_is_refused_with_the_flavor_that_has_them(paths, monkeypatch):
    import backend.platform.hardware

    monkeypatch.setattr(backend.platform.hardware, "gpu_count_without_torch", lambda: 1)  # one GPU, two asked for
    with pytest.raises(SpecError, match=r"lower it, or send the job to Hugging Face Jobs as a10g-largex2 \(2x A10G"):
        StudioAPI(paths.root, scheduler="none").jobs.submit(tiny_spec(training={"num_processes": 2}))


def test_auto_picks_the_smallest_flavor_for_the_estimate(models_dir):
    flavor, estimate = fitting_flavor(parse_spec(tiny_spec()), models_dir)
    assert flavor == "t4-small" and estimate.total_bytes < 16 * GIB
    flavor, _ = fitting_flavor(parse_spec(tiny_spec(training={"num_processes": 4})), models_dir)
    assert flavor == "l4x4"
    # a model whose config cannot be read here is sent on the default flavor, as before
    offline = parse_spec(tiny_spec(model={"name_or_path": "someone/not-downloaded"}))
    assert fitting_flavor(offline, models_dir)[0] == "l4x1"
