"""Where the app runs: a Space (shared or duplicated), ZeroGPU, or someone's own machine; and what that allows."""

from __future__ import annotations

import os

from backend.core.paths import on_space

__all__ = ["ZERO_GPU_REFUSAL", "gpu_task", "on_space", "on_zero_gpu"]

ZERO_GPU_REFUSAL = (
    "This Space runs on ZeroGPU, which lends a GPU to one function call at a time for a few minutes; a training "
    "job runs for much longer in a background worker, so it cannot train here. Duplicate the Space onto dedicated "
    "GPU hardware (an L4 or A10G is plenty for 0.5-1.5B models with LoRA), run the Docker image on your own GPU, "
    "or send the job to Hugging Face Jobs. Chatting with finished adapters works here."
)


def on_zero_gpu() -> bool:
    """True on a ZeroGPU Space (the platform sets SPACES_ZERO_GPU)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "true", "yes")


def gpu_task(duration: int = 120):
    """``spaces.GPU`` for inference handlers: on ZeroGPU it borrows a GPU for the call; elsewhere it changes nothing."""
    try:
        import spaces
    except ImportError:  # the spaces package is optional off Spaces
        return lambda fn: fn
    return spaces.GPU(duration=duration)
