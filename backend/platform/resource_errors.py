"""Whether an error's text says a resource ran out: memory (CUDA's, the CPU allocator's, C++'s words) or disk."""

from __future__ import annotations

_DISK_FULL_MARKERS = ("no space left on device", "database or disk is full", "disk quota exceeded")
_MEMORY_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "bad_alloc")


def looks_like_oom(text: str) -> bool:
    """Whether an error text says memory ran out (CUDA's, the CPU allocator's or C++'s words for it).

    >>> looks_like_oom("torch.OutOfMemoryError: CUDA out of memory."), looks_like_oom("KeyError: 'prompt'")
    (True, False)
    """
    lowered = text.lower()
    return any(marker in lowered for marker in _MEMORY_MARKERS)


def looks_like_disk_full(text: str) -> bool:
    """Whether an error text says the disk is full (the OS's or SQLite's words for it).

    >>> looks_like_disk_full("OSError: [Errno 28] No space left on device"), looks_like_disk_full("KeyError: 'x'")
    (True, False)
    """
    lowered = text.lower()
    return any(marker in lowered for marker in _DISK_FULL_MARKERS)
