"""One small HTTP/1.1 server of text pages, shared by ``inferdeck export`` and the simulated
engines and exporters. It cannot be wedged by its clients:

* each connection is handled on its own thread, the TLS handshake there too, under a deadline,
  so a client that connects and sends nothing delays no one;
* at most ``max_connections`` at once (more are closed at once), a listen backlog that fits a
  Prometheus fleet's concurrency, an idle or slow client dropped after ``timeout_s``;
* a bearer token, when set, compared in constant time, the scheme in any case (RFC 7235);
* ``stop`` closes the listener and cuts the open keep-alive connections, as a dying process does.
"""

from __future__ import annotations

import hmac
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BACKLOG = 128

# path -> (the body, made at each request; its content type)
Route = tuple[Callable[[], str | bytes], str]


def token_ok(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, the scheme in any case, the token compared in constant
    time."""
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, owner: TextServer, handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in owner.address[0] else socket.AF_INET
        self.owner = owner
        super().__init__(owner.address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        slots = self.owner.slots
        if slots is not None and not slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: refuse now rather than queue forever
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            if slots is not None:
                slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        owner = self.owner
        try:
            if owner.timeout_s is not None:
                request.settimeout(owner.timeout_s)
            if owner.tls is not None:  # the handshake here, on this connection's own thread
                try:
                    request = owner.tls.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            if owner.slots is not None:
                owner.slots.release()

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up mid-answer, or a page that raised: nothing to print


class TextServer:
    """Serves ``routes`` on ``address`` from a daemon thread once started (``port`` is the one
    bound: give 0 for any free port)."""

    def __init__(
        self,
        address: tuple[str, int],
        routes: dict[str, Route],
        *,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        max_connections: int | None = None,
        timeout_s: float | None = None,
        not_found: bytes = b"Not Found",
    ) -> None:
        self.address, self.routes = address, routes
        self.token, self.tls, self.timeout_s = token, tls, timeout_s
        self.slots = threading.BoundedSemaphore(max_connections) if max_connections else None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive for Prometheus; idle ones time out
            timeout = timeout_s

            def setup(self) -> None:
                super().setup()
                with outer._lock:
                    outer._conns.add(self.connection)

            def finish(self) -> None:
                with outer._lock:
                    outer._conns.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                route = outer.routes.get(self.path.split("?", 1)[0])
                if outer.token is not None and not token_ok(
                    self.headers.get("Authorization"), outer.token
                ):
                    self._send(401, b"unauthorized\n", "text/plain")
                elif route is None:
                    self._send(404, not_found, "text/plain")
                else:
                    body = route[0]()
                    self._send(200, body.encode() if isinstance(body, str) else body, route[1])

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                if code == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._listener = _Listener(self, Handler)
        self.port: int = self._listener.server_address[1]
        self._thread = threading.Thread(
            target=self._listener.serve_forever, name=f"textserver-{self.port}", daemon=True
        )

    def start(self) -> TextServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No new connections; open keep-alive ones cut."""
        if self._thread.is_alive():
            self._listener.shutdown()
        self._listener.server_close()
        with self._lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
