"""One poll cycle: read NVML (in a thread) and scrape every engine (concurrently), keep history,
derive, and return an immutable Frame."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from console import __version__
from console.alerts import AlertBook, Condition
from console.engines import detect_kind, extract, needed_families, profiles
from console.enginestats import EngineHistory, derive
from console.frame import Engine, Frame, Gpu, GpuSource
from console.nvml import NvmlReader
from console.promtext import parse
from console.scraper import scrape_all


@dataclass
class EngineTarget:
    url: str
    kind: str | None = None  # None: detect from the series on the page
    name: str | None = None
    timeout_s: float = 2.0
    headers: dict[str, str] | None = None
    device: str | None = None
    model: str | None = None  # for engines whose series carry no model label

    @property
    def label(self) -> str:
        return self.name or self.url.split("//", 1)[-1].split("/", 1)[0]


@dataclass
class _EngineState:
    target: EngineTarget
    history: EngineHistory = field(default_factory=EngineHistory)
    kind: str | None = None
    model: str | None = None
    restarted_at: float | None = None


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


class Poller:
    def __init__(
        self,
        targets: list[EngineTarget],
        nvml: NvmlReader | None,
        window_s: float = 60.0,
        host: str | None = None,
    ) -> None:
        self.engines = [_EngineState(t, kind=t.kind) for t in targets]
        self.nvml = nvml
        self.window_s = window_s
        self.host = host or socket.gethostname()
        self.alerts = AlertBook()
        self._client: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def poll(self) -> Frame:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=True)
        targets = [(e.target.url, e.target.timeout_s, e.target.headers) for e in self.engines]
        if self.nvml is not None:
            gpu_read = asyncio.to_thread(self.nvml.read)
            (source, gpus), results = await asyncio.gather(gpu_read, scrape_all(self._client, targets))
        else:
            source, gpus = GpuSource(kind="none", error=None), []
            results = await scrape_all(self._client, targets)
        engines = [self._engine(state, res.text, res.error, res.elapsed_s, res.taken_at)
                   for state, res in zip(self.engines, results, strict=True)]
        now = time.time()
        alerts = self.alerts.update(self._conditions(source, gpus, engines), now)
        return Frame(
            taken_at=_utc(now),
            host=self.host,
            inferdeck_version=__version__,
            window_s=self.window_s,
            gpu_source=source,
            gpus=gpus,
            engines=engines,
            alerts=alerts,
        )

    def _engine(self, state: _EngineState, text: str | None, error: str | None, elapsed: float, t: float) -> Engine:
        target = state.target
        common = {"name": target.label, "url": target.url, "scrape_s": elapsed}
        if text is not None:
            page = parse(text, keep=needed_families().__contains__)
            found = detect_kind(page)
            if len(page) == 0 and page.skipped == 0:
                error = f"{target.url} returned no Prometheus samples (is this the engine's /metrics URL?)"
            elif found is None:
                error = f"{target.url} serves no series of a known engine ({', '.join(profiles())})"
            elif target.kind is not None and found != target.kind:
                error = f"{target.url} serves {found} metrics, not {target.kind}: fix the engine kind"
            else:
                if state.kind != found:
                    state.history.clear()
                state.kind = found
                profile = profiles()[found]
                ex = extract(page, profile, t)
                state.model = ex.model or state.model or target.model
                state.history.add(ex)
                d = derive(state.history.points, profile, self.window_s)
                if d.reset_at is not None:
                    state.restarted_at = d.reset_at
                return Engine(
                    **common,
                    kind=found,
                    model=state.model,
                    device=target.device,
                    version_hints=ex.hints,
                    up=True,
                    restarted_at=_utc(state.restarted_at) if state.restarted_at else None,
                    series=dict(ex.series),
                    unavailable=d.unavailable,
                    **d.fields,
                )
        return Engine(**common, kind=state.kind, model=state.model, device=target.device, up=False, error=error)

    @staticmethod
    def _conditions(source: GpuSource, gpus: list[Gpu], engines: list[Engine]) -> list[Condition]:
        out: list[Condition] = []
        if source.kind == "none" and source.error:
            out.append(Condition("gpu-source", "warning", "GPUs", source.error))
        for g in gpus:
            if g.fault:
                out.append(Condition(f"gpu-fault:{g.index}", "critical", f"GPU {g.index}", g.fault))
        for e in engines:
            if not e.up:
                out.append(Condition(f"engine-down:{e.url}", "critical", e.name, f"engine down: {e.error}"))
        return out
