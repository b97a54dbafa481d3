"""A job too big for this machine, offered the smallest Hugging Face Jobs flavor that holds it (with the estimate).

Pre-flight adds :func:`jobs_offer` to its memory warning and to its GPU-count refusal; the facade's *Send to Hugging
Face Jobs* picks :func:`fitting_flavor` when the user leaves the flavor on ``auto``. The flavors and their memory come
from the one table, backend/platform/flavors.py.
"""

from __future__ import annotations

from pathlib import Path

from backend.core.spec import JobSpec, SpecError
from backend.platform.flavors import DEFAULT_FLAVOR, FLAVORS, GIB, smallest_fit
from backend.platform.hardware import DeviceInfo
from backend.training.memory import HEADROOM, MemoryEstimate, estimate_memory, load_model_config

# A Hugging Face Jobs GPU as the estimate sees it: bf16 (every GPU flavor's card has it), memory from the table.
_JOBS_GPU = DeviceInfo(
    kind="cuda", name="a Hugging Face Jobs GPU", count=1, total_memory_gb=None, free_memory_gb=None, bf16=True
)


def gpus_needed(spec: JobSpec) -> int:
    """The GPUs (training processes) the job asks for: the one place that reads it from the spec."""
    return spec.training.num_processes


def gib(size: float) -> str:
    """A size in GiB, one decimal.

    >>> gib(31.2 * 2**30)
    '31.2 GiB'
    """
    return f"{size / GIB:.1f} GiB"


def offer_sentence(per_gpu_bytes: float, gpus: int, here: str) -> str:
    """What to tell a user whose job needs ``per_gpu_bytes`` on each of ``gpus`` GPUs when ``here`` (what this machine
    has, as a clause) is not enough: the smallest flavor that holds it, with the estimate.

    >>> offer_sentence(31.2 * GIB, 1, "this machine has 16.0 GiB free on Tesla T4")[:85]
    'the job needs about 31.2 GiB per GPU; this machine has 16.0 GiB free on Tesla T4: run'
    >>> offer_sentence(31.2 * GIB, 1, "this machine has 16.0 GiB free on Tesla T4")[85:]
    ' it on Hugging Face Jobs as l40sx1 (1x L40S, 48 GiB)'
    >>> offer_sentence(20 * GIB, 4, "this machine has 1 GPU").split("; ")[0]
    'the job needs about 20.0 GiB per GPU on 4 GPUs (80.0 GiB in all)'
    """
    need = f"the job needs about {gib(per_gpu_bytes)} per GPU"
    if gpus > 1:
        need += f" on {gpus} GPUs ({gib(per_gpu_bytes * gpus)} in all)"
    fit = smallest_fit(per_gpu_bytes, gpus, headroom=HEADROOM)
    if fit is None:
        biggest = max(row.gpu_memory_gib for row in FLAVORS.values())
        return (
            f"{need}; {here}, and no Hugging Face Jobs flavor has {max(gpus, 1)} GPUs that hold it "
            f"({HEADROOM:.0%} of at most {biggest:g} GiB each): make the job smaller"
        )
    return f"{need}; {here}: run it on Hugging Face Jobs as {fit.name} ({fit.describe()})"


def machine_clause(device: DeviceInfo, free_bytes: float | None = None) -> str:
    """What this machine offers, as the offer says it."""
    if device.kind == "cuda":
        free = device.free_memory_gb * GIB if device.free_memory_gb is not None else free_bytes
        memory = f"{gib(free)} free" if free is not None else "less"
        return f"this machine has {memory} on {device.name}"
    return "this machine has no GPU"


def memory_offer(estimate: MemoryEstimate, device: DeviceInfo, spec: JobSpec) -> str:
    """The offer pre-flight adds after its memory warning, as a sentence of its own (the job's estimate is one
    process's peak: each GPU holds one)."""
    sentence = offer_sentence(estimate.total_bytes, gpus_needed(spec), machine_clause(device))
    return sentence[0].upper() + sentence[1:]


def gpu_count_offer(spec: JobSpec) -> str:
    """Where to send a job that asks for more GPUs than this machine has: the smallest flavor with that many (its
    memory is not known yet when pre-flight counts GPUs).

    >>> from backend.core.spec import parse_spec
    >>> gpu_count_offer(parse_spec({"training": {"num_processes": 2}}))
    'send the job to Hugging Face Jobs as a10g-largex2 (2x A10G, 24 GiB each, 48 GiB in all)'
    """
    fit = smallest_fit(0, gpus_needed(spec))
    if fit is None:
        return f"no Hugging Face Jobs flavor has {gpus_needed(spec)} GPUs either"
    return f"send the job to Hugging Face Jobs as {fit.name} ({fit.describe()})"


def fitting_flavor(spec: JobSpec, models_dir: Path) -> tuple[str, MemoryEstimate | None]:
    """The flavor *Send to Hugging Face Jobs* uses on ``auto``: the smallest that holds the job's estimate on a
    Hugging Face Jobs GPU (bf16, lengths at training.max_length: an upper bound), with the estimate; the default
    flavor with None when the model's config cannot be read here."""
    try:
        config = load_model_config(spec, models_dir)
    except Exception:  # noqa: BLE001 - a Hub model not reachable from here: the default flavor, as before
        return DEFAULT_FLAVOR, None
    estimate = estimate_memory(spec, config, _JOBS_GPU)
    fit = smallest_fit(estimate.total_bytes, gpus_needed(spec), headroom=HEADROOM)
    if fit is None:
        raise SpecError([f"spec: {offer_sentence(estimate.total_bytes, gpus_needed(spec), 'this machine too')}"])
    return fit.name, estimate
