"""Simulated serving engines: real HTTP servers on 127.0.0.1 serving each engine's real
exposition format from a traffic model. They stand in for engines at the outermost edge only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from console.out.textserver import Route, TextServer
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


class MetricsServer(TextServer):
    """A real HTTP server on 127.0.0.1 serving ``page()`` at ``path`` (and ``extra`` routes, a
    /health and a /ping), in a daemon thread; ``delay_s`` holds each page back that long (a hung
    engine), ``page`` may be swapped while it serves."""

    def __init__(
        self,
        page: Callable[[], str | bytes],
        port: int = 0,
        content_type: str = CONTENT_TYPE,
        extra: dict[str, tuple[Callable[[], str], str]] | None = None,
        path: str = "/metrics",
    ) -> None:
        self.page = page
        self.delay_s = 0.0

        def body() -> str | bytes:
            if self.delay_s:
                time.sleep(self.delay_s)
            return self.page()

        routes: dict[str, Route] = {
            "/health": (lambda: b"", "text/plain"),
            "/ping": (lambda: b"", "text/plain"),
            **(extra or {}),
            path: (body, content_type),
        }
        super().__init__(("127.0.0.1", port), routes)
        self.url = f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> MetricsServer:
        super().start()
        return self


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
