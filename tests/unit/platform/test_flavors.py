"""The Hugging Face Jobs flavor table: the same names as huggingface_hub's JobHardware, sound figures, and the
smallest flavor that fits a job."""

from __future__ import annotations

import pytest
from huggingface_hub import JobHardware

from backend.hub.hf_jobs import DEFAULT_FLAVOR, JOB_FLAVORS, RemoteJobError, check_flavor
from backend.platform.flavors import FLAVORS, GIB, GPU_FLAVORS, smallest_fit


def test_every_table_name_is_a_job_hardware_and_every_gpu_hardware_is_in_the_table():
    hardware = {item.value for item in JobHardware}
    assert set(FLAVORS) <= hardware, f"not JobHardware values: {set(FLAVORS) - hardware}"
    gpu_hardware = {name for name in hardware if not name.startswith("cpu-")}
    assert gpu_hardware <= set(GPU_FLAVORS), f"GPU flavors missing from the table: {gpu_hardware - set(GPU_FLAVORS)}"
    assert set(JOB_FLAVORS) == set(FLAVORS) and DEFAULT_FLAVOR in GPU_FLAVORS
    check_flavor("l40sx4")
    with pytest.raises(RemoteJobError, match="Unknown Hugging Face Jobs flavor 'h100x9'"):
        check_flavor("h100x9")


def test_the_figures_hold_together():
    for name, row in FLAVORS.items():
        assert row.name == name
        if name.startswith("cpu-"):
            assert row.gpus == 0 and row.gpu is None and row.gpu_memory_gib == 0
        else:
            assert row.gpus >= 1 and row.gpu and row.gpu_memory_gib >= 16
            suffix = name.rsplit("x", 1)[-1]
            if suffix.isdigit() and name != "l4x1" and name != "l40sx1":
                assert row.gpus == int(suffix), name
    public = {"t4-small": ("T4", 1, 16), "l4x1": ("L4", 1, 24), "l4x4": ("L4", 4, 24), "a10g-largex2": ("A10G", 2, 24)}
    public |= {"l40sx8": ("L40S", 8, 48), "a100-large": ("A100", 1, 80), "a10g-largex4": ("A10G", 4, 24)}
    for name, (gpu, count, memory) in public.items():
        row = FLAVORS[name]
        assert (row.gpu, row.gpus, row.gpu_memory_gib) == (gpu, count, memory), name
    assert FLAVORS["l4x4"].total_gpu_memory_gib == 96


def test_smallest_fit_takes_fewest_gpus_then_least_memory_then_the_cheapest():
    # one GPU: the cheapest of the 16 GiB cards, then of the 24 GiB ones (l4x1 is cheaper than both A10Gs)
    assert smallest_fit(10 * GIB).name == "t4-small"
    assert smallest_fit(20 * GIB).name == "l4x1"
    assert smallest_fit(40 * GIB).name == "l40sx1"
    assert smallest_fit(70 * GIB).name == "a100-large"
    # within the headroom the app plans with (85% of a card): 70 GiB no longer fits an 80 GiB A100
    assert smallest_fit(70 * GIB, headroom=0.85).name == "rtx-pro-6000"
    assert smallest_fit(130 * GIB).name == "h200"
    assert smallest_fit(150 * GIB) is None
    # more GPUs: the fewest that are enough, each holding one process's whole estimate
    assert smallest_fit(10 * GIB, gpus=2).name == "a10g-largex2"
    assert smallest_fit(10 * GIB, gpus=3).name == "l4x4"  # no 3-GPU flavor: the next count up, cheapest
    assert smallest_fit(30 * GIB, gpus=4).name == "l40sx4"
    assert smallest_fit(60 * GIB, gpus=8).name == "a100x8"
    assert smallest_fit(10 * GIB, gpus=16) is None
    assert all(smallest_fit(0, gpus=n).gpus == n for n in (1, 2, 4, 8))


def test_the_hub_page_lists_every_flavor_of_the_table():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "hub.md").read_text()
    for name, row in FLAVORS.items():
        gpus = f"{row.gpus}x {row.gpu}" if row.gpus else "none"
        assert f"| `{name}` | {gpus} |" in page, f"docs/hub.md's flavor table lacks {name} as {gpus}"
