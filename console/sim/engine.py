"""Simulated serving engines: real HTTP servers on 127.0.0.1 serving each engine's real
exposition format from a traffic model. They stand in for engines at the outermost edge only.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from console.sim.formats import FORMATS, METRICS_PATHS, llamacpp_slots
from console.sim.traffic import PROFILES, TrafficModel, TrafficSpec

__all__ = [
    "PROFILES",
    "MetricsServer",
    "SimEngine",
    "TrafficModel",
    "TrafficSpec",
    "page_for",
    "start_engine",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    """A real HTTP server on 127.0.0.1 serving ``page()`` at /metrics, in a daemon thread."""

    def __init__(
        self,
        page: Callable[[], str | bytes],
        port: int = 0,
        content_type: str = CONTENT_TYPE,
        extra: dict[str, tuple[Callable[[], str], str]] | None = None,
        path: str = "/metrics",
    ) -> None:
        self.page = page
        self.path = path
        self.content_type = content_type
        self.extra = extra or {}  # path -> (body function, content type)
        self.delay_s = 0.0
        outer = self

        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with outer._conns_lock:
                    outer._conns.add(self.connection)

            def finish(self) -> None:
                with outer._conns_lock:
                    outer._conns.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == outer.path:
                    if outer.delay_s:
                        time.sleep(outer.delay_s)
                    body = outer.page()
                    data = body.encode() if isinstance(body, str) else body
                    self._send(200, data, outer.content_type)
                elif path in outer.extra:
                    body_fn, ctype = outer.extra[path]
                    self._send(200, body_fn().encode(), ctype)
                elif path in ("/health", "/ping"):
                    self._send(200, b"", "text/plain")
                else:
                    self._send(404, b"Not Found", "text/plain")

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hung up, or a chaos page that raised: nothing to print

        self.httpd = Server(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name=f"sim-{self.port}", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop like a dying engine: no new connections, open keep-alive ones cut."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._conns_lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@dataclass
class SimEngine:
    kind: str
    model: TrafficModel
    server: MetricsServer

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()


def page_for(kind: str, model: TrafficModel) -> str:
    writer = FORMATS[kind][0]
    model.advance()
    with model.lock:
        return writer(model)


def start_engine(
    kind: str,
    spec: TrafficSpec | None = None,
    port: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> SimEngine:
    if kind not in FORMATS:
        raise ValueError(f"no simulator for engine kind {kind!r}; available: {', '.join(FORMATS)}")
    spec = spec or TrafficSpec()
    if spec.profile not in PROFILES:
        raise ValueError(
            f"unknown traffic profile {spec.profile!r}; available: {', '.join(PROFILES)}"
        )
    _, buckets, ctype = FORMATS[kind]
    model = TrafficModel(replace(spec), clock=clock, buckets=buckets)
    extra = {}
    if kind == "llamacpp":

        def slots() -> str:
            model.advance()
            with model.lock:
                return llamacpp_slots(model)

        extra["/slots"] = (slots, "application/json; charset=utf-8")
    path = "/metrics"
    if kind in METRICS_PATHS:
        path, other = METRICS_PATHS[kind]

        def stats() -> str:
            model.advance()
            with model.lock:
                return other(model)

        extra["/metrics"] = (stats, "application/json")
    server = MetricsServer(
        lambda: page_for(kind, model), port=port, content_type=ctype, extra=extra, path=path
    ).start()
    return SimEngine(kind, model, server)
