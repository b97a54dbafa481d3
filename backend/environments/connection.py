"""Talking to a running OpenEnv server over its own wire protocol: HTTP for /health, /metadata and /schema, one
WebSocket per session for reset / step.

The client is deliberately small and synchronous (``websockets.sync``): TRL calls environment methods from its
training loop, one instance per rollout, and every call here has a timeout so a stalled server can never hang a job.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from backend.core.hub_names import hub_endpoint
from backend.core.spec import remote_environment_problem

# One DNS label under hf.space: where the Hub serves a Space. Deeper names are not the Hub's to vouch for.
_SPACE_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.hf\.space")


class EnvironmentUnavailable(RuntimeError):
    """The environment server cannot be reached (or stopped answering): the job cannot go on."""


class EnvironmentActionError(RuntimeError):
    """The environment refused an action or failed while running it; the episode may go on."""


class CapacityError(EnvironmentUnavailable):
    """The server refused a new session because it already holds as many as it allows."""


def space_url(space_id: str) -> str:
    """The URL a Hugging Face Space is served from: ``openenv/echo_env`` -> ``https://openenv-echo-env.hf.space``."""
    owner, name = space_id.split("/", 1)
    host = re.sub(r"[^a-z0-9-]", "-", f"{owner}-{name}".lower())
    return f"https://{host}.hf.space"


def resolve_url(reference: str) -> str:
    """Turn a Space id or a URL into the server's base URL (built-in names are resolved by the launcher)."""
    reference = reference.strip()
    problem = remote_environment_problem(reference)
    if problem:
        raise ValueError(problem)
    return reference.rstrip("/") if reference.startswith(("http://", "https://")) else space_url(reference)


def token_may_go_to(url: str) -> bool:
    """Whether a Hugging Face token may be sent to ``url``: https, no user-info, and the host is one Space
    (``<one label>.hf.space``) or the Hub itself (``HF_ENDPOINT``'s host, default huggingface.co).

    >>> token_may_go_to("https://openenv-echo-env.hf.space/ws"), token_may_go_to("http://attacker/x.hf.space")
    (True, False)
    """
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    if parts.scheme.lower() not in ("https", "wss") or "@" in parts.netloc or not parts.hostname:
        return False
    host = parts.hostname.lower().rstrip(".")
    hub_host = (urlsplit(hub_endpoint()).hostname or "").lower()
    return _SPACE_HOST.fullmatch(host) is not None or host == hub_host


def auth_headers(url: str) -> dict[str, str]:
    """A bearer token (HF_TOKEN) for private Spaces and the Hub; nothing for any other URL (see token_may_go_to)."""
    token = os.environ.get("HF_TOKEN")
    if token and token_may_go_to(url):
        return {"Authorization": f"Bearer {token}"}
    return {}


class _TokenStaysOnRedirect(urllib.request.HTTPRedirectHandler):
    """urllib copies every header onto a redirect, to any host: the token follows only where it may go."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        follow = super().redirect_request(req, fp, code, msg, headers, newurl)
        if follow is not None and not token_may_go_to(newurl):
            follow.remove_header("Authorization")
        return follow


_OPENER = urllib.request.build_opener(_TokenStaysOnRedirect)


def get_json(url: str, path: str, timeout_s: float = 10.0) -> Any:
    """GET ``url + path`` as JSON, with a clear EnvironmentUnavailable when the server cannot be reached."""
    request = urllib.request.Request(url + path, headers={"Accept": "application/json", **auth_headers(url)})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:  # noqa: S310 - URL chosen by the user
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise EnvironmentUnavailable(f"{url}{path} answered HTTP {exc.code} ({exc.reason})") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EnvironmentUnavailable(f"the environment server at {url} is not reachable ({reason})") from exc
    except ValueError as exc:
        raise EnvironmentUnavailable(f"{url}{path} did not answer with JSON; is this an OpenEnv server?") from exc


@dataclass
class StepOutcome:
    """One answer of an environment: the observation, its reward (if any) and whether the episode is done."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


class Session:
    """One environment session (one server-side environment instance) over a WebSocket."""

    def __init__(self, url: str, *, connect_timeout_s: float = 10.0, message_timeout_s: float = 60.0):
        self.url = url
        self.ws_url = re.sub(r"^http", "ws", url) + "/ws"
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self._ws = None

    @property
    def connected(self) -> bool:
        """Whether a session is open."""
        return self._ws is not None

    def connect(self) -> Session:
        """Open (or reopen) the WebSocket session; EnvironmentUnavailable if the server cannot be reached."""
        from websockets.sync.client import connect

        self.close()
        try:
            self._ws = connect(
                self.ws_url,
                open_timeout=self.connect_timeout_s,
                additional_headers=auth_headers(self.url),
                max_size=64 * 1024 * 1024,
                proxy=None,
                close_timeout=2.0,  # not 10 s when the server stalls
            )
        except Exception as exc:  # noqa: BLE001 - every way a connect fails means the same to the caller
            raise EnvironmentUnavailable(f"cannot open a session with the environment at {self.url} ({exc})") from exc
        return self

    def open_checked(self) -> Session:
        """Connect and make sure the server kept the session: a server at capacity refuses it here (CapacityError).
        A server that answers the check with "not initialized, call reset() first" has kept it all the same."""
        self.connect()
        try:
            self.request({"type": "state"})
        except EnvironmentActionError:
            pass
        return self

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message and return the ``data`` of the answer; errors from the server become exceptions."""
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            self.connect()
        try:
            try:
                self._ws.send(json.dumps(message))
            except ConnectionClosed:
                pass  # a refused session sends its error frame, then hangs up: read that frame below
            raw = self._ws.recv(timeout=self.message_timeout_s)
        except TimeoutError as exc:
            self.close()  # an answer may still arrive later and would be paired with the next request
            raise StepTimeout(
                f"the environment at {self.url} did not answer within {self.message_timeout_s:.0f} s"
            ) from exc
        except (ConnectionClosed, OSError) as exc:
            self._ws = None
            raise ConnectionLost(f"the connection to the environment at {self.url} was lost ({exc})") from exc
        answer = json.loads(raw)
        if answer.get("type") == "error":
            data = answer.get("data") or {}
            code, text = data.get("code", "ERROR"), data.get("message", "unknown error")
            if code == "CAPACITY_REACHED":
                self.close()
                raise CapacityError(f"the environment at {self.url} refused a new session: {text}")
            if data.get("errors"):
                text = f"{text}: " + "; ".join(_describe_validation(e) for e in data["errors"])
            raise EnvironmentActionError(text)
        return answer.get("data") or {}

    def reset(self, **kwargs: Any) -> StepOutcome:
        """Start a new episode (``kwargs`` go to the environment's reset) and return its first outcome."""
        return _outcome(self.request({"type": "reset", "data": kwargs}))

    def step(self, action: dict[str, Any]) -> StepOutcome:
        """Send one action and return what the environment answered."""
        return _outcome(self.request({"type": "step", "data": action}))

    def close(self) -> None:
        """Say goodbye to the server and close the socket; a dead socket is not an error."""
        if self._ws is None:
            return
        ws, self._ws = self._ws, None
        try:
            ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - closing a dead socket is not an error
            pass
        try:
            ws.close()
        except Exception:  # noqa: BLE001
            pass


class ConnectionLost(EnvironmentUnavailable):
    """The socket dropped mid-session; a new session may still be possible."""


class StepTimeout(EnvironmentUnavailable):
    """No answer within the message timeout. The session is closed; the server may be slow rather than gone, which
    only a new session can tell."""


def _outcome(data: dict[str, Any]) -> StepOutcome:
    reward = data.get("reward")
    return StepOutcome(
        observation=data.get("observation") or {},
        reward=None if reward is None else float(reward),
        done=bool(data.get("done", False)),
    )


def _describe_validation(error: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()) if part not in ("body", "action"))
    return f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid"))


def probe_capacity(url: str, needed: int, *, timeout_s: float = 10.0) -> int:
    """Open ``needed`` sessions at once; return how many the server accepted (== needed when it allows enough)."""
    sessions: list[Session] = []
    try:
        for _ in range(needed):
            session = Session(url, connect_timeout_s=timeout_s, message_timeout_s=timeout_s)
            try:
                session.open_checked()
            except CapacityError:
                break
            sessions.append(session)
        return len(sessions)
    finally:
        for session in sessions:
            session.close()
