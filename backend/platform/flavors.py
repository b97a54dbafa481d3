"""The one table of Hugging Face Jobs hardware: each flavor's GPU model, GPU count, memory per GPU, CPU, RAM and price.

Names are ``huggingface_hub.JobHardware`` values (tests/unit/platform/test_flavors.py checks both ways). The figures
are the public ones of the Hub's pricing page (https://huggingface.co/docs/hub/jobs-pricing); the GPU memory is the
card's nominal size in GiB, the price the hourly list price in USD (None where this table does not know it: the page
is the reference). The table decides which flavor a job that does not fit here is offered (:func:`smallest_fit`).

No imports beyond the standard library: pre-flight (backend.training) and Hugging Face Jobs (backend.hub) read it.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Flavor:
    """One Hugging Face Jobs hardware flavor: ``gpus`` GPUs of ``gpu_memory_gib`` each (0 GPUs for a CPU flavor)."""

    name: str
    gpu: str | None  # the GPU model, e.g. "A100"; None for a CPU flavor
    gpus: int
    gpu_memory_gib: float  # per GPU
    vcpus: int | None  # None where this table does not know it
    ram_gib: float | None
    usd_per_hour: float | None

    @property
    def total_gpu_memory_gib(self) -> float:
        """The GPU memory of all the flavor's GPUs together."""
        return self.gpus * self.gpu_memory_gib

    def describe(self) -> str:
        """The hardware in a few words.

        >>> FLAVORS["a100-large"].describe(), FLAVORS["l4x4"].describe(), FLAVORS["cpu-upgrade"].describe()
        ('1x A100, 80 GiB', '4x L4, 24 GiB each, 96 GiB in all', '8 vCPU, 32 GiB RAM, no GPU')
        """
        if not self.gpus:
            return f"{self.vcpus} vCPU, {self.ram_gib:g} GiB RAM, no GPU"
        if self.gpus == 1:
            return f"1x {self.gpu}, {self.gpu_memory_gib:g} GiB"
        return f"{self.gpus}x {self.gpu}, {self.gpu_memory_gib:g} GiB each, {self.total_gpu_memory_gib:g} GiB in all"


# name, GPU model, GPUs, GiB per GPU, vCPUs, RAM GiB, USD per hour (None: not known here; the pricing page says)
_ROWS = (
    Flavor("cpu-basic", None, 0, 0, 2, 16, 0.01),
    Flavor("cpu-upgrade", None, 0, 0, 8, 32, 0.03),
    Flavor("cpu-xl", None, 0, 0, 16, 124, 1.00),
    Flavor("cpu-performance", None, 0, 0, 32, 256, 1.90),
    Flavor("t4-small", "T4", 1, 16, 4, 15, 0.40),
    Flavor("t4-medium", "T4", 1, 16, 8, 30, 0.60),
    Flavor("l4x1", "L4", 1, 24, 8, 30, 0.80),
    Flavor("l4x4", "L4", 4, 24, 48, 186, 3.80),
    Flavor("a10g-small", "A10G", 1, 24, 4, 15, 1.00),
    Flavor("a10g-large", "A10G", 1, 24, 12, 46, 1.50),
    Flavor("a10g-largex2", "A10G", 2, 24, 24, 92, 3.00),
    Flavor("a10g-largex4", "A10G", 4, 24, 48, 184, 5.00),
    Flavor("l40sx1", "L40S", 1, 48, 8, 62, 1.80),
    Flavor("l40sx4", "L40S", 4, 48, 48, 382, 8.30),
    Flavor("l40sx8", "L40S", 8, 48, 192, 1534, 23.50),
    Flavor("a100-large", "A100", 1, 80, 12, 142, 2.50),
    Flavor("a100x4", "A100", 4, 80, None, None, None),
    Flavor("a100x8", "A100", 8, 80, None, None, None),
    Flavor("rtx-pro-6000", "RTX PRO 6000", 1, 96, None, None, None),
    Flavor("rtx-pro-6000x2", "RTX PRO 6000", 2, 96, None, None, None),
    Flavor("rtx-pro-6000x4", "RTX PRO 6000", 4, 96, None, None, None),
    Flavor("rtx-pro-6000x8", "RTX PRO 6000", 8, 96, None, None, None),
    Flavor("h200", "H200", 1, 141, None, None, None),
    Flavor("h200x2", "H200", 2, 141, None, None, None),
    Flavor("h200x4", "H200", 4, 141, None, None, None),
    Flavor("h200x8", "H200", 8, 141, None, None, None),
)
FLAVORS: dict[str, Flavor] = {row.name: row for row in _ROWS}
GPU_FLAVORS: tuple[str, ...] = tuple(name for name, row in FLAVORS.items() if row.gpus)
DEFAULT_FLAVOR = "l4x1"


def flavor(name: str) -> Flavor | None:
    """The table's row for ``name``, or None for a name Hugging Face Jobs does not have."""
    return FLAVORS.get(name)


def smallest_fit(per_gpu_bytes: float, gpus: int = 1, *, headroom: float = 1.0) -> Flavor | None:
    """The smallest GPU flavor with at least ``gpus`` GPUs whose GPUs each hold ``per_gpu_bytes`` within ``headroom``
    of their memory: fewest GPUs first, then least memory per GPU, then cheapest (an unknown price last); None when
    none does.

    ``per_gpu_bytes`` is one training process's peak (each data-parallel process holds its own copy of the model).

    >>> smallest_fit(10 * GIB).name, smallest_fit(30 * GIB).name, smallest_fit(30 * GIB, gpus=4).name
    ('t4-small', 'l40sx1', 'l40sx4')
    >>> smallest_fit(70 * GIB, headroom=0.85).name, smallest_fit(500 * GIB)
    ('rtx-pro-6000', None)
    """
    fitting = [
        row for row in _ROWS if row.gpus >= max(1, gpus) and per_gpu_bytes <= row.gpu_memory_gib * GIB * headroom
    ]
    if not fitting:
        return None
    return min(
        fitting,
        key=lambda row: (
            row.gpus,
            row.gpu_memory_gib,
            row.usd_per_hour is None,
            row.usd_per_hour or 0.0,
        ),
    )
