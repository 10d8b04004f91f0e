"""From Samples to Frames: engine histories and windows, plan headroom, SLO and cost meters,
alerts. The live poller and replay both run this, so a recording re-derives what was seen."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from console import __version__
from console.engines import gauge_value, profiles
from console.figures.alerts import AlertBook, Condition
from console.figures.capacity import CAPACITY_WINDOW_S, RENEW_S, Backtest, estimate
from console.figures.enginestats import by_model, derive
from console.figures.headroom import HeadroomState, evaluate
from console.figures.linking import link
from console.figures.meters import service_meters
from console.figures.plan import Plan, plan_changes, plan_of
from console.figures.slo import OutcomeHistory, default_slo
from console.figures.timeline import EventBook, Note, note
from console.figures.verdict import judged
from console.figures.windowed import EngineHistory, process_start
from console.frame import CapacityReport, Engine, Frame, Limits, ServiceStatus
from console.sample import WALL_STEP_S, ConfigChange, EngineSample, Sample
from console.triton import count_once

RETURN_GRACE_S = 10.0  # an engine back from an outage: its conditions judged on fresh data after


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


@dataclass
class _Track:
    history: EngineHistory = field(default_factory=EngineHistory)
    kind: str | None = None
    model: str | None = None
    restarted_at: float | None = None
    restart_seen: float | None = None  # the scrape that showed the process start move
    last: Engine | None = None
    capacity: CapacityReport | None = None  # the last estimate, and the scrape it was made at
    capacity_t: float | None = None
    capacity_n: int = 0  # scrapes the last estimate had (one: nothing windowed, renewed at once)
    max_running: int | None = None  # the batch cap discovery read from its command line
    backtest: Backtest = field(default_factory=Backtest)  # its estimates, scored on what followed


def _wall_step(offset: float) -> list[Condition]:
    """A wall-clock step, stated while it lasts (windows and holds are not affected by it)."""
    if abs(offset) < WALL_STEP_S:
        return []
    return [
        Condition(
            "wall-clock-step",
            "info",
            "clock",
            f"the wall clock stepped {offset:+,.0f} s (NTP, or a VM resumed): windows, rates and "
            "alert holds run on inferdeck's steady clock and are unaffected; times shown are "
            f"that clock's, {abs(offset):,.0f} s {'behind' if offset > 0 else 'ahead of'} the wall",
            "clock",
        )
    ]


ENGINE_HEADROOMS = ("kv", "queue")  # read from the engine's figures, not from the GPU


def _not_judged(svc: ServiceStatus, why: str) -> ServiceStatus:
    """A service whose engines are down or just back: its engine headrooms are not judged (state
    unknown, no exhaustion: the exporter serves nothing Prometheus' rules fire on), the figures
    kept."""
    heads = [
        h.model_copy(
            update={"state": "unknown", "detail": f"not judged: {why}", "exhausted_in_s": None}
        )
        if h.name in ENGINE_HEADROOMS and h.state != "unknown"
        else h
        for h in svc.headroom
    ]
    return svc.model_copy(update={"headroom": heads})


class Deriver:
    def __init__(
        self, plan: Plan | None = None, window_s: float = 60.0, host: str | None = None
    ) -> None:
        self.plan = plan or Plan()
        self.window_s = window_s
        self.host = host or socket.gethostname()
        self.alerts = AlertBook()
        self.headroom = HeadroomState()
        self.burn: dict[str, OutcomeHistory] = {}
        self.tracks: dict[str, _Track] = {}
        self.first_t: float | None = None  # the first poll: windows are partial until W after it
        self.down_since: dict[str, float] = {}  # engines down, since
        self.back_at: dict[str, float] = {}  # engines back from an outage, at
        self.events = EventBook()  # the incident timeline, read from the frames made
        self.config_error: str | None = None  # the config file read again could not be used

    def _reread(self, change: ConfigChange) -> list[Note]:
        """The config file read again (recorded with the sample, so a replay follows it): its
        new plan in force from this poll, or its error stated while it stands."""
        if change.plan is None:  # said by the config-invalid alert while it stands
            self.config_error = (change.error or "the config file could not be read").rstrip(".")
            return []
        try:
            plan = plan_of(change.plan)
        except ValidationError as exc:  # (a recording edited by hand)
            self.config_error = f"{change.path}: {exc.errors()[0]['msg']}"
            return []
        fields = set(Plan.model_fields)
        changes = plan_changes(
            self.plan.model_dump(mode="json", include=fields),
            plan.model_dump(mode="json", include=fields),
        )
        self.plan, self.config_error = plan, None
        said = "; ".join(changes[:4]) + (f"; {len(changes) - 4} more" if len(changes) > 4 else "")
        wait = change.at_restart
        later = (
            f"; {', '.join(wait)} {'takes' if len(wait) == 1 else 'take'} effect at the next start"
            if wait
            else ""
        )
        return [
            note(
                "config",
                change.path.rsplit("/", 1)[-1],
                "info",
                f"config read again: {said or 'the plan unchanged'}{later}",
                {"changes": float(len(changes))},
            )
        ]

    def frame(self, sample: Sample) -> Frame:
        if self.first_t is None:
            self.first_t = sample.t
        notes = self._reread(sample.config) if sample.config is not None else []
        engines = [self._engine(e) for e in sample.engines]
        gpus, engines = link(sample.gpus, engines)
        now = sample.t
        services, conditions = evaluate(self.plan, sample.source, gpus, engines, self.headroom, now)
        inhibited = self._inhibited(engines, now)
        engines = [
            e.model_copy(update={"not_judged": inhibited[e.name]})
            if e.up and e.name in inhibited
            else e
            for e in engines
        ]
        services = [
            _not_judged(s, inhibited[s.name]) if s.name in inhibited else s for s in services
        ]
        histories = {label: tr.history.points for label, tr in self.tracks.items()}
        kinds = {label: profiles()[tr.kind] for label, tr in self.tracks.items() if tr.kind}
        services, node_cost, burn = service_meters(
            self.plan, services, histories, kinds, self.burn, gpus, now
        )
        conditions += _wall_step(sample.wall_offset_s) + self._config_condition()
        alerts = self.alerts.update(conditions + burn, now, inhibited)
        frame = Frame(
            taken_at=_utc(now),
            host=self.host,
            inferdeck_version=__version__,
            window_s=self.window_s,
            window_covered_s=min(self.window_s, now - self.first_t),
            gpu_source=sample.source,
            gpus=gpus,
            engines=engines,
            services=services,
            cost=node_cost,
            alerts=alerts,
            limits=Limits(kv_usage_critical=self.plan.alerts.kv_usage_critical),
        )
        frame = judged(frame, self.alerts.pending(), inhibited)
        return frame.model_copy(update={"timeline": self.events.observe(frame, notes)})

    def _config_condition(self) -> list[Condition]:
        if self.config_error is None:
            return []
        return [
            Condition(
                "config-invalid",
                "warning",
                "config",
                f"the config file changed and cannot be used: {self.config_error} — the plan "
                "read before stays in force; fix the file (it is read again when saved)",
                "config-invalid",
            )
        ]

    def _inhibited(self, engines: list[Engine], now: float) -> dict[str, str]:
        """Engines down or back for less than RETURN_GRACE_S, and the services all of whose
        engines are: their conditions wait (only 'engine down' speaks for them), with why."""
        out: dict[str, str] = {}
        for e in engines:
            if not e.up:
                since = self.down_since.setdefault(e.name, now)
                out[e.name] = f"engine {e.name} down since {_utc(since):%H:%M:%S}Z"
                continue
            if e.name in self.down_since:
                del self.down_since[e.name]
                self.back_at[e.name] = now
            back = self.back_at.get(e.name)
            if back is None:
                continue
            if now - back >= RETURN_GRACE_S:
                del self.back_at[e.name]
                continue
            out[e.name] = (
                f"engine {e.name} back at {_utc(back):%H:%M:%S}Z, judged again on fresh data "
                f"from {RETURN_GRACE_S:g} s after"
            )
        for svc in self.plan.services:
            names = svc.engine_names
            if names and all(n in out for n in names):
                out[svc.name] = out[names[0]]
        return out

    def _capacity(self, tr: _Track, name: str, kv_tokens: float | None) -> CapacityReport:
        """The engine's capacity to its services' SLOs (the strictest of them), estimated again
        once the history holds a newer part of a load point (the figure moves no faster)."""
        t = tr.history.points[-1].t
        n = len(tr.history.points)
        if (
            tr.capacity is not None
            and tr.capacity_t is not None
            and t - tr.capacity_t < RENEW_S
            # the first polls estimate anew while the index lacks requests (a check's seconds)
            and (tr.capacity_n >= 2 or n < 2)
            and not (tr.capacity.saturation is None and tr.capacity_n < n <= 10)
        ):
            return tr.capacity
        served = [svc for svc in self.plan.services if name in svc.engine_names]
        slos = [default_slo(svc) for svc in served]
        ttft = [x.ttft_s for x in slos if x.ttft_s is not None]
        tpot = [x.tpot_s for x in slos if x.tpot_s is not None]
        # the batch cap, by what states it: the engine's own gauge (NIM's num_request_max), its
        # command line as discovery read it, the plan; else the model reads it from the load
        caps: list[tuple[float, str]] = []
        prof = profiles().get(tr.kind or "")
        spec = prof.signals.get("batch_limit") if prof is not None else None
        values = tr.history.points[-1].gauges.get("batch_limit")
        if spec is not None and values:
            got = gauge_value(values, spec.aggregate, prof.replica_labels if prof else ())
            if got is not None and got > 0:
                caps.append((got, "the engine's own figure"))
        if tr.max_running:
            caps.append((float(tr.max_running), "its command line"))
        caps += [(float(svc.max_running), "the plan") for svc in served if svc.max_running]
        limits = {"ttft": min(ttft) if ttft else None, "tpot": min(tpot) if tpot else None}
        report = estimate(
            tr.history.points,
            CAPACITY_WINDOW_S,
            ttft_limit_s=limits["ttft"],
            tpot_limit_s=limits["tpot"],
            kv_capacity_tokens=kv_tokens,
            batch_limit=caps[0][0] if caps else None,
            batch_from=caps[0][1] if caps else None,
            recent_s=self.window_s,
            profile=prof,
        )
        tr.capacity = tr.backtest.update(tr.history.points, self.window_s, report, limits)
        tr.capacity_t, tr.capacity_n = t, n
        return tr.capacity

    def _engine(self, s: EngineSample) -> Engine:
        tr = self.tracks.setdefault(s.label, _Track(model=s.model))
        tr.max_running = s.max_running or tr.max_running
        if not s.fresh:
            if tr.last is not None:
                return tr.last
            return Engine(
                name=s.label,
                url=s.url,
                device=s.device,
                kind=s.kind,
                model=s.model,
                up=False,
                error=s.error or "not polled yet",
            )
        if s.up and s.extract is not None and s.kind is not None:
            if tr.kind != s.kind:
                tr.history.clear()
                tr.backtest = Backtest()
            tr.kind = s.kind
            profile = profiles()[s.kind]
            ex = s.extract
            counted = None
            if profile.count_once and profile.count_once_label:
                ex, counted = count_once(
                    ex, profile.count_once, profile.count_once_label, s.top_models
                )
            tr.model = ex.model or tr.model or s.model
            tr.history.add(ex)
            d = derive(tr.history.points, profile, self.window_s)
            if (
                ex.t in tr.history.points.restarts
            ):  # when the new process began, not when it was seen
                tr.restarted_at, tr.restart_seen = process_start(ex), ex.t
            elif d.reset_at is not None and d.reset_at != tr.restart_seen:
                tr.restarted_at = d.reset_at
            series = dict(ex.series)
            if counted:
                series["requests_counted"] = counted
            if profile.count_once_label:
                d.fields["requests_by_model"] = by_model(tr.history.points, profile, self.window_s)
            d.fields["capacity"] = self._capacity(tr, s.label, d.fields.get("kv_capacity_tokens"))
            if s.slots is not None:
                got = dict(s.slots.fields) if s.slots.fields is not None else {}
                d.fields.update(got)
                for key in got:
                    d.unavailable.pop(key, None)
                d.unavailable.update(s.slots.unavailable)
                series.update(s.slots.series)
            tr.last = Engine(
                name=s.label,
                url=s.url,
                scrape_s=s.scrape_s,
                device=s.device,
                kind=s.kind,
                model=tr.model,
                version_hints=ex.hints,
                moved_to=s.moved_to,
                up=True,
                sampled_at=_utc(s.t),
                restarted_at=_utc(tr.restarted_at) if tr.restarted_at else None,
                series=series,
                unavailable=d.unavailable,
                **d.fields,
            )
        else:
            tr.last = Engine(
                name=s.label,
                url=s.url,
                scrape_s=s.scrape_s,
                device=s.device,
                kind=tr.kind or s.kind,
                model=tr.model,
                moved_to=s.moved_to,
                up=False,
                sampled_at=_utc(s.t),
                error=s.error,
            )
        return tr.last
