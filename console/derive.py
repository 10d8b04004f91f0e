"""From Samples to Frames: engine histories and windows, plan headroom, SLO and cost meters,
alerts. The live poller and replay both run this, so a recording re-derives what was seen."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime

from console import __version__
from console.alerts import AlertBook
from console.engines import profiles
from console.enginestats import EngineHistory, derive
from console.frame import Engine, Frame
from console.headroom import HeadroomState, evaluate
from console.linking import link
from console.meters import service_meters
from console.plan import Plan
from console.sample import EngineSample, Sample
from console.slo import OutcomeHistory


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


@dataclass
class _Track:
    history: EngineHistory = field(default_factory=EngineHistory)
    kind: str | None = None
    model: str | None = None
    restarted_at: float | None = None
    last: Engine | None = None


class Deriver:
    def __init__(self, plan: Plan | None = None, window_s: float = 60.0, host: str | None = None) -> None:
        self.plan = plan or Plan()
        self.window_s = window_s
        self.host = host or socket.gethostname()
        self.alerts = AlertBook()
        self.headroom = HeadroomState()
        self.burn: dict[str, OutcomeHistory] = {}
        self.tracks: dict[str, _Track] = {}

    def frame(self, sample: Sample) -> Frame:
        engines = [self._engine(e) for e in sample.engines]
        gpus, engines = link(sample.gpus, engines)
        now = sample.t
        services, conditions = evaluate(self.plan, sample.source, gpus, engines, self.headroom, now)
        histories = {label: tr.history.points for label, tr in self.tracks.items()}
        kinds = {label: profiles()[tr.kind] for label, tr in self.tracks.items() if tr.kind}
        services, node_cost, burn = service_meters(self.plan, services, histories, kinds, self.burn, gpus, now)
        alerts = self.alerts.update(conditions + burn, now)
        return Frame(taken_at=_utc(now), host=self.host, inferdeck_version=__version__, window_s=self.window_s,
                     gpu_source=sample.source, gpus=gpus, engines=engines, services=services, cost=node_cost,
                     alerts=alerts)

    def _engine(self, s: EngineSample) -> Engine:
        tr = self.tracks.setdefault(s.label, _Track(model=s.model))
        if not s.fresh:
            if tr.last is not None:
                return tr.last
            return Engine(name=s.label, url=s.url, device=s.device, kind=s.kind, model=s.model, up=False,
                          error=s.error or "not polled yet")
        common = {"name": s.label, "url": s.url, "scrape_s": s.scrape_s, "device": s.device}
        if s.up and s.extract is not None and s.kind is not None:
            if tr.kind != s.kind:
                tr.history.clear()
            tr.kind = s.kind
            profile = profiles()[s.kind]
            ex = s.extract
            tr.model = ex.model or tr.model or s.model
            tr.history.add(ex)
            d = derive(tr.history.points, profile, self.window_s)
            if d.reset_at is not None:
                tr.restarted_at = d.reset_at
            series = dict(ex.series)
            if s.slots is not None:
                d.fields.update(s.slots.get("fields", {}))
                for key in s.slots.get("fields", {}):
                    d.unavailable.pop(key, None)
                d.unavailable.update(s.slots.get("unavailable", {}))
                series.update(s.slots.get("series", {}))
            tr.last = Engine(**common, kind=s.kind, model=tr.model, version_hints=ex.hints, up=True,
                             restarted_at=_utc(tr.restarted_at) if tr.restarted_at else None, series=series,
                             unavailable=d.unavailable, **d.fields)
        else:
            tr.last = Engine(**common, kind=tr.kind or s.kind, model=tr.model, up=False, error=s.error)
        return tr.last
