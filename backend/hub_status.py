"""Is the Hugging Face Hub reachable from here? Asked once in the background and cached, so pages never wait."""

from __future__ import annotations

import os
import threading
import time
import urllib.request

_CACHE_S = 300.0
_state: dict[str, object] = {"checked_at": 0.0, "text": "Hub: checking…"}
_lock = threading.Lock()


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _check() -> str:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "Hub: offline (HF_HUB_OFFLINE is set): built-in model and data, local files"
    try:
        urllib.request.urlopen(f"{hub_endpoint()}/api/models?limit=1", timeout=5).close()
        return f"Hub: reachable ({hub_endpoint()})"
    except OSError as exc:
        reason = getattr(exc, "reason", exc)
        return f"Hub: not reachable ({reason}); built-in model and data, local files"


def hub_status(wait: bool = False) -> str:
    """The last answer; starts a fresh check in the background when the cached one is old."""
    with _lock:
        stale = time.monotonic() - float(_state["checked_at"]) > _CACHE_S
        if stale:
            _state["checked_at"] = time.monotonic()
    if stale:
        worker = threading.Thread(target=lambda: _state.update(text=_check()), daemon=True)
        worker.start()
        if wait:
            worker.join(6)
    return str(_state["text"])
