"""One small HTTP/1.1 server of text pages, shared by ``inferdeck export`` and the simulated
engines and exporters. It cannot be wedged by its clients:

* each connection is handled on its own thread, the TLS handshake there too, so a client that
  connects and sends nothing delays no one;
* a request's head (TLS handshake, request line, headers) must arrive whole within
  ``timeout_s`` of the connection's turn, however slowly it trickles (one byte every few
  seconds never resets it); at most ``max_connections`` connections wait for their heads, at
  most PER_ADDRESS of them from one address, and a new connection over either cap cuts the one
  that has waited longest, so trickling clients cannot keep a scraper out;
* a connection holds one of ``max_connections`` answer slots only once its head is read and its
  token checked (no slot: 503 at once), and an idle or slow reader is dropped after
  ``timeout_s`` per read;
* GET and HEAD (the same headers, no body: load balancers' health checks);
* a bearer token, when set, compared in constant time, the scheme in any case (RFC 7235); the
  ``open`` paths (a health check a kubelet's probe asks without credentials) are served without it
  and say nothing a token guards;
* a route that cannot answer now raises ``Unavailable``: 503 with its sentence;
* ``stop`` closes the listener and cuts the open keep-alive connections, as a dying process does.
"""

from __future__ import annotations

import hmac
import io
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BACKLOG = 128
PER_ADDRESS = 32  # connections one address may have waiting for their request heads

# path -> (the body, made at each request; its content type)
Route = tuple[Callable[[], str | bytes], str]


class Unavailable(Exception):
    """Raised by a route that cannot answer now (a health check before the first poll): 503 with
    the message as the body."""


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

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        owner = self.owner
        if owner.timeout_s is not None:
            request.settimeout(owner.timeout_s)
        if owner.tls is not None:  # the handshake here, on this connection's own thread
            raw = request
            owner.heads.wait(raw, client_address)
            try:
                request = owner.tls.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                self.shutdown_request(raw)
                return
            finally:
                owner.heads.done(raw)
        super().process_request_thread(request, client_address)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up mid-answer, or a page that raised: nothing to print


class _Heads:
    """Connections waiting for their request heads, oldest first, each cut at its deadline or
    when a newer one needs its place: over ``cap`` in all (idle keep-alive ones included), or
    over PER_ADDRESS from one address among those whose head has begun to arrive (so a client's
    idle keep-alive connections never count against it)."""

    def __init__(self, cap: int | None, deadline_s: float | None) -> None:
        self.cap, self.deadline_s = cap, deadline_s
        self._waiting: OrderedDict[socket.socket, tuple[float, str, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if deadline_s is not None:
            threading.Thread(target=self._reap, name="textserver-heads", daemon=True).start()

    def wait(self, conn: socket.socket, address: Any, begun: bool = True) -> None:
        """``conn`` waits for a head from now (``begun``: its first byte has come)."""
        host = str(address[0]) if isinstance(address, tuple) else str(address)
        cut: list[socket.socket] = []
        with self._lock:
            self._waiting.pop(conn, None)
            same = [c for c, (_, h, b) in self._waiting.items() if h == host and b]
            if begun and len(same) >= PER_ADDRESS:
                cut.append(same[0])
            elif self.cap is not None and len(self._waiting) >= self.cap:
                cut.append(next(iter(self._waiting)))
            for c in cut:
                self._waiting.pop(c, None)
            self._waiting[conn] = (time.monotonic(), host, begun)
        for c in cut:
            _cut(c)

    def done(self, conn: socket.socket) -> None:
        with self._lock:
            self._waiting.pop(conn, None)

    def _reap(self) -> None:
        assert self.deadline_s is not None
        while not self._stop.wait(min(0.25, self.deadline_s / 4)):
            late = time.monotonic() - self.deadline_s
            with self._lock:
                cut = [c for c, (t, _, _) in self._waiting.items() if t < late]
                for c in cut:
                    self._waiting.pop(c, None)
            for c in cut:
                _cut(c)

    def stop(self) -> None:
        self._stop.set()


def _cut(conn: socket.socket) -> None:
    """Ends a connection its thread is reading: the read returns, the thread finishes."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    """One connection's requests: the head whole within the deadline, the token before a slot,
    then the route's page (GET) or its length alone (HEAD)."""

    protocol_version = "HTTP/1.1"  # keep-alive for Prometheus; idle ones time out
    server: _Listener

    @property
    def outer(self) -> TextServer:
        return self.server.owner

    def setup(self) -> None:  # (the listener gave the socket its timeout)
        super().setup()
        with self.outer._lock:
            self.outer._conns.add(self.connection)

    def finish(self) -> None:
        outer = self.outer
        outer.heads.done(self.connection)
        with outer._lock:
            outer._conns.discard(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        # idle until the first byte; then the head (request line and headers) whole within the
        # deadline, however slowly it comes
        heads = self.outer.heads
        heads.wait(self.connection, self.client_address, begun=False)
        try:
            assert isinstance(self.rfile, io.BufferedReader)  # rbufsize -1: buffered
            try:
                first = self.rfile.peek(1)
            except (OSError, ValueError):
                first = b""
            if not first:
                self.close_connection = True
                return
            heads.wait(self.connection, self.client_address)
            super().handle_one_request()
        finally:
            heads.done(self.connection)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        outer = self.outer
        outer.heads.done(self.connection)  # the head is read: no deadline on it now
        path = self.path.split("?", 1)[0]
        route = outer.routes.get(path)
        if (
            outer.token is not None
            and path not in outer.open_paths
            and not token_ok(self.headers.get("Authorization"), outer.token)
        ):
            self._send(401, b"unauthorized\n", "text/plain", body)
        elif route is None:
            self._send(404, outer.not_found, "text/plain", body)
        elif outer.slots is not None and not outer.slots.acquire(blocking=False):
            self.close_connection = True
            self._send(503, b"busy: try again\n", "text/plain", body)
        else:
            try:
                page = route[0]()
                data = page.encode() if isinstance(page, str) else page
                self._send(200, data, route[1], body)
            except Unavailable as exc:
                self._send(503, f"{exc}\n".encode(), "text/plain", body)
            finally:
                if outer.slots is not None:
                    outer.slots.release()

    def _send(self, code: int, data: bytes, ctype: str, body: bool = True) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if code == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        if code == 503:
            self.send_header("Retry-After", "1")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


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
        open_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.address, self.routes = address, routes
        self.open_paths = open_paths
        self.token, self.tls, self.timeout_s = token, tls, timeout_s
        self.slots = threading.BoundedSemaphore(max_connections) if max_connections else None
        self.heads = _Heads(max_connections, timeout_s)
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.not_found = not_found
        self._listener = _Listener(self, _Handler)
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
        self.heads.stop()
        with self._lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
