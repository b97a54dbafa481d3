"""The one guarded client every call to an environment goes through (backend/environments/connection.py): answers
capped in size, calls ended at a total deadline however slowly a server sends, answers read as typed models, and on
a Space no address inside the Space's network unless the owner allows the host. Real sockets on 127.0.0.1: a raw
HTTP server that says exactly the bytes a test gives it, and a real WebSocket server for the session frames."""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from backend.environments import address
from backend.environments.connection import (
    EnvironmentProtocolError,
    EnvironmentRefused,
    EnvironmentUnavailable,
    Session,
    get_json,
    resolve_url,
    time_budget,
)
from backend.environments.launcher import free_port

Reply = Callable[[socket.socket], None]


class RawServer:
    """A TCP server on 127.0.0.1: each connection's request line is recorded and answered by ``reply(conn)``."""

    def __init__(self, reply: Reply):
        self.reply, self.port = reply, free_port()
        self.paths: list[str] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                self.paths.append(head.split(b" ", 2)[1].decode())
                self.reply(conn)
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@contextmanager
def raw_server(reply: Reply) -> Iterator[RawServer]:
    server = RawServer(reply)
    try:
        yield server
    finally:
        server.close()


def answer(body: bytes, status: str = "200 OK") -> Reply:
    def reply(conn: socket.socket) -> None:
        conn.sendall(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return reply


def flood(conn: socket.socket) -> None:
    """``{"status": "healthy"`` and then whitespace that never ends (up to 200 MB, or until the client hangs up)."""
    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"status": "healthy"')
    block = b" " * (1024 * 1024)
    for _ in range(200):
        conn.sendall(block)


def trickle(every_s: float, body: bytes = b'{"status": "healthy"}' + b" " * 1000) -> Reply:
    def reply(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        for byte in body:
            conn.sendall(bytes([byte]))
            time.sleep(every_s)

    return reply


def trickle_headers(conn: socket.socket) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
        conn.sendall(bytes([byte]))
        time.sleep(0.2)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_an_answer_that_never_ends_is_cut_at_its_cap_with_a_sentence():
    before = _rss_mb()
    with raw_server(flood) as server:
        started = time.monotonic()
        with pytest.raises(EnvironmentProtocolError, match=r"sent more than 2 MB for /health") as caught:
            get_json(server.url, "/health", timeout_s=10)
    assert time.monotonic() - started < 5
    assert _rss_mb() - before < 50  # the peak of this process: the old reader read all 200 MB
    assert "healthy" not in str(caught.value)


@pytest.mark.parametrize("reply", [trickle(0.2), trickle_headers], ids=["body", "headers"])
def test_a_trickling_server_is_cut_at_the_calls_deadline_not_a_per_read_one(reply):
    with raw_server(reply) as server:
        started = time.monotonic()
        with pytest.raises(EnvironmentUnavailable, match=r"did not answer /health within 2 s"):
            get_json(server.url, "/health", timeout_s=2)
        assert time.monotonic() - started < 3.5


def test_a_time_budget_ends_several_calls_together():
    with raw_server(trickle(0.2)) as server:
        started = time.monotonic()
        with time_budget(2.0):
            for path in ("/health", "/metadata", "/schema"):
                with pytest.raises(EnvironmentUnavailable):
                    get_json(server.url, path, timeout_s=10)
        assert time.monotonic() - started < 4  # not 3 x 10 s


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/health", b"[1, 2]", "answered /health with a list, not an object"),
        ("/health", b'{"status": 7}', "answered /health with status a number, not a string"),
        ("/health", b"{}", "answered /health without status"),
        ("/metadata", b'"hello"', "answered /metadata with a string, not an object"),
        ("/schema", b"[]", "answered /schema with a list, not an object"),
        ("/schema", b'{"action": "move"}', "answered /schema with action a string, not an object"),
        ("/health", b"<html>not json</html>", "answered /health with something that is not JSON"),
        ("/health", b"[" * 100_000, "answered /health with something that is not JSON"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_a_sentence_naming_the_environment(path, body, expected):
    from backend.environments.connection import get_answer
    from backend.environments.wire import Health, Metadata, Schema

    model = {"/health": Health, "/metadata": Metadata, "/schema": Schema}[path]
    with raw_server(answer(body)) as server:
        with pytest.raises(EnvironmentProtocolError) as caught:
            get_answer(server.url, path, model, timeout_s=5)
    assert str(caught.value) == f"the environment at {server.url} {expected}"


def test_a_long_status_is_quoted_as_a_short_escaped_excerpt():
    from backend.environments.discovery import describe

    status = "<script>" + "x" * 5000
    with raw_server(answer(json.dumps({"status": status}).encode())) as server:
        with pytest.raises(EnvironmentUnavailable) as caught:
            describe(server.url, timeout_s=5)
    text = str(caught.value)
    assert "x" * 61 not in text and len(text) < 200 and "'<script>" in text


def test_endpoint_paths_join_as_url_paths_and_a_query_is_refused_at_the_field():
    with raw_server(answer(b'{"status": "healthy"}')) as server:
        assert get_json(server.url + "/any/path", "/health", timeout_s=5) == {"status": "healthy"}
        assert server.paths == ["/any/path/health"]
        with pytest.raises(ValueError, match="query string or fragment"):
            resolve_url(server.url + "/any/path?x=")
        with pytest.raises(ValueError, match="query string or fragment"):
            resolve_url(server.url + "/#frag")
    assert server.paths == ["/any/path/health"]


# --- on a Space: no address inside the Space's network ---------------------------------------------------------

NON_PUBLIC_FORMS = [
    "http://127.0.0.1:{port}",
    "http://localhost:{port}",
    "http://0.0.0.0:{port}",
    "http://[::1]:{port}",
    "http://2130706433:{port}",
    "http://0x7f000001:{port}",
    "http://127.1:{port}",
    "http://0177.0.0.1:{port}",
    "http://[::ffff:127.0.0.1]:{port}",
    "http://10.0.0.1:{port}",
    "http://169.254.169.254",
    "http://[fe80::1]:{port}",
]


@pytest.fixture
def on_a_space(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "owner/studio")
    monkeypatch.delenv(address.ENVIRONMENT_HOSTS_ENV, raising=False)


def _refusal_of(call) -> str:
    with pytest.raises(EnvironmentRefused) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("form", NON_PUBLIC_FORMS)
def test_on_a_space_every_spelling_of_an_inside_address_is_refused_and_nothing_connects(on_a_space, form):
    with raw_server(answer(b'{"status": "healthy"}')) as server:
        url = form.format(port=server.port)
        for call in (
            lambda: resolve_url(url),
            lambda: get_json(url, "/health", timeout_s=3),
            lambda: Session(url, connect_timeout_s=3).connect(),
        ):
            text = _refusal_of(call)
            assert address.ENVIRONMENT_HOSTS_ENV in text and "not a public environment server" in text
        assert server.connections == 0 and server.paths == []


def test_the_refusal_says_nothing_about_what_is_there(on_a_space):
    closed = free_port()
    with raw_server(answer(b'{"status": "healthy"}')) as server:
        listening = _refusal_of(lambda: get_json(f"http://127.0.0.1:{server.port}", "/health"))
    nothing = _refusal_of(lambda: get_json(f"http://127.0.0.1:{closed}", "/health"))
    unresolvable = _refusal_of(lambda: get_json("http://no-such-host.invalid", "/health"))
    assert listening == nothing
    assert unresolvable.replace("no-such-host.invalid", "127.0.0.1") == nothing


def test_a_name_is_resolved_once_and_the_connection_goes_to_the_checked_address(on_a_space, monkeypatch):
    """DNS rebinding: a name that resolves to a public address for the check and to 127.0.0.1 after it."""
    answers = iter(["93.184.216.34", "127.0.0.1", "127.0.0.1"])
    lookups = []
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(socket, "create_connection", _refuse_network(socket.create_connection))
    with raw_server(answer(b'{"status": "healthy"}')) as server:
        with pytest.raises(EnvironmentUnavailable) as caught:
            get_json(f"http://rebind.example:{server.port}", "/health", timeout_s=3)
        assert server.connections == 0
    assert lookups == ["rebind.example"] and "not reachable" in str(caught.value)


def _refuse_network(real):
    """No network here: a connection to anything but 127.0.0.1 fails at once, as an unreachable host would."""

    def create_connection(address_, *args, **kwargs):
        if address_[0] != "127.0.0.1":
            raise OSError(101, "Network is unreachable")
        return real(address_, *args, **kwargs)

    return create_connection


def test_the_owner_allows_a_host_or_a_host_and_port(on_a_space, monkeypatch):
    with raw_server(answer(b'{"status": "healthy"}')) as server:
        monkeypatch.setenv(address.ENVIRONMENT_HOSTS_ENV, f"127.0.0.1:{server.port}")
        assert get_json(resolve_url(server.url), "/health") == {"status": "healthy"}
        _refusal_of(lambda: get_json(f"http://localhost:{server.port}", "/health"))  # another spelling: not allowed
        monkeypatch.setenv(address.ENVIRONMENT_HOSTS_ENV, "localhost")
        assert get_json(f"http://localhost:{server.port}", "/health") == {"status": "healthy"}


def test_a_redirect_into_the_space_is_refused_like_a_typed_url(on_a_space, monkeypatch):
    with raw_server(answer(b'{"status": "healthy"}')) as inside:
        location = f"http://127.0.0.1:{inside.port}/health"
        with raw_server(answer(b"", f"302 Found\r\nLocation: {location}")) as outside:
            monkeypatch.setenv(address.ENVIRONMENT_HOSTS_ENV, f"127.0.0.1:{outside.port}")
            _refusal_of(lambda: get_json(outside.url, "/health"))
        assert inside.connections == 0


def test_the_studios_own_builtin_server_is_reachable_on_a_space_but_not_when_a_user_types_it(on_a_space):
    from backend.environments.discovery import describe
    from backend.environments.launcher import start_builtin

    with start_builtin("echo") as server:
        assert describe(server.url, timeout_s=10).tools  # trusted: the launcher started it in this process
        _refusal_of(lambda: resolve_url(server.url))  # typed by a user: refused before anything connects
    _refusal_of(lambda: get_json(server.url, "/health"))  # stopped: its port is anybody's now


def test_off_a_space_any_address_is_allowed_as_on_ones_own_machine(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    with raw_server(answer(b'{"status": "healthy"}')) as server:
        assert get_json(f"http://localhost:{server.port}", "/health") == {"status": "healthy"}
        assert resolve_url(f"http://127.0.0.1:{server.port}/") == server.url


# --- the session's WebSocket frames ------------------------------------------------------------------------------


@contextmanager
def ws_server(frames: Callable[[dict], object]) -> Iterator[str]:
    """A WebSocket server at /ws answering each message with ``frames(message)`` (a str/bytes frame, or JSON)."""
    from websockets.sync.server import serve

    def handler(connection):
        for raw in connection:
            message = json.loads(raw)
            if message.get("type") == "close":
                return
            out = frames(message)
            connection.send(out if isinstance(out, str | bytes) else json.dumps(out))

    port = free_port()
    server = serve(handler, "127.0.0.1", port, max_size=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()


def _observation(data: dict) -> dict:
    return {"type": "observation", "data": data}


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (_observation({"observation": {}, "reward": "1.0", "done": True}), "a step with reward a string, not a number"),
        (_observation({"observation": {}, "reward": {"r": 1}}), "a step with reward an object, not a number"),
        (_observation({"observation": {}, "reward": [1]}), "a step with reward a list, not a number"),
        (_observation({"observation": "board", "reward": 1}), "a step with observation a string, not an object"),
        (_observation({"observation": {}, "done": "yes"}), "a step with done a string, not true/false"),
        ("not json at all", "a step with something that is not JSON"),
        ([1, 2, 3], "a step with a list, not an object"),
        ({"type": "observation", "data": [1]}, "a step with data a list, not an object"),
        ({"type": "error", "data": {"code": 5}}, "an error message with code a number, not a string"),
    ],
)
def test_a_session_frame_of_the_wrong_shape_is_a_sentence(frame, expected):
    with ws_server(lambda message: frame) as url:
        session = Session(url, connect_timeout_s=5, message_timeout_s=5)
        with pytest.raises(EnvironmentProtocolError) as caught:
            session.step({"guess": 1})
        session.close()
    assert str(caught.value) == f"the environment at {url} answered {expected}"


def test_a_huge_session_frame_is_refused_at_its_cap():
    with ws_server(lambda message: "x" * (9 * 1024 * 1024)) as url:
        session = Session(url, connect_timeout_s=5, message_timeout_s=10)
        with pytest.raises(EnvironmentProtocolError, match=r"a message of more than 8 MB"):
            session.step({"guess": 1})
        assert not session.connected


def test_a_good_step_still_reads_as_before():
    reply = _observation({"observation": {"board": "x"}, "reward": 1, "done": True})
    with ws_server(lambda message: reply) as url:
        session = Session(url, connect_timeout_s=5, message_timeout_s=5)
        outcome = session.step({"guess": 1})
        session.close()
    assert (outcome.observation, outcome.reward, outcome.done) == ({"board": "x"}, 1.0, True)


def test_a_builtin_environment_server_gets_no_token_nor_the_owners_secrets(monkeypatch):
    """The worker that starts a built-in server holds its user's HF_TOKEN; the app, the owner's OAuth secret."""
    from pathlib import Path

    from backend.environments.launcher import start_builtin

    monkeypatch.setenv("HF_TOKEN", "hf_users_own_token")
    monkeypatch.setenv("OAUTH_CLIENT_SECRET", "owners-secret")
    monkeypatch.setenv("STUDIO_SOME_SETTING", "kept")
    with start_builtin("echo") as server:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert "HF_TOKEN" not in names and "OAUTH_CLIENT_SECRET" not in names
    assert {"STUDIO_SOME_SETTING", "PATH", "PYTHONPATH"} <= names
