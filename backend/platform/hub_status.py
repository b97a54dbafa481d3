"""Is the Hugging Face Hub reachable from here? Asked once in the background and cached, so pages never wait.

Hub lookups at submit time ask ``hub_reachable()`` first: huggingface_hub retries an unreachable endpoint with
backoff for ~23 s before giving up, and then blames the id ("not found"), so the studio says why at once instead.
Which endpoint, and whether the Hub is switched off, is backend/core/hub_names.py's to say.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

from backend.core.hub_names import hub_endpoint, hub_offline

_CACHE_S = 300.0
# A lookup trusts an answer this young; older, it probes again (a quick request: refused at once when offline).
_LOOKUP_MAX_AGE_S = 60.0
_PROBE_TIMEOUT_S = 3.0
# The sentence every fast Hub refusal uses (the header says the same in its own words).
HUB_UNREACHABLE = "the Hub is not reachable from this machine"
_state: dict[str, Any] = {
    "checked_at": 0.0,
    "text": "Hub: checking…",
    "reachable": None,
    "endpoint": None,
    "probed_at": 0.0,
}
_lock = threading.Lock()


def _probe(timeout: float) -> tuple[bool, str]:
    """(reachable, the header's line). Any HTTP answer counts as reachable: the server is there."""
    if hub_offline():
        return False, "Hub: offline (HF_HUB_OFFLINE is set): built-in model and data, local files"
    endpoint = hub_endpoint()
    try:
        urllib.request.urlopen(f"{endpoint}/api/models?limit=1", timeout=timeout).close()
    except urllib.error.HTTPError:
        pass
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"Hub: not reachable ({reason}); built-in model and data, local files"
    return True, f"Hub: reachable ({endpoint})"


def _record(endpoint: str, reachable: bool, text: str) -> None:
    _state.update(reachable=reachable, text=text, endpoint=endpoint, probed_at=time.monotonic())


def _check() -> str:
    endpoint = hub_endpoint()
    reachable, text = _probe(5)
    _record(endpoint, reachable, text)
    return text


def hub_status(wait: bool = False) -> str:
    """The last answer; starts a fresh check in the background when the cached one is old."""
    with _lock:
        stale = time.monotonic() - float(_state["checked_at"]) > _CACHE_S
        if stale:
            _state["checked_at"] = time.monotonic()
    if stale:
        worker = threading.Thread(target=_check, daemon=True)
        worker.start()
        if wait:
            worker.join(6)
    return str(_state["text"])


def hub_reachable() -> bool:
    """Whether a Hub lookup can succeed now: False at once under HF_HUB_OFFLINE, else the header's recent answer
    for this endpoint, else a quick probe (at most ``_PROBE_TIMEOUT_S``), remembered for the header too."""
    if hub_offline():
        return False
    endpoint = hub_endpoint()
    fresh = time.monotonic() - float(_state["probed_at"]) < _LOOKUP_MAX_AGE_S
    if fresh and _state["endpoint"] == endpoint and _state["reachable"] is not None:
        return bool(_state["reachable"])
    reachable, text = _probe(_PROBE_TIMEOUT_S)
    _record(endpoint, reachable, text)
    return reachable
