"""Talking to a running OpenEnv server over its own wire protocol: HTTP for /health, /metadata and /schema, one
WebSocket per session for reset / step.

The client is deliberately small and synchronous (``websockets.sync``): TRL calls environment methods from its
training loop, one instance per rollout, and every call here has a timeout so a stalled server can never hang a job.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from backend.core.hub_names import hub_endpoint
from backend.core.spec import remote_environment_problem
from backend.environments.address import AddressRefused, Pinned, check_reference, join_path, pin
from backend.environments.wire import ErrorData, Frame, StepData, WrongShape, decode_json, excerpt, parse

T = TypeVar("T")

# One DNS label under hf.space: where the Hub serves a Space. Deeper names are not the Hub's to vouch for.
_SPACE_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.hf\.space")


class EnvironmentUnavailable(RuntimeError):
    """The environment server cannot be reached (or stopped answering): the job cannot go on."""


class EnvironmentActionError(RuntimeError):
    """The environment refused an action or failed while running it; the episode may go on."""


class EnvironmentProtocolError(EnvironmentUnavailable):
    """The server answered, but not as an OpenEnv server does (too big, not JSON, a wrong shape)."""


class EnvironmentRefused(EnvironmentUnavailable):
    """The URL leads somewhere this Space does not connect to: nothing was sent there."""


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
    url = reference.rstrip("/") if reference.startswith(("http://", "https://")) else space_url(reference)
    try:
        check_reference(url)
    except AddressRefused as exc:
        raise EnvironmentRefused(str(exc)) from None
    return url


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


MAX_ANSWER_BYTES = 2 * 1024 * 1024  # /health, /metadata, /schema: a few KB from any OpenEnv server
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # one WebSocket message (an observation may carry a small image)
MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)
_budget: ContextVar[float | None] = ContextVar("environment_budget", default=None)


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Every environment call in this block (this thread) ends by ``seconds`` from now, all of them together: a
    pre-flight of several calls holds its caller for at most that long, whatever each call's own timeout."""
    end = time.monotonic() + seconds
    outer = _budget.get()
    token = _budget.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _budget.reset(token)


def _deadline(timeout_s: float) -> float:
    end = time.monotonic() + timeout_s
    outer = _budget.get()
    return end if outer is None else min(outer, end)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


class _Late(Exception):
    """The call's deadline passed."""


class _TooBig(Exception):
    """The answer went past its size cap."""


def _pin(url: str, deadline: float, *, trusted_ok: bool = True) -> Pinned:
    try:
        return pin(url, timeout_s=_left(deadline), trusted_ok=trusted_ok)
    except AddressRefused as exc:
        raise EnvironmentRefused(str(exc)) from None


def _http_get(url: str, path: str, deadline: float, payload: bytes | None = None) -> bytes:
    """The body of ``GET url/path`` (``POST`` of the JSON ``payload`` when given), following a few redirects (each
    checked like the first; the token goes only where it may), capped in size and ended at ``deadline`` however
    slowly the server sends."""
    target, trusted_ok = url, True
    for _ in range(MAX_REDIRECTS + 1):
        pinned = _pin(target, deadline, trusted_ok=trusted_ok)
        status, location, body = _get_once(pinned, path, auth_headers(target), deadline, payload)
        if status in _REDIRECTS and location:
            from urllib.parse import urljoin

            moved = urljoin(pinned.url(path), location)
            target, path, trusted_ok = moved.split("?", 1)[0].split("#", 1)[0], "", False
            continue
        if status >= 400:
            raise EnvironmentUnavailable(f"{url}{path} answered HTTP {status}")
        return body
    raise EnvironmentUnavailable(f"{url}{path} redirected more than {MAX_REDIRECTS} times")


def _get_once(
    pinned: Pinned, path: str, headers: dict[str, str], deadline: float, payload: bytes | None = None
) -> tuple[int, str | None, bytes]:
    """One GET (a POST of ``payload``) to the address that was checked, speaking to the host the user named."""
    if pinned.tls:
        import ssl

        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            pinned.host, pinned.port, timeout=_left(deadline), context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(pinned.host, pinned.port, timeout=_left(deadline))

    def to_checked_address(_address, timeout=None, source_address=None):
        return socket.create_connection((pinned.address, pinned.port), timeout, source_address)

    conn._create_connection = to_checked_address  # type: ignore[attr-defined]  # never a second lookup
    fired = threading.Event()

    def stop() -> None:  # a read blocked on a trickling server wakes up: the deadline is for the whole call
        fired.set()
        with contextlib.suppress(OSError, AttributeError):
            conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]

    watchdog = threading.Timer(_left(deadline), stop)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request(
            "GET" if payload is None else "POST",
            join_path(pinned.base_path, path) if path else pinned.base_path or "/",
            body=payload,
            headers={"Accept": "application/json", **headers}
            | ({} if payload is None else {"Content-Type": "application/json"}),
        )
        response = conn.getresponse()
        if response.status in _REDIRECTS:
            return response.status, response.getheader("Location"), b""
        declared = response.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
            raise _TooBig
        chunks, size = [], 0
        while True:
            chunk = response.read1(64 * 1024)
            if fired.is_set():
                raise _Late
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise _TooBig
            chunks.append(chunk)
        return response.status, None, b"".join(chunks)
    except (OSError, http.client.HTTPException):
        if fired.is_set():
            raise _Late from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


def get_json(url: str, path: str, timeout_s: float = 10.0, payload: dict[str, Any] | None = None) -> Any:
    """GET ``url`` + ``path`` (joined as URL paths) as JSON, or POST ``payload`` there (the Task API's queries): at
    most MAX_ANSWER_BYTES, within ``timeout_s`` in all (and within the caller's :func:`time_budget`). Every failure
    is an EnvironmentUnavailable sentence."""
    deadline = _deadline(timeout_s)
    allowed_s = deadline - time.monotonic()  # the call's own timeout, or what is left of the caller's budget
    try:
        body = _http_get(url, path, deadline, None if payload is None else json.dumps(payload).encode())
    except _Late:
        raise EnvironmentUnavailable(
            f"the environment at {url} did not answer {path} within {max(allowed_s, 1):.0f} s"
        ) from None
    except _TooBig:
        raise EnvironmentProtocolError(
            f"the environment at {url} sent more than {MAX_ANSWER_BYTES // (1024 * 1024)} MB for {path}; an OpenEnv "
            "answer is a few KB"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise EnvironmentUnavailable(f"the environment server at {url} is not reachable ({reason})") from None
    try:
        return decode_json(body, path)
    except WrongShape as exc:
        raise EnvironmentProtocolError(f"the environment at {url} answered {exc}") from None


def get_answer(url: str, path: str, model: type[T], timeout_s: float = 10.0) -> T:
    """:func:`get_json`, read as the typed ``model``; a wrong shape is an EnvironmentProtocolError sentence."""
    value = get_json(url, path, timeout_s)
    try:
        return parse(model, value, path)
    except WrongShape as exc:
        raise EnvironmentProtocolError(f"the environment at {url} answered {exc}") from None


@dataclass
class StepOutcome:
    """One answer of an environment: the observation, its reward (if any) and whether the episode is done."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


class Session:
    """One environment session (one server-side environment instance) over a WebSocket, to the address that was
    checked (:func:`~backend.environments.address.pin`); each message capped at MAX_MESSAGE_BYTES, each answer
    awaited at most ``message_timeout_s`` (and within the caller's :func:`time_budget`)."""

    def __init__(self, url: str, *, connect_timeout_s: float = 10.0, message_timeout_s: float = 60.0):
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self._ws: Any = None

    @property
    def connected(self) -> bool:
        """Whether a session is open."""
        return self._ws is not None

    def connect(self) -> Session:
        """Open (or reopen) the WebSocket session; EnvironmentUnavailable if the server cannot be reached."""
        from websockets.sync.client import connect

        self.close()
        deadline = _deadline(self.connect_timeout_s)
        pinned = _pin(self.url, deadline)
        scheme = "wss" if pinned.tls else "ws"
        ws_url = pinned.url("/ws").replace(pinned.scheme, scheme, 1)
        sock = None
        try:
            sock = socket.create_connection((pinned.address, pinned.port), timeout=_left(deadline))
            self._ws = connect(
                ws_url,
                sock=sock,
                open_timeout=_left(deadline),  # the whole handshake, however slowly it trickles
                additional_headers=auth_headers(self.url),
                max_size=MAX_MESSAGE_BYTES,
                max_queue=4,
                compression=None,  # no inflating a small frame into a big one
                proxy=None,
                close_timeout=2.0,  # not 10 s when the server stalls
            )
        except Exception as exc:  # noqa: BLE001 - every way a connect fails means the same to the caller
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
            raise EnvironmentUnavailable(
                f"cannot open a session with the environment at {self.url} ({_reason(exc)})"
            ) from None
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
        where = f"a {message.get('type', 'message')}"
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            self.connect()
        timeout_s = min(self.message_timeout_s, _left(_deadline(self.message_timeout_s)))
        try:
            try:
                self._ws.send(json.dumps(message))
            except ConnectionClosed:
                pass  # a refused session sends its error frame, then hangs up: read that frame below
            raw = self._ws.recv(timeout=timeout_s)
        except TimeoutError as exc:
            self.close()  # an answer may still arrive later and would be paired with the next request
            raise StepTimeout(f"the environment at {self.url} did not answer within {timeout_s:.0f} s") from exc
        except (ConnectionClosed, OSError) as exc:
            self._ws = None
            if getattr(getattr(exc, "sent", None), "code", None) == 1009:
                raise EnvironmentProtocolError(
                    f"the environment at {self.url} sent a message of more than "
                    f"{MAX_MESSAGE_BYTES // (1024 * 1024)} MB; the session is closed"
                ) from None
            raise ConnectionLost(f"the connection to the environment at {self.url} was lost ({_reason(exc)})") from exc
        try:
            frame = parse(Frame, decode_json(raw, where), where)
            if frame.type == "error":
                error = parse(ErrorData, frame.data or {}, "an error message")
        except WrongShape as exc:
            self.close()
            raise EnvironmentProtocolError(f"the environment at {self.url} answered {exc}") from None
        if frame.type == "error":
            if error.code == "CAPACITY_REACHED":
                self.close()
                raise CapacityError(f"the environment at {self.url} refused a new session: {excerpt(error.message)}")
            text = error.message
            if error.errors:
                text = f"{text}: " + "; ".join(_describe_validation(e) for e in error.errors[:5])
            raise EnvironmentActionError(text)
        return frame.data or {}

    def reset(self, **kwargs: Any) -> StepOutcome:
        """Start a new episode (``kwargs`` go to the environment's reset) and return its first outcome."""
        return self._outcome(self.request({"type": "reset", "data": kwargs}), "a reset")

    def step(self, action: dict[str, Any]) -> StepOutcome:
        """Send one action and return what the environment answered."""
        return self._outcome(self.request({"type": "step", "data": action}), "a step")

    def _outcome(self, data: dict[str, Any], where: str) -> StepOutcome:
        try:
            step = parse(StepData, data, where)
        except WrongShape as exc:
            raise EnvironmentProtocolError(f"the environment at {self.url} answered {exc}") from None
        return StepOutcome(observation=step.observation, reward=step.reward_value, done=step.done)

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


def _reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words (never a server's answer)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:119] + "\u2026"


class ConnectionLost(EnvironmentUnavailable):
    """The socket dropped mid-session; a new session may still be possible."""


class StepTimeout(EnvironmentUnavailable):
    """No answer within the message timeout. The session is closed; the server may be slow rather than gone, which
    only a new session can tell."""


def _describe_validation(error: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in (error.get("loc") or ()) if part not in ("body", "action"))[:80]
    message = str(error.get("msg", "invalid"))[:200]
    return f"{where}: {message}" if where else message


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
