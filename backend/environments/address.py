"""Where an environment URL may lead: on a Space, only to public servers, checked once and pinned.

An environment URL is a stranger's input. On a Space the app shares a network with the platform's own services, so
a URL whose host resolves to a loopback, private, link-local, multicast, reserved or unspecified address (IPv4 or
IPv6, in any numeric spelling the resolver accepts) is refused, unless the Space's owner allows its host with
``STUDIO_ENVIRONMENT_HOSTS`` (comma-separated ``host`` or ``host:port``, as written in the URL). The host is resolved
once and the connection goes to the address that was checked, so a name cannot resolve to a public address for the
check and to a private one for the connection. The refusal is one sentence that says nothing about what is there.

Built-in environment servers the studio starts itself on 127.0.0.1 are trusted by their exact base URL
(:func:`trust`); a user who types such a URL is still refused (:func:`check_reference`). Off a Space every address
is allowed, as on one's own machine.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from backend.core.paths import on_space

ENVIRONMENT_HOSTS_ENV = "STUDIO_ENVIRONMENT_HOSTS"
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}

_trusted: set[tuple[str, int]] = set()
_trusted_lock = threading.Lock()


class AddressRefused(ValueError):
    """The URL leads somewhere this Space does not connect to (or nowhere): a sentence for the user."""


@dataclass(frozen=True)
class Pinned:
    """A URL's host as checked: connect to ``address`` (the resolved one), speak to ``host`` (TLS and Host header)."""

    scheme: str
    host: str
    port: int
    address: str
    family: int
    base_path: str

    @property
    def tls(self) -> bool:
        """Whether the connection is https / wss."""
        return self.scheme in ("https", "wss")

    def url(self, endpoint: str) -> str:
        """The URL of ``endpoint`` (``/health``) under the base path, as the user typed the host."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = _DEFAULT_PORTS.get(self.scheme)
        netloc = host if self.port == default else f"{host}:{self.port}"
        return f"{self.scheme}://{netloc}{join_path(self.base_path, endpoint)}"


def join_path(base_path: str, endpoint: str) -> str:
    """``endpoint`` under ``base_path`` as URL paths join: never a query string, never a fragment.

    >>> join_path("/any/path", "/health"), join_path("", "/ws"), join_path("/", "health")
    ('/any/path/health', '/ws', '/health')
    """
    return base_path.rstrip("/") + "/" + endpoint.lstrip("/")


def trust(url: str) -> None:
    """Allow the studio's own built-in server at ``url`` (``http://127.0.0.1:PORT``) in this process."""
    key = _key(url)
    with _trusted_lock:
        _trusted.add(key)


def untrust(url: str) -> None:
    """Forget a built-in server that stopped (its port may be reused by anything)."""
    key = _key(url)
    with _trusted_lock:
        _trusted.discard(key)


def _key(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return ((parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme, 80))


def allowed_hosts() -> set[str]:
    """The owner's ``STUDIO_ENVIRONMENT_HOSTS``: lowercased ``host`` and ``host:port`` entries.

    >>> os.environ[ENVIRONMENT_HOSTS_ENV] = " Env.Example.org , 10.0.0.5:8000,"
    >>> sorted(allowed_hosts())
    ['10.0.0.5:8000', 'env.example.org']
    >>> del os.environ[ENVIRONMENT_HOSTS_ENV]
    """
    raw = os.environ.get(ENVIRONMENT_HOSTS_ENV, "")
    return {entry.strip().lower() for entry in raw.split(",") if entry.strip()}


def _owner_allows(host: str, port: int) -> bool:
    allowed = allowed_hosts()
    bare = host.strip("[]").lower()
    return bare in allowed or f"{bare}:{port}" in allowed or f"[{bare}]:{port}" in allowed


def is_public(address: str) -> bool:
    """Whether a resolved address is one a Space may connect to: not loopback, private, link-local, multicast,
    reserved or unspecified (an IPv4 address mapped into IPv6, or carried in 6to4 or Teredo, is judged as IPv4).

    >>> [is_public(a) for a in ("8.8.8.8", "127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "::ffff:127.0.0.1")]
    [True, False, False, False, False, False]
    >>> [is_public(a) for a in ("0.0.0.0", "::", "224.0.0.1", "fd00::1", "fe80::1", "100.64.0.1", "2606:4700::1")]
    [False, False, False, False, False, False, True]
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None and not is_public(str(embedded)):
            return False
    blocked = (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )
    return not blocked


def _refusal(host: str) -> AddressRefused:
    shown = host if len(host) <= 80 else host[:79] + "\u2026"
    return AddressRefused(
        f"{shown!r} is not a public environment server this Space may connect to; give the URL of a public server "
        f"or a Hub Space id (the Space's owner can allow a host with {ENVIRONMENT_HOSTS_ENV})"
    )


def _parts(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise AddressRefused("the environment URL's host or port cannot be read") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        raise AddressRefused("the environment URL must be http(s) with a host and no user name")
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme], parts.path


def check_reference(url: str) -> None:
    """Refuse, on a Space, a URL the user typed whose host is written as a non-public address (``127.0.0.1``,
    ``[::1]``, ``localhost``, ``2130706433``...), before anything is resolved; the studio's own trust does not apply
    to what a user types. Names are checked when connecting (:func:`pin`)."""
    if not on_space():
        return
    _, host, port, _ = _parts(url)
    if _owner_allows(host, port):
        return
    if host in ("localhost", "localhost.") or host.endswith(".localhost"):
        raise _refusal(host)
    try:
        literal = socket.inet_aton(host)  # every numeric IPv4 spelling: 127.1, 0x7f000001, 2130706433, 0177.0.0.1
        address = socket.inet_ntoa(literal)
    except OSError:
        try:
            address = str(ipaddress.ip_address(host.strip("[]")))
        except ValueError:
            return
    if not is_public(address):
        raise _refusal(host)


def pin(url: str, timeout_s: float = 10.0, *, trusted_ok: bool = True) -> Pinned:
    """Resolve ``url``'s host once and return the address to connect to, after checking it may be reached.

    Off a Space (or for a host the owner allows, or a built-in server of this process) the first address is used as
    it is; on a Space every address the name resolves to must be public, or the URL is refused (AddressRefused, one
    sentence whether or not anything listens there). A name that does not resolve is refused with the same sentence
    on a Space (what resolves inside the Space's network is not for a stranger to learn). ``trusted_ok=False`` (a
    redirect a server chose) ignores the built-in servers' trust."""
    scheme, host, port, path = _parts(url)
    checked = on_space() and not _owner_allows(host, port)
    with _trusted_lock:
        if trusted_ok and (host, port) in _trusted:
            checked = False
    try:
        infos = _resolve(host, port, timeout_s)
    except OSError:
        if checked:
            raise _refusal(host) from None
        raise AddressRefused(f"the environment's host {host!r} cannot be found; check the URL") from None
    if checked and (not infos or not all(is_public(str(info[4][0])) for info in infos)):
        raise _refusal(host)
    family, address = infos[0][0], str(infos[0][4][0])
    return Pinned(scheme=scheme, host=host, port=port, address=address, family=family, base_path=path)


def _resolve(host: str, port: int, timeout_s: float) -> list:
    """``getaddrinfo`` on a helper thread, given at most ``timeout_s`` (a resolver that stalls holds no caller)."""
    result: list = []
    failure: list[BaseException] = []

    def lookup() -> None:
        try:
            result.extend(socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failure.append(exc)

    thread = threading.Thread(target=lookup, name="studio-env-resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise OSError(f"resolving {host} took longer than {timeout_s:.0f} s")
    if failure:
        raise OSError(str(failure[0]))
    return result
