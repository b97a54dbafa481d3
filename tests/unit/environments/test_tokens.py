"""The Hub token goes only to Hugging Face: one rule on a table of URLs, and a real server that must not receive it."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.environments import connection
from backend.environments.connection import EnvironmentUnavailable, Session, auth_headers, get_json, token_may_go_to
from backend.environments.discovery import describe
from backend.environments.launcher import free_port

TOKEN = "hf_secret_never_leaves"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://openenv-echo-env.hf.space", True),
        ("https://openenv-echo-env.hf.space/ws", True),
        ("HTTPS://Openenv-Echo.HF.space:443/", True),
        ("https://huggingface.co/api/whoami-v2", True),
        ("http://attacker/x.hf.space", False),
        ("http://openenv-echo-env.hf.space", False),  # plain http: anyone on the path reads it
        ("https://x.hf.space.evil.com", False),
        ("https://user:pw@x.hf.space", False),
        ("https://@x.hf.space", False),
        ("https://evil.com/?u=x.hf.space", False),
        ("https://evil.com#.hf.space", False),
        ("https://evil.com/x.hf.space", False),
        ("https://a.b.hf.space", False),  # one label only: the Hub serves Spaces at <name>.hf.space
        ("https://hf.space", False),
        ("https://x.hf.space:notaport/", False),
        ("https://x.hf.space\\@evil.com", False),
        ("https://huggingface.co.evil.com", False),
        ("ftp://x.hf.space", False),
        ("", False),
    ],
)
def test_the_token_goes_only_to_spaces_and_the_hub(url, allowed, monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert token_may_go_to(url) is allowed
    assert auth_headers(url) == ({"Authorization": f"Bearer {TOKEN}"} if allowed else {})


def test_the_hub_endpoint_is_where_hf_endpoint_points(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org")
    assert token_may_go_to("https://hub.example.org/api") and not token_may_go_to("https://huggingface.co/api")


class CaptureServer:
    """A tiny HTTP server on 127.0.0.1 that records each request's path and headers and answers ``{}``
    (or redirects to ``redirect_to``)."""

    def __init__(self, redirect_to: str | None = None):
        self.requests: list[tuple[str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                outer.requests.append((self.path, dict(self.headers)))
                if redirect_to:
                    self.send_response(307)
                    self.send_header("Location", redirect_to + self.path)
                    self.end_headers()
                    return
                body = b'{"status": "healthy"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def authorizations(self) -> list[str]:
        return [h[k] for _, h in self.requests for k in h if k.lower() == "authorization"]

    def __enter__(self) -> "CaptureServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_describe_and_a_session_do_not_hand_the_token_to_a_url_that_merely_mentions_hf_space(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with CaptureServer() as capture:
        url = f"{capture.url}/x.hf.space"
        with pytest.raises(EnvironmentUnavailable):  # the capture server is no OpenEnv server
            describe(url, timeout_s=5)
        with pytest.raises(EnvironmentUnavailable):
            Session(url, connect_timeout_s=5).connect()
    assert [path for path, _ in capture.requests][:2] == ["/x.hf.space/health", "/x.hf.space/metadata"]
    assert any(path == "/x.hf.space/ws" for path, _ in capture.requests), "the WebSocket handshake was recorded"
    assert capture.authorizations() == [], "no request carried the token"


def test_a_redirect_does_not_carry_the_token_to_another_host(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with CaptureServer() as elsewhere, CaptureServer(redirect_to=elsewhere.url) as trusted:
        # Stand-in for a Space: the first host is trusted, the one it redirects to is not.
        monkeypatch.setattr(connection, "token_may_go_to", lambda url: url.startswith(trusted.url))
        assert get_json(trusted.url, "/health", timeout_s=5) == {"status": "healthy"}
    assert trusted.authorizations() == [f"Bearer {TOKEN}"], "the trusted host got it"
    assert elsewhere.requests and elsewhere.authorizations() == [], "the host it redirected to did not"
