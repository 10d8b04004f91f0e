"""The HTTP(S) server behind ``inferdeck export``: serves the newest page and nothing else, and
cannot be wedged by its clients.

* Each connection is handled on its own thread; the TLS handshake happens there too, under a
  deadline, so a client that connects and sends nothing delays no one.
* At most ``max_connections`` at once (more are closed at once); the listen backlog fits a
  Prometheus fleet's concurrency; an idle or slow client is dropped after ``timeout_s``.
* A bearer token, when set, is compared in constant time; the scheme is case-insensitive
  (RFC 7235).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_CONNECTIONS = 64
BACKLOG = 128
TIMEOUT_S = 10.0


class ListenError(ValueError):
    """A --listen value that cannot be served; the message is one sentence."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port), or ListenError."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ListenError(f"--listen {text}: give HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464.")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ListenError(f"--listen {text}: the port must be 1-65535, not {port}.")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ListenError(
                f"--listen {text}: an IPv6 address goes in brackets, e.g. [::1]:9464."
            )
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ListenError(f"--listen {text}: {host!r} is not an IPv6 address.") from None
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_ok(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, the scheme in any case, the token compared in constant
    time."""
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        tls: ssl.SSLContext | None,
        max_connections: int,
        timeout_s: float,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.tls = tls
        self.slots = threading.BoundedSemaphore(max_connections)
        self.timeout_s = timeout_s
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):  # full: refuse now rather than queue forever
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(self.timeout_s)
            if self.tls is not None:  # the handshake here, on this connection's own thread
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve(
    address: tuple[str, int],
    page: Callable[[], str],
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    max_connections: int = MAX_CONNECTIONS,
    timeout_s: float = TIMEOUT_S,
) -> _Server:
    """Start serving ``page()`` at /metrics on a daemon thread; returns the server (shutdown())."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive for Prometheus; idle ones time out
        timeout = timeout_s

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if token is not None and not token_ok(self.headers.get("Authorization"), token):
                self._send(401, b"unauthorized\n", "text/plain")
            elif self.path.split("?", 1)[0] == "/metrics":
                self._send(200, page().encode(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send(404, b"inferdeck export serves /metrics\n", "text/plain")

        def _send(self, code: int, data: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            if code == 401:
                self.send_header("WWW-Authenticate", "Bearer")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: object) -> None:
            pass

    server = _Server(address, Handler, tls, max_connections, timeout_s)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
