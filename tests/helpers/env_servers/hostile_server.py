"""A test-only OpenEnv server that can turn hostile: it floods, trickles, lies about its shapes or echoes a long status.

Byte-level control needs a raw socket, so this is a small asyncio server (HTTP/1.1 and a minimal WebSocket) rather
than openenv's ``create_app``. In ``normal`` mode it speaks the OpenEnv protocol as counter_server.py does: GET
/health, /metadata and /schema, and one WebSocket per session at /ws (reset / step / state / close) for a typed
action with one field, ``message`` (the tool a client builds from it is ``message``). Every other mode is one way a
server on the internet can hurt its client; see MODES. Whatever the mode, it records every request target (path and
query, as sent) and counts accepted connections, so a test can assert that nothing reached it at all.

    with HostileServer("trickle") as server:
        ...  # an environment URL of server.url; afterwards server.targets, server.connections

Each server runs its own event loop on a daemon thread of the test process, on a free port of 127.0.0.1, and is
stopped by ``stop()`` (the context manager's exit). Run as a script (``--port N --mode M``) to poke it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import struct
import threading
import time
from typing import Any

from backend.environments.launcher import free_port

# Floods and trickles end on the server's side too, so that a client without a cap or a deadline (main's before
# issue 36) costs this machine a bounded amount: FLOOD_BYTES of whitespace, TRICKLE_S seconds of dribble.
FLOOD_BYTES = 300 * 2**20
FLOOD_CHUNK = 2**20
TRICKLE_EVERY_S = 2.0
TRICKLE_S = 30.0
HUGE_FRAME_BYTES = 24 * 2**20  # over the ~8 MiB a guarded client takes, under main's 64 MiB
LONG_STATUS = "unwell:" + "z" * 5000  # an internal status page a port scanner would like quoted back in full
CANARY_STATUS = "canary-internal-status"  # what a server on the Space's private network might answer

ACTION_SCHEMA = {
    "title": "ShoutAction",
    "description": "Say something; the server shouts it back.",
    "type": "object",
    "properties": {"message": {"type": "string", "description": "What to say"}},
    "required": ["message"],
}
OBSERVATION_SCHEMA = {
    "title": "ShoutObservation",
    "type": "object",
    "properties": {"shouted": {"type": "string"}, "reward": {"type": "number"}, "done": {"type": "boolean"}},
}
STATE_SCHEMA = {"title": "ShoutState", "type": "object", "properties": {"step_count": {"type": "integer"}}}

# mode -> what it does. HTTP modes act on one path; WS modes act on the answer to a ``step`` (reset and state stay
# well-formed, so a client gets as far as playing).
MODES = {
    "normal": "a well-behaved OpenEnv server",
    "flood": '/health: \'{"status": "healthy"\' then whitespace without end (FLOOD_BYTES, then it hangs up)',
    "trickle": "/health: headers at once, then one byte of the body every TRICKLE_EVERY_S (for TRICKLE_S)",
    "health-list": "/health answers a JSON list",
    "metadata-string": "/metadata answers a JSON string",
    "schema-list": "/schema answers a JSON list",
    "status-echo": "/health answers a 5,000-character status",
    "canary": "/health answers a short private status (a server the Space's owner did not allow)",
    "reward-string": "step: the reward is a word",
    "reward-dict": "step: the reward is an object",
    "reward-list": "step: the reward is a list",
    "frame-not-json": "step: the answer is not JSON",
    "frame-list": "step: the answer is a JSON list",
    "frame-huge": "step: the answer is HUGE_FRAME_BYTES of valid JSON",
}
HTTP_MODES = ("flood", "trickle", "health-list", "metadata-string", "schema-list", "status-echo")
WS_MODES = ("reward-string", "reward-dict", "reward-list", "frame-not-json", "frame-list", "frame-huge")

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class HostileServer:
    """One server on a free port of 127.0.0.1 in one ``mode`` (see MODES); ``mode`` may be changed while it runs."""

    def __init__(self, mode: str = "normal", port: int | None = None, host: str = "127.0.0.1"):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; the modes are {', '.join(MODES)}")
        self.mode, self.host, self.port = mode, host, port or free_port()
        self.targets: list[str] = []  # every request target as sent ("/health", "/ws", "/any/path?x=/health")
        self.connections = 0
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        """``host:port``, as an allow-list names it."""
        return f"{self.host}:{self.port}"

    def forget(self) -> None:
        """Start the request log and the connection count afresh."""
        with self._lock:
            self.targets.clear()
            self.connections = 0

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> HostileServer:
        started = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
            )
            started.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name=f"hostile-{self.mode}-{self.port}", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError(f"the hostile server ({self.mode}) did not start on {self.address}")
        return self

    def stop(self) -> None:
        """Stop listening, cut every open connection, and end the loop's thread."""
        if self._loop is None or self._thread is None:
            return

        async def shut() -> None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- HTTP -----------------------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        with self._lock:
            self.connections += 1
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = (request_line.split(" ") + ["", ""])[:3]
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
            with self._lock:
                self.targets.append(target)
            path = target.split("?", 1)[0]
            if path.endswith("/ws") and headers.get("upgrade", "").lower() == "websocket":
                await self._websocket(reader, writer, headers)
            elif method == "GET":
                await self._answer(writer, path)
            else:
                await self._send_json(writer, {"detail": "Method Not Allowed"}, status="405 Method Not Allowed")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _answer(self, writer: asyncio.StreamWriter, path: str) -> None:
        mode = self.mode
        if path.endswith("/health"):
            if mode == "flood":
                return await self._flood(writer)
            if mode == "trickle":
                return await self._trickle(writer)
            body: Any = {"status": "healthy"}
            if mode == "health-list":
                body = [body]
            elif mode == "status-echo":
                body = {"status": LONG_STATUS}
            elif mode == "canary":
                body = {"status": CANARY_STATUS}
        elif path.endswith("/metadata"):
            body = {"name": "shout", "description": "Shouts back what it is told (test-only hostile server)."}
            if mode == "metadata-string":
                body = "shout"
        elif path.endswith("/schema"):
            body = {"action": ACTION_SCHEMA, "observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA}
            if mode == "schema-list":
                body = [body]
        else:
            return await self._send_json(writer, {"detail": "Not Found"}, status="404 Not Found")
        await self._send_json(writer, body)

    async def _send_json(self, writer: asyncio.StreamWriter, body: Any, status: str = "200 OK") -> None:
        data = json.dumps(body).encode()
        await self._write(
            writer,
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + data,
        )

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.bytes_sent += len(data)

    async def _flood(self, writer: asyncio.StreamWriter) -> None:
        """A valid start of JSON, then whitespace until FLOOD_BYTES (no Content-Length: the end is the hang-up)."""
        await self._write(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        await self._write(writer, b'{"status": "healthy"')
        chunk, sent = b" " * FLOOD_CHUNK, 0
        while sent < FLOOD_BYTES:
            await self._write(writer, chunk)
            sent += len(chunk)

    async def _trickle(self, writer: asyncio.StreamWriter) -> None:
        """Headers at once, then one byte every TRICKLE_EVERY_S: no single read ever waits long."""
        await self._write(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        ends = time.monotonic() + TRICKLE_S
        while time.monotonic() < ends:
            await self._write(writer, b" ")
            await asyncio.sleep(TRICKLE_EVERY_S)

    # --- WebSocket ------------------------------------------------------------------------------------------------
    async def _websocket(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict) -> None:
        accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + _WS_GUID).encode()).digest()).decode()
        await self._write(
            writer,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode(),
        )
        steps = 0
        while True:
            opcode, payload = await _read_frame(reader)
            if opcode == 0x8:  # close: answer it and hang up
                await self._write(writer, _frame(payload[:2], 0x8))
                return
            if opcode == 0x9:  # ping
                await self._write(writer, _frame(payload, 0xA))
                continue
            if opcode != 0x1:
                continue
            try:
                message = json.loads(payload)
                kind, data = message.get("type"), message.get("data") or {}
            except (ValueError, AttributeError):
                await self._send_ws(writer, {"type": "error", "data": {"code": "INVALID_JSON", "message": "bad"}})
                continue
            if kind == "close":
                return
            if kind == "state":
                await self._send_ws(writer, {"type": "state", "data": {"episode_id": None, "step_count": steps}})
            elif kind == "reset":
                steps = 0
                observation = {"shouted": "", "prompt": "Say something to the server."}
                await self._send_ws(writer, _observation(observation, None, False))
            elif kind == "step":
                steps += 1
                await self._step_answer(writer, str(data.get("message", "")))
            else:
                await self._send_ws(
                    writer, {"type": "error", "data": {"code": "UNKNOWN_TYPE", "message": f"unknown type {kind}"}}
                )

    async def _step_answer(self, writer: asyncio.StreamWriter, said: str) -> None:
        mode = self.mode
        observation = {"shouted": said.upper()[:200]}
        if mode == "frame-not-json":
            return await self._write(writer, _frame(b"<html>502 Bad Gateway</html>", 0x1))
        if mode == "frame-list":
            return await self._send_ws(writer, [_observation(observation, 1.0, True)])
        if mode == "frame-huge":
            observation = {"shouted": "A" * HUGE_FRAME_BYTES}
        reward: Any = {"reward-string": "lots", "reward-dict": {"value": 1.0}, "reward-list": [1.0]}.get(mode, 1.0)
        await self._send_ws(writer, _observation(observation, reward, True))

    async def _send_ws(self, writer: asyncio.StreamWriter, message: Any) -> None:
        await self._write(writer, _frame(json.dumps(message).encode(), 0x1))


def _observation(observation: dict, reward: Any, done: bool) -> dict:
    return {"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}}


def _frame(payload: bytes, opcode: int) -> bytes:
    """One unmasked, final frame (a server's frames are never masked)."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 2**16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One client frame (masked, as a client's always are), unmasked; fragments are not expected from clients here."""
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    if size > 2**20:
        raise ConnectionError("a client frame over 1 MiB")
    mask = await reader.readexactly(4) if second & 0x80 else b"\0\0\0\0"
    payload = await reader.readexactly(size)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="normal", choices=list(MODES))
    args = parser.parse_args()
    server = HostileServer(args.mode, port=args.port).start()
    print(f"{args.mode} at {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
