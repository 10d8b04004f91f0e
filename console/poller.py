"""One poll cycle: read NVML (in a thread) and scrape every engine (concurrently, each with its
own timeout), keep history, derive, and return an immutable Frame."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from console import __version__
from console.alerts import AlertBook
from console.engines import detect_kind, extract, needed_families, profiles
from console.enginestats import EngineHistory, derive
from console.frame import Engine, Frame, GpuSource
from console.headroom import HeadroomState, evaluate
from console.linking import link
from console.llamaslots import slots_kv, slots_url
from console.meters import service_meters
from console.nvml import NvmlReader
from console.plan import Plan
from console.promtext import parse
from console.scraper import ScrapeResult, scrape
from console.slo import OutcomeHistory


@dataclass
class EngineTarget:
    url: str
    kind: str | None = None  # None: detect from the series on the page
    name: str | None = None
    timeout_s: float = 2.0
    headers: dict[str, str] | None = None
    verify_tls: bool = True
    interval_s: float | None = None  # None: every poll
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
    last: Engine | None = None
    next_due: float = 0.0


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


class Poller:
    def __init__(
        self,
        targets: list[EngineTarget],
        nvml: NvmlReader | None,
        window_s: float = 60.0,
        host: str | None = None,
        plan: Plan | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engines = [_EngineState(t, kind=t.kind) for t in targets]
        self.nvml = nvml
        self.window_s = window_s
        self.host = host or socket.gethostname()
        self.plan = plan or Plan()
        self.clock = clock
        self.alerts = AlertBook()
        self.headroom = HeadroomState()
        self.burn: dict[str, OutcomeHistory] = {}
        self._clients: dict[bool, httpx.AsyncClient] = {}

    def _client(self, verify: bool) -> httpx.AsyncClient:
        client = self._clients.get(verify)
        if client is None:
            client = self._clients[verify] = httpx.AsyncClient(follow_redirects=True, verify=verify)
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()

    async def poll(self) -> Frame:
        now = self.clock()
        jobs = [self._poll_engine(state, now) for state in self.engines]
        if self.nvml is not None:
            (source, gpus), *engines = await asyncio.gather(asyncio.to_thread(self.nvml.read), *jobs)
        else:
            source, gpus = GpuSource(kind="none", error=None), []
            engines = list(await asyncio.gather(*jobs))
        gpus, engines = link(gpus, list(engines))
        now = self.clock()
        services, conditions = evaluate(self.plan, source, gpus, engines, self.headroom, now)
        histories = {st.target.label: st.history.points for st in self.engines}
        kinds = {st.target.label: profiles()[st.kind] for st in self.engines if st.kind}
        services, node_cost, burn = service_meters(self.plan, services, histories, kinds, self.burn, gpus, now)
        alerts = self.alerts.update(conditions + burn, now)
        return Frame(
            taken_at=_utc(now),
            host=self.host,
            inferdeck_version=__version__,
            window_s=self.window_s,
            gpu_source=source,
            gpus=gpus,
            engines=engines,
            services=services,
            cost=node_cost,
            alerts=alerts,
        )

    async def _poll_engine(self, state: _EngineState, now: float) -> Engine:
        target = state.target
        if state.last is not None and target.interval_s and now < state.next_due:
            return state.last
        state.next_due = now + (target.interval_s or 0.0)
        client = self._client(target.verify_tls)
        if state.kind == "llamacpp":
            res, slots = await asyncio.gather(
                scrape(client, target.url, target.timeout_s, headers=target.headers),
                scrape(client, slots_url(target.url), target.timeout_s, headers=target.headers))
        else:
            res, slots = await scrape(client, target.url, target.timeout_s, headers=target.headers), None
        state.last = self._engine(state, res, slots)
        return state.last

    def _engine(self, state: _EngineState, res: ScrapeResult, slots: ScrapeResult | None) -> Engine:
        target = state.target
        common = {"name": target.label, "url": target.url, "scrape_s": res.elapsed_s, "device": target.device}
        error = res.error
        if res.text is not None:
            page = parse(res.text, keep=needed_families().__contains__)
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
                ex = extract(page, profile, self.clock())
                state.model = ex.model or state.model or target.model
                state.history.add(ex)
                d = derive(state.history.points, profile, self.window_s)
                if d.reset_at is not None:
                    state.restarted_at = d.reset_at
                series = dict(ex.series)
                if slots is not None:
                    self._slots(slots, d.fields, d.unavailable, series)
                return Engine(
                    **common,
                    kind=found,
                    model=state.model,
                    version_hints=ex.hints,
                    up=True,
                    restarted_at=_utc(state.restarted_at) if state.restarted_at else None,
                    series=series,
                    unavailable=d.unavailable,
                    **d.fields,
                )
        return Engine(**common, kind=state.kind, model=state.model, up=False, error=error)

    @staticmethod
    def _slots(res: ScrapeResult, fields: dict, unavailable: dict, series: dict) -> None:
        if res.text is None:
            why = res.error or "no answer"
            if "HTTP 501" in why or "HTTP 404" in why:
                why = "llama.cpp /slots is off: start llama-server with --slots to see KV use"
            unavailable["kv_cache_usage"] = unavailable["kv_capacity_tokens"] = why
            return
        try:
            usage, capacity = slots_kv(res.text)
        except ValueError as exc:
            unavailable["kv_cache_usage"] = f"unexpected /slots answer ({exc})"
            return
        fields["kv_cache_usage"], fields["kv_capacity_tokens"] = usage, capacity
        unavailable.pop("kv_cache_usage", None)
        unavailable.pop("kv_capacity_tokens", None)
        series["kv_cache_usage"] = "GET /slots (prompt + decoded tokens of busy slots / n_ctx)"
