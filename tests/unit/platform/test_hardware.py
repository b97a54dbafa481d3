"""The device the studio reports, read without importing torch where no GPU can be there."""

from __future__ import annotations

import subprocess
import sys

import pytest

import backend.platform.hardware as hardware
from tests.helpers import ROOT


def test_a_machine_without_a_gpu_is_a_cpu_without_importing_torch():
    """The app's header asks for the device on a page's first load, and the pre-flight at every submit: on a CPU
    machine the answer must not cost the 3-4 CPU s of importing torch (the app imports it only when a job needs it)."""
    if not hardware.no_gpu_in_sight():
        pytest.skip("this machine shows a GPU")
    code = (
        "import sys; from backend.platform.hardware import detect_device; device = detect_device(); "
        "print(device.kind, device.describe(), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    kind, *_, imported = out.stdout.split()
    assert (kind, imported) == ("cpu", "False"), out.stdout


@pytest.mark.parametrize(
    ("nodes", "gpus", "in_sight"),
    [
        ([], 0, False),  # nothing: a CPU machine
        (["nvidia0", "nvidiactl"], 0, True),  # an NVIDIA GPU's node, though the driver's /proc is not mounted
        (["nvidiactl"], 0, False),  # the driver's control node alone is no GPU
        (["kfd"], 0, True),  # a ROCm device: torch's CUDA API runs on it
        ([], 1, True),  # a GPU in the driver's /proc (or CUDA_VISIBLE_DEVICES naming one)
    ],
)
def test_any_sign_of_a_gpu_asks_torch(tmp_path, monkeypatch, nodes, gpus, in_sight):
    for node in nodes:
        (tmp_path / node).touch()
    monkeypatch.setattr(hardware, "gpu_count_without_torch", lambda: gpus)
    assert hardware.no_gpu_in_sight(tmp_path) is not in_sight
