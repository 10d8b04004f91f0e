"""The fleet through Prometheus: the same engine profiles and frames, read from the Prometheus
HTTP API (the server does the window math: rate, increase, histogram_quantile), plus NVIDIA's
DCGM exporter series for GPUs and MIG instances. Each query fails on its own: the last good
figures stay, marked with their age."""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from console import __version__
from console.engines import profiles
from console.figures.alerts import AlertBook, Condition
from console.figures.cost import CostSpec, node_hourly, per_million
from console.figures.headroom import HeadroomState, evaluate
from console.figures.plan import Plan
from console.figures.timeline import EventBook, note
from console.figures.windowed import window_label
from console.fleet.prom import MAX_SERIES, PromClient, PromError
from console.fleet.promql import (
    BY,
    SEEN,
    TTFT_TARGET_S,
    dcgm_query,
    dcgm_seen_query,
    detect_query,
    model_labels,
    model_query,
    record_name,
    signal_query,
    window_queries,
    worst,
)
from console.fleet.state import FleetState, NodeSummary, SloRow, budget_text
from console.frame import (
    Alert,
    Engine,
    Frame,
    GpmActivity,
    Gpu,
    GpuSource,
    MigDevice,
    MigState,
    Percentiles,
    Severity,
)
from console.gpucatalog import catalog
from console.out.exporter import HEADROOM_NAMES, PREFIX
from console.out.slorules import REMAINING, WATCHED

MIB = 1024 * 1024
USUAL_SCRAPES = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300)  # seconds
RANGE_SCRAPES = 4  # a PromQL range holds at least this many scrape intervals
DCGM_INTERVAL_S = 30.0  # dcgm-exporter's default collection interval (its activity averages)


# The GPU figures the fleet reads from NVIDIA's DCGM exporter, in both generations of its names:
# key -> (up to 4.8's name, 4.9's canonical name, the factor that brings 4.9's value to the
# figure the fleet keeps). 4.9.0 renamed 23 default fields to DCGM 4.7's canonical names in base
# units: utilisation a 0-1 ratio, clocks in Hz, memory in bytes. One query per figure asks for
# both names; where a node answers with both, the canonical one is taken.
DCGM_FIELDS: dict[str, tuple[str, str, float]] = {
    "FB_USED": ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", 1 / MIB),  # MiB
    "FB_FREE": ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", 1 / MIB),
    "POWER_USAGE": ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0),  # W
    "GPU_TEMP": ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0),  # °C
    "GPU_UTIL": ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", 100.0),  # %
    "SM_CLOCK": ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e-6),  # MHz
    "XID_ERRORS": ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", 1.0),
    "ACTIVE": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", 1.0),  # 0-1
    # PCIe throughput, bytes/s in both names (4.10 added _PER_SECOND): MiB/s, as NVML's GPM gives
    "PCIE_TX": ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", 1 / MIB),
    "PCIE_RX": ("DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", 1 / MIB),
}
CANONICAL = {new: (key, factor) for key, (_, new, factor) in DCGM_FIELDS.items()}
# legacy names whose unit was already the canonical one (a rate in bytes/s): converted the same
LEGACY_SCALE = {DCGM_FIELDS[k][0]: DCGM_FIELDS[k][2] for k in ("PCIE_TX", "PCIE_RX")}
BOARD_WIDE = ("POWER_USAGE", "GPU_TEMP", "SM_CLOCK", "XID_ERRORS")  # one figure for a whole GPU
GENERATION = {
    True: "DCGM exporter 4.9+ (DCGM 4.7's canonical field names)",
    False: "DCGM exporter up to 4.8 (its legacy field names)",
}


def _node(labels: dict[str, str]) -> str:
    if labels.get("node"):
        return labels["node"]
    # 4.8.3 renamed the exporter's Hostname label to hostname
    if labels.get("hostname") or labels.get("Hostname"):
        return labels.get("hostname") or labels["Hostname"]
    inst = labels.get("instance", "?")
    return urlsplit(f"//{inst}").hostname or inst


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return _node(labels), labels.get("instance", "?")


def _figures(engines: dict[tuple[str, str], dict[str, Any]], got: dict[str, Any]) -> None:
    """Each up engine's figures from the query answers, and its model."""

    def put(field_name: str, rows: list[tuple[dict[str, str], float]] | None) -> None:
        for labels, value in rows or []:
            k = _key(labels)
            # a down engine's rates still run over its last samples (868 -> 652 -> 438
            # tok/s as they leave the window): none of its figures is shown
            if k in engines and engines[k].get("up") and not math.isnan(value):
                engines[k][field_name] = value

    for sig in (
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "generation_tokens_per_s",
    ):
        put(sig, got.get(sig))
    for q in ("0.5", "0.95", "0.99", "count", "within"):
        put(f"ttft:{q}", got.get(f"ttft:{q}"))
    for q in ("tpot:0.95", "tpot:count", "success_rate"):
        put(q, got.get(q))
    for labels, _ in got.get("model") or []:
        k = _key(labels)
        if k in engines:
            engines[k]["model"] = next((labels[n] for n in model_labels() if labels.get(n)), None)


class FleetSource:
    """Polls Prometheus and builds one Frame per node."""

    def __init__(
        self,
        client: PromClient,
        window_s: float = 60.0,
        plans: dict[str, Plan] | None = None,
        cost: CostSpec | None = None,
    ) -> None:
        self.client = client
        self.cost = cost  # each node's cost (the config's cost section), for $/M compliant tokens
        self.asked_s = window_s  # the window asked for; window_s is the PromQL range used
        self.window_s = window_s
        self.scrape_s: float | None = None  # the slowest scrape interval of the fleet's targets
        self._scrape_for: frozenset[str] | None = None  # the jobs it was read for
        self._scrape_at = 0.0
        self._jobs: frozenset[str] = frozenset()  # the jobs of engines and DCGM exporters
        self.backend: str | None = None  # "Prometheus 2.42.0", "VictoriaMetrics", ...
        self.recorded: set[str] = set()  # fleet figures read from `rules --fleet`'s records
        self._records_for: str | None = None
        self._records_at = 0.0
        self.plans = (
            plans or {}
        )  # node name -> its plan (services name Prometheus instances as engines)
        self.state = FleetState()
        self.at: float | None = None  # None: live; else evaluate every query at this past time
        self.nvml = None  # MIG re-layout is node-local: nothing to re-read here
        self._headroom: dict[str, HeadroomState] = {}
        self._books: dict[
            str, AlertBook
        ] = {}  # node -> its alerts, raised and cleared as on the node
        self._trend_at = 0.0
        self.max_for_s: float | None = None  # headless checks: 0, what holds is raised at once
        self.queries_per_refresh = 0  # every query covers every node: fixed, whatever the fleet
        # (node, instance) -> when Prometheus last had it up (None: not within SEEN), live only
        self._last_up: dict[tuple[str, str], float | None] = {}
        # when the fleet first saw each alert that carries no time of its own (a count, a
        # verdict, an engine down): shown as its since, not each refresh's time
        self._first_seen: dict[tuple[str, str], datetime] = {}
        self._asked: set[tuple[str, str]] = set()  # down targets whose last-up Prometheus told
        self._dcgm_down: dict[str, str] = {}  # node -> why its GPU figures are missing, this poll
        # the timelines, read from the live refreshes: each node's, and the fleet's own (the
        # backend not answering)
        self._timelines: dict[str, EventBook] = {}
        self._fleet_events = EventBook()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _q(self, name: str, q: str | None) -> list[tuple[dict[str, str], float]] | None:
        if q is None:
            return []
        try:
            return await self.client.query(q, self.at)
        except PromError as exc:
            self.state.errors[name] = str(exc)
            return None

    @property
    def victoriametrics(self) -> bool:
        return (self.backend or "").startswith("VictoriaMetrics")

    def rate_semantics(self) -> str:
        """How the backend's rate() reads, said beside the rates: the two differ by up to a
        quarter at a 1m window on the same samples."""
        if self.victoriametrics:
            return (
                "VictoriaMetrics' rate(): not extrapolated (the increase since the sample "
                "before the range, over the time it spans)"
            )
        return "Prometheus' rate(): extrapolated to the range's edges"

    def window_note(self) -> str | None:
        """Why the range differs from the window asked for, when it does."""
        if self.window_s == self.asked_s or self.scrape_s is None:
            return None
        return (
            f"asked {window_label(self.asked_s)}: {RANGE_SCRAPES} × the {self.scrape_s:g} s "
            "scrape interval, so every rate holds enough samples"
        )

    async def _follow_scrape(self, now: float) -> None:
        """The PromQL range: at least RANGE_SCRAPES scrape intervals of the fleet's engine and
        DCGM targets (a 1m range over a 1m scrape holds one sample: no rate at all). Read from
        the targets API, else from the samples (`count_over_time(up[10m])`); again every 5
        minutes and when the fleet's jobs change."""
        if self._scrape_for == self._jobs and now - self._scrape_at < 300:
            return
        self._scrape_for, self._scrape_at = self._jobs, now
        found: list[tuple[str, float]] = []  # (job, interval)
        try:
            for t in await self.client.targets():
                labels = t.get("labels") or {}
                s = _duration_s(t.get("scrapeInterval"))
                if s:
                    found.append((str(labels.get("job", "")), s))
        except PromError:
            if self.client.broken:  # no answer at all: nothing more to ask this poll
                self._scrape_at = 0.0
                return
        if not found:  # VictoriaMetrics lists no scrapeInterval: counted from the samples
            found = await self._counted_intervals()
        wanted = [s for job, s in found if not self._jobs or job in self._jobs]
        self.scrape_s = max(wanted) if wanted else None
        self.window_s = float(math.ceil(max(self.asked_s, RANGE_SCRAPES * (self.scrape_s or 0.0))))

    async def _counted_intervals(self) -> list[tuple[str, float]]:
        """Each target's scrape interval from its `up` samples. A target up 10 minutes ago: from
        its count over the last 10 minutes, whose span ends at its newest sample, asked too
        (VictoriaMetrics hides its newest 30 s from queries, and a series that stopped a while
        ago has its last samples further back: a count over the whole range read a 15 s scrape
        as 16 s, a 60 s one as 67 s). k samples whose newest is ``a`` old lie ``I`` apart with
        (W - a)/k < I <= (W - a)/(k - 1): the middle is taken and, within 10 %, the usual
        interval it is. A younger target: 60 s / its count in the last minute (two or more),
        else 600 s / its count; younger than a minute (both counts alike), it is left out and
        asked again at the next poll, not read slow."""
        try:
            short = await self.client.query("count_over_time(up[1m])", self.at)
            long = await self.client.query("count_over_time(up[10m])", self.at)
            age = await self.client.query("time() - timestamp(up)", self.at)
            old = await self.client.query("timestamp(up offset 10m)", self.at)
        except PromError:
            return []

        def by_target(rows: list[tuple[dict[str, str], float]]) -> dict[tuple[str, str], float]:
            return {(lab.get("job", ""), lab.get("instance", "")): n for lab, n in rows}

        c1, ages, older = by_target(short), by_target(age), by_target(old)
        out = []
        for key, n in by_target(long).items():
            recent = c1.get(key, 0.0)
            if recent >= n:  # younger than the minute: its count says nothing of its pace yet
                self._scrape_at = 0.0
                continue
            every: float | None = None
            span = 600.0 - max(0.0, ages.get(key, 0.0))
            if key in older and n >= 2 and span > 0:
                guess = span / (n - 0.5)
                usual = min(USUAL_SCRAPES, key=lambda u: abs(u - guess))
                every = usual if abs(usual - guess) <= 0.1 * usual else guess
            elif recent >= 2:
                every = 60 / recent
            elif n >= 2:
                every = 600 / n
            if every is not None:
                out.append((key[0], float(max(1, round(every)))))
        return out

    async def _backend(self) -> str | None:
        """Which backend answers, for the rate semantics stated beside the rates (None while
        it does not answer: asked again at the next poll)."""
        try:
            info = await self.client.status("buildinfo")
        except PromError:
            return None
        if info.get("version"):
            return f"{info.get('application') or 'Prometheus'} {info['version']}"
        # VictoriaMetrics answers buildinfo empty, and serves an endpoint Prometheus does not
        status = await self.client.probe("/api/v1/status/active_queries")
        if status is None:
            return None
        return "VictoriaMetrics" if status == 200 else "a Prometheus-compatible backend"

    async def poll(self) -> FleetState:
        self.client.begin_round()
        await self._follow_scrape(time.time())
        if self.backend is None and not self.client.broken:  # asked until one answers
            self.backend = await self._backend()
        w = f"{int(self.window_s)}s"
        self.state.errors = {}
        # "targets": how many there are, whatever a query's series cap keeps of them
        queries: dict[str, str | None] = {"up": "up", "targets": "count(up)"}
        for kind, prof in profiles().items():
            queries[f"kind:{kind}"] = detect_query(prof)
        await self._find_records(w)
        for name, expr in window_queries(w).items():
            # a recording rule's series when `inferdeck rules --fleet` keeps it at this window
            expr = record_name(name, w) if name in self.recorded else expr
            queries[name] = worst(name, expr, MAX_SERIES) if expr else None
        queries["model"] = model_query()
        queries["covered"] = f"count_over_time(up[{w}])"  # targets younger than the window
        queries["dcgm:seen"] = dcgm_seen_query(list(DCGM_FIELDS["FB_USED"][:2]))
        for key, (old, new, _) in DCGM_FIELDS.items():
            queries[f"dcgm:{key}"] = dcgm_query(old, new)
        # what a node's `inferdeck export` says itself: its plan's alerts and its cost figure
        queries["x:alerts"] = "inferdeck_alerts_active"
        queries["x:alert"] = "inferdeck_alert_since_timestamp_seconds"
        queries["x:headroom"] = f'{{__name__=~"{HEADROOM_NAMES}"}}'
        queries["x:cost"] = 'inferdeck_cost_usd_per_million_compliant_tokens{bound="low"}'
        queries["x:concerns"] = 'inferdeck_verdict_concerns{source!="alert"}'
        names = list(queries)
        self.queries_per_refresh = sum(1 for q in queries.values() if q)
        self.client.warnings.clear()
        results = await asyncio.gather(*(self._q(n, queries[n]) for n in names))
        got = dict(zip(names, results, strict=True))
        now = time.time()
        self.state.warnings = sorted(self.client.warnings)
        total = got.get("targets") or []
        if total and total[0][1] > MAX_SERIES:
            self.state.warnings.append(
                f"the fleet has {total[0][1]:,.0f} targets; each figure was read for its "
                f"{MAX_SERIES:,} worst (chosen by Prometheus), the others' rows lack it"
            )
        kinds = [n for n in names if n.startswith("kind:") and queries[n]]
        if got["up"] is None or any(got[n] is None for n in kinds):
            # Prometheus down or too slow (a query that says which targets and engines exist
            # failed): the answer is incomplete, so the last frames stay, with their age, rather
            # than the fragments that came back (a node without its engines)
            self._outage(now, next(iter(self.state.errors.values()), "no answer"))
            return self.state
        when = self.at if self.at is not None else now
        self.state.window_s, self.state.window_note = self.window_s, self.window_note()
        self.state.backend, self.state.rates = self.backend, self.rate_semantics()
        self.state.recorded = sorted(self.recorded)
        await self._seen(got, when)
        if self.at is None:  # the alerts API answers for now only
            await self._slo()
        else:
            self.state.slo = []
        self.state.nodes = self._plans(self._frames(got, when), when)
        if self.at is None:  # (a look into the past leaves the timelines as they stand)
            errors = self.state.errors
            self._outage(
                now,
                f"{len(errors)} of {self.queries_per_refresh} queries failed: "
                f"{next(iter(errors.values()))}"
                if errors
                else None,
                stale=False,
            )
            self.state.nodes = {
                n: f.model_copy(
                    update={"timeline": self._timelines.setdefault(n, EventBook()).observe(f)}
                )
                for n, f in self.state.nodes.items()
            }
        self.state.last_ok = now
        self.state.taken_at = when
        if self.at is None and now - self._trend_at > 30:
            await self._trends(now)
        return self.state

    def _outage(self, now: float, why: str | None, stale: bool = True) -> None:
        """The fleet's own timeline: the backend not answering, from the first refresh that got
        no whole answer (or lost some of its queries) to the first whole one."""
        taken = datetime.fromtimestamp(now, tz=UTC)
        held = []
        if why is not None:
            ok = self.state.last_ok
            at = f"{datetime.fromtimestamp(ok, tz=UTC):%H:%M:%S}Z" if ok else ""
            since = f"; the figures shown are from {at}" if at and stale else ""
            where = "" if self.client.url in why else f" at {self.client.url}"
            held = [
                note(
                    "backend-down",
                    self.backend or "Prometheus",
                    "warning",
                    f"not answering{where}: {why}{since}",
                )
            ]
        bare = Frame(
            taken_at=taken,
            host="fleet",
            inferdeck_version=__version__,
            window_s=self.window_s,
            gpu_source=GpuSource(kind="none"),
        )
        self.state.events = self._fleet_events.observe(bare, states=held)

    async def _find_records(self, w: str) -> None:
        """Which fleet figures a recording rule keeps at this window (asked again every 5
        minutes and when the window changes)."""
        now = time.monotonic()
        if self._records_for == w and now - self._records_at < 300:
            return
        self._records_for, self._records_at = w, now
        names = {record_name(n, w): n for n, q in window_queries(w).items() if q}
        pattern = "|".join(re.escape(n) for n in names)
        try:
            rows = await self.client.query(f'count by (__name__) ({{__name__=~"{pattern}"}})')
        except PromError:
            rows = []
        self.recorded = {names[lab["__name__"]] for lab, _ in rows if lab.get("__name__") in names}

    async def _seen(self, got: dict[str, Any], when: float) -> None:
        """When each down target was last up: asked of Prometheus once as it goes down (a 5 s
        step look over the last SEEN: this source may not have polled for a while before),
        the later of that and what this source saw itself."""
        if self.at is not None:
            self._last_up, self._asked = {}, set()  # a look into the past asks afresh
        for labels, value in got["up"] or []:
            if value == 1.0:
                self._last_up[_key(labels)] = when
                self._asked.discard(_key(labels))
        unknown = [
            _key(lab) for lab, v in got["up"] or [] if v == 0.0 and _key(lab) not in self._asked
        ]
        if not unknown:
            return
        rows = await self._q(
            "last-up", f"max by ({BY}) (max_over_time(timestamp(up == 1)[{SEEN}:5s]))"
        )
        if rows is None:
            return  # asked again at the next poll
        said = {_key(labels): t for labels, t in rows}
        for k in unknown:
            self._asked.add(k)
            mine, theirs = self._last_up.get(k), said.get(k)
            self._last_up[k] = max((t for t in (mine, theirs) if t is not None), default=None)

    def _last_seen(self, key: tuple[str, str], when: float) -> str:
        t = self._last_up.get(key)
        if t is None:
            return f"not up in the last {SEEN}"
        return f"last seen {max(0.0, when - t):.0f} s ago"

    async def _slo(self) -> None:
        """Each service objective's budget left and burn alert, from Prometheus' own rules
        (`inferdeck rules --slo`): they hold whatever any inferdeck process remembers."""
        try:
            left = await self.client.query(REMAINING)
            watched = {
                (lab.get("service", ""), lab.get("slo", "")): v
                for lab, v in await self.client.query(WATCHED)
            }
            alerts = await self.client.alerts()
        except PromError as exc:
            self.state.slo_note = str(exc)
            return
        rank = {"page": 0, "ticket": 1}
        burning: dict[tuple[str, str], tuple[str, str, float | None, dict[str, str]]] = {}
        for a in alerts:
            lab = a.get("labels") or {}
            if not str(lab.get("alertname", "")).startswith("InferdeckSLOBurn"):
                continue
            key = (str(lab.get("service", "")), str(lab.get("slo", "")))
            asks = str(lab.get("asks", ""))
            seen = burning.get(key)
            if seen is None or rank.get(asks, 9) < rank.get(seen[0], 9):
                since = _timestamp(a.get("activeAt"))
                burning[key] = (asks, str(a.get("state", "")), since, dict(lab))
        rows: dict[tuple[str, str], SloRow] = {}
        for lab, value in left:
            key = (lab.get("service", ""), lab.get("slo", ""))
            rows[key] = SloRow(
                *key,
                remaining=value,
                period=lab.get("period", ""),
                where=lab,
                watched_s=watched.get(key),
            )
        for key, (asks, state, since, lab) in burning.items():
            base = rows.get(key, SloRow(*key, where=lab))
            rows[key] = replace(base, alert=asks, state=state, since=since)
        self.state.slo = [rows[k] for k in sorted(rows)]
        self.state.slo_note = None if rows else "no inferdeck SLO rules in Prometheus"
        if rows and not burning and not await self._has_alert_rules():
            # budgets recorded, yet no alerting rule behind this API: its empty alert list is
            # not "no burn" (VictoriaMetrics without -vmalert.proxyURL answers exactly so)
            self.state.slo_note = (
                f"{self.client.url} holds the SLO budgets but answers no alerting rules: burn "
                "alerts cannot be read here (VictoriaMetrics: start it with "
                "-vmalert.proxyURL=http://<vmalert>:8880; Thanos/Mimir: point at the ruler's "
                "API)"
            )

    async def _has_alert_rules(self) -> bool:
        try:
            groups = await self.client.rules()
        except PromError:
            return False
        return any(g.get("rules") for g in groups if isinstance(g, dict))

    def _burn_alerts(self, node: str, engines: list[Engine]) -> list[Alert]:
        """The SLO burn alerts Prometheus' rules hold for this node's services (placed by the
        rules' `node` label, else by the `instance` of its engine), firing ones on its verdict:
        a page critical, a ticket a warning. Each row placed says where."""
        out: list[Alert] = []
        instances = {e.name for e in engines}
        ruler = "vmalert's" if self.victoriametrics else "Prometheus'"  # VictoriaMetrics proxies
        for i, row in enumerate(self.state.slo):
            where = row.where
            here = where.get("node") == node or (
                "node" not in where and where.get("instance") in instances
            )
            if not here:
                continue
            self.state.slo[i] = replace(row, node=node)
            if row.alert is None or row.state != "firing":
                continue
            since = datetime.fromtimestamp(row.since or time.time(), tz=UTC)
            out.append(
                Alert(
                    key=f"slo-burn:{row.service}:{row.slo}",
                    rule="slo_burn",
                    severity="critical" if row.alert == "page" else "warning",
                    subject=row.service,
                    # the time is the alert's activeAt (since), shown once by the pane
                    message=f"{row.slo} error budget burning too fast to last its period "
                    f"({ruler} InferdeckSLOBurn{row.alert.capitalize()}"
                    + (f"; left {budget_text(row)})" if row.remaining is not None else ")"),
                    since=since,
                )
            )
        return out

    async def _trends(self, now: float) -> None:
        """The last hour of output tokens/s per node (query_range), for the fleet's sparklines."""
        q = signal_query("generation_tokens", "rate", "1m")
        if q is None:
            return
        end = now // 60 * 60  # step-aligned: the same points each time (the backend's cache
        # and recording rules serve them), not a new grid per refresh
        expr = f"sum by (node, instance) ({q})"
        try:
            rows = await self.client.query_range(expr, end - 3600, end, 60)
            if not any(values for _, values in rows):
                # a fleet younger than a minute has no point on the minute yet: its seconds
                rows = await self.client.query_range(expr, now - 3600, now, 60)
        except PromError as exc:
            self.state.errors["trend"] = str(exc)
            return
        # summed per node here, the node named as everywhere else (its label, or the host of
        # the instance when targets carry no node label)
        per: dict[str, dict[float, float]] = {}
        for labels, values in rows:
            steps = per.setdefault(_node(labels), {})
            for t, v in values:
                steps[float(t)] = steps.get(float(t), 0.0) + float(v)
        self.state.trends = {node: [v for _, v in sorted(st.items())] for node, st in per.items()}
        self._trend_at = now

    def _plans(self, nodes: dict[str, Frame], now: float) -> dict[str, Frame]:
        """Each node's plan, evaluated as on the node itself, and every alert through the node's
        own for/clear hysteresis (a look into the past shows what held then, at once)."""
        out = {}
        for name, frame in nodes.items():
            plan = self.plans.get(name)
            services, conds = frame.services, list[Condition]()
            if plan is not None:
                state = self._headroom.setdefault(name, HeadroomState())
                services, conds = evaluate(
                    plan, frame.gpu_source, frame.gpus, frame.engines, state, now
                )
                conds = [
                    c for c in conds if c.severity != "info" and not c.key.startswith("gpu-source")
                ]
            conds += [
                Condition(a.key, a.severity, a.subject, a.message, a.rule, 0.0, 60.0)
                for a in frame.alerts
            ]
            if self.at is None:
                book = self._books.setdefault(name, AlertBook(max_for_s=self.max_for_s))
            else:
                book = AlertBook(max_for_s=0.0)
            out[name] = frame.model_copy(
                update={"services": services, "alerts": book.update(conds, now)}
            )
        return out

    def _frames(self, got: dict[str, Any], now: float) -> dict[str, Frame]:
        """One Frame per node from the fleet's query answers: its engines, its GPUs (DCGM), and
        the alerts its own inferdeck export and Prometheus' up say it has."""
        taken = datetime.fromtimestamp(now, tz=UTC)
        by_node, attain = self._engines(got, now)
        gpus, canonical = self._gpus(got)
        exported, named, node_cost = _exported(got)
        concerns: dict[str, dict[str, float]] = {}  # node -> severity -> findings and pending
        for labels, n in got.get("x:concerns") or []:
            by = concerns.setdefault(_node(labels), {})
            sev = labels.get("severity", "")
            by[sev] = by.get(sev, 0.0) + n
        nodes: dict[str, Frame] = {}
        seen: set[tuple[str, str]] = set()
        covered = self._covered(got)
        self.state.down = {}
        for node in sorted(set(by_node) | set(gpus) | set(exported) | set(self._dcgm_down)):
            engines = by_node.get(node, [])
            alerts = list(named.get(node, []))
            if node not in named:
                alerts += _counted_alerts(exported.get(node, []), taken)
            own = _seen_alerts(engines, gpus.get(node, []), taken)
            # the fleet's own engine-down stands for the node's export of the same alert
            mine = {(a.rule, a.subject) for a in own}
            alerts = [a for a in alerts if (a.rule, a.subject) not in mine] + own
            alerts += self._burn_alerts(node, engines)
            alerts += _verdict_alerts(concerns.get(node, {}), alerts, taken)
            alerts = [
                a
                if a.since != taken
                else a.model_copy(
                    update={"since": self._first_seen.setdefault((node, a.key), taken)}
                )
                for a in alerts
            ]
            seen.update((node, a.key) for a in alerts)
            dcgm_down = self._dcgm_down.get(node)
            if dcgm_down is not None:
                alerts.append(
                    Alert(
                        key=f"gpu-source:dcgm:{node}",
                        severity="warning",
                        subject="GPUs",
                        message=dcgm_down,
                        since=taken,
                    )
                )
            if not gpus.get(node) and engines and not any(e.up for e in engines):
                # nothing of the node answers: it reads down, with when it was last seen
                known = [t for e in engines if (t := self._last_up.get((node, e.name)))]
                self.state.down[node] = (
                    f"last seen {max(0.0, now - max(known)):.0f} s ago"
                    if known
                    else f"not up in the last {SEEN}"
                )
            self.state.summary[node] = self._summary(engines, attain.get(node), node_cost.get(node))
            nodes[node] = Frame(
                taken_at=taken,
                host=node,
                inferdeck_version=__version__,
                window_s=self.window_s,
                window_covered_s=covered.get(node),
                gpu_source=GpuSource(
                    kind="none",
                    error=None
                    if gpus.get(node)
                    else dcgm_down or "no DCGM exporter series for this node in Prometheus",
                    note=GENERATION[canonical[node]] if node in canonical else None,
                ),
                gpus=gpus.get(node, []),
                engines=engines,
                alerts=alerts,
            )
        self._first_seen = {k: v for k, v in self._first_seen.items() if k in seen}
        return nodes

    def _covered(self, got: dict[str, Any]) -> dict[str, float]:
        """Nodes whose targets Prometheus has scraped for less than the window (a node just
        added, a target back): how much of it the figures cover, from the up samples it holds
        (the least of the node's targets that are up)."""
        s = self.scrape_s
        if not s:
            return {}
        up = {_key(lab) for lab, v in got.get("up") or [] if v == 1.0}
        out: dict[str, float] = {}
        for labels, n in got.get("covered") or []:
            key = _key(labels)
            seconds = n * s
            if key in up and seconds < self.window_s - s:
                out[key[0]] = min(out.get(key[0], seconds), seconds)
        return out

    def _engines(
        self, got: dict[str, Any], now: float
    ) -> tuple[dict[str, list[Engine]], dict[str, list[float]]]:
        """Every node's engines from the query answers, and per node each engine's share of
        requests within the TTFT target."""
        engines, kinds = self._targets(got, now)
        _figures(engines, got)
        by_node: dict[str, list[Engine]] = {}
        attain: dict[str, list[float]] = {}
        for (node, inst), v in sorted(engines.items()):
            if v.get("ttft:within") is not None:
                attain.setdefault(node, []).append(v["ttft:within"])
            by_node.setdefault(node, []).append(self._engine(node, inst, v, kinds, now))
        return by_node, attain

    def _targets(
        self, got: dict[str, Any], now: float
    ) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[tuple[str, str], str]]:
        """Each engine target (node, instance) up or down, with its kind: from its series, from
        Prometheus' ``up`` and, for federated or pushed series, from their freshness. Notes the
        DCGM exporters down and the other jobs' targets down on the way."""
        engines: dict[tuple[str, str], dict[str, Any]] = {}
        kinds: dict[tuple[str, str], str] = {}
        fresh: set[tuple[str, str]] = set()  # serving an engine series now
        engine_jobs: set[str] = set()
        for name, rows in got.items():
            if name.startswith("kind:") and rows:
                for labels, value in rows:
                    kinds[_key(labels)] = name.split(":", 1)[1]
                    engine_jobs.add(labels.get("job", ""))
                    if value > 0:
                        fresh.add(_key(labels))
                        self._last_up[_key(labels)] = now
        dcgm = {_key(lab): lab.get("job", "") for lab, _ in got.get("dcgm:seen") or []}
        dcgm_jobs = set(dcgm.values())
        self._jobs = frozenset(engine_jobs | dcgm_jobs)
        self._dcgm_down = {}
        self.state.other_down = []
        for labels, value in got["up"] or []:
            k, job = _key(labels), labels.get("job", "")
            if k in kinds:
                engines.setdefault(k, {})["up"] = value == 1.0
                engines[k]["job"] = job
            elif value != 0.0:
                continue
            elif k in dcgm or job in dcgm_jobs:
                # the node's GPU exporter: its GPUs are unread, the node's engines still serve
                self._dcgm_down[k[0]] = (
                    f"DCGM exporter {k[1]} (job {job}) is down (up == 0), "
                    f"{self._last_seen(k, now)}: no GPU figures"
                )
            elif job in engine_jobs:
                # a target down in a job of engines, with no series left to tell its kind
                engines.setdefault(k, {})["up"] = False
                engines[k]["job"] = job
            else:  # another job's target (an accounting PC's exporter): not this fleet's
                self.state.other_down.append(f"{job} {k[1]}" if job else k[1])
        for k in kinds:
            if "up" not in engines.setdefault(k, {}):
                # no `up` for it: federated or pushed series (up is the federation's), judged by
                # whether its series are fresh
                engines[k]["up"] = k in fresh
                engines[k]["gone"] = k not in fresh
        return engines, kinds

    def _engine(
        self,
        node: str,
        inst: str,
        v: dict[str, Any],
        kinds: dict[tuple[str, str], str],
        now: float,
    ) -> Engine:
        """One engine from its figures; a down one with why and since when, and no figure."""
        kind = kinds.get((node, inst))
        ttft = None
        if any(f"ttft:{q}" in v for q in ("0.5", "0.95", "0.99")):
            ttft = Percentiles(
                p50=v.get("ttft:0.5"),
                p95=v.get("ttft:0.95"),
                p99=v.get("ttft:0.99"),
                window=f"{int(self.window_s)}s",
                observations=v.get("ttft:count", 0.0),
            )
        tpot = None
        if "tpot:0.95" in v:
            tpot = Percentiles(
                p95=v["tpot:0.95"],
                window=f"{int(self.window_s)}s",
                observations=v.get("tpot:count", 0.0),
            )
        unavailable = {
            f: "not in Prometheus for this engine"
            for f in (
                "requests_running",
                "requests_waiting",
                "kv_cache_usage",
                "generation_tokens_per_s",
                "success_rate",
            )
            if f not in v
        }
        seen = self._last_seen((node, inst), now)
        why = (
            None
            if v.get("up")
            else f"its series stopped in Prometheus (no longer scraped?), {seen}"
            if v.get("gone")
            else "Prometheus reports up == 0"
            + (f" (job {v['job']})" if v.get("job") else "")
            + f": the target is down, {seen}"
        )
        return Engine(
            name=inst,
            url=f"prometheus instance {inst}",
            kind=kind,
            model=v.get("model"),
            up=bool(v.get("up")),
            error=why,
            requests_running=v.get("requests_running"),
            requests_waiting=v.get("requests_waiting"),
            kv_cache_usage=v.get("kv_cache_usage"),
            generation_tokens_per_s=v.get("generation_tokens_per_s"),
            ttft_s=ttft,
            tpot_s=tpot,
            success_rate=v.get("success_rate"),
            unavailable=unavailable if v.get("up") else {},
        )

    def _summary(
        self, engines: list[Engine], shares: list[float] | None, node_cost: float | None
    ) -> NodeSummary:
        """A node's line of the fleet: its worst TTFT share and its price per good token."""
        tps = sum(e.generation_tokens_per_s or 0.0 for e in engines)
        worst_share = min(shares) if shares else None
        good = tps * (worst_share if worst_share is not None else 1.0)
        if worst_share == 0.0:
            return NodeSummary(ttft_within_target=0.0, ttft_target_s=TTFT_TARGET_S, no_good=True)
        return NodeSummary(
            ttft_within_target=worst_share,
            ttft_target_s=TTFT_TARGET_S,
            usd_per_m_compliant_tokens_at_least=node_cost
            if node_cost is not None
            else per_million(node_hourly(self.cost), good, 1.0)
            if self.cost is not None
            else None,
            cost_from_node=node_cost is not None,
        )

    @staticmethod
    def _gpus(got: dict[str, Any]) -> tuple[dict[str, list[Gpu]], dict[str, bool]]:
        """Every node's GPUs from the DCGM series, and per node whether its exporter wrote the
        canonical (4.9+) names."""
        per, migs, canonical = _dcgm_figures(got)
        out: dict[str, list[Gpu]] = {}
        for (node, gpu), v in sorted(
            per.items(), key=lambda kv: (kv[0][0], int(kv[0][1]) if kv[0][1].isdigit() else 0)
        ):
            out.setdefault(node, []).append(_dcgm_gpu(gpu, v, migs.get((node, gpu), {})))
        return out, canonical


def _dcgm_figures(
    got: dict[str, Any],
) -> tuple[
    dict[tuple[str, str], dict[str, Any]],
    dict[tuple[str, str], dict[str, dict[str, Any]]],
    dict[str, bool],
]:
    """Each GPU's DCGM fields by (node, gpu), its MIG instances' by GPU instance id, and per node
    whether the canonical names were seen. The board figures DCGM writes on each instance stand
    for the board's where the board has none."""
    per: dict[tuple[str, str], dict[str, Any]] = {}
    migs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    canonical: dict[str, bool] = {}
    for f in DCGM_FIELDS:
        rows = sorted(  # the legacy name first, so a canonical value seen after it wins
            got.get(f"dcgm:{f}") or [], key=lambda r: r[0].get("__name__") in CANONICAL
        )
        for labels, value in rows:
            name = labels.get("__name__", "")
            if name in CANONICAL:
                value *= CANONICAL[name][1]
            value *= LEGACY_SCALE.get(name, 1.0)
            node = _node(labels)
            canonical[node] = canonical.get(node, False) or name in CANONICAL
            key = (node, labels.get("gpu", "?"))
            g = per.setdefault(key, {"uuid": labels.get("UUID"), "name": labels.get("modelName")})
            if labels.get("GPU_I_ID"):
                m = migs.setdefault(key, {}).setdefault(
                    labels["GPU_I_ID"], {"profile": labels.get("GPU_I_PROFILE")}
                )
                m[f] = value
                if f in BOARD_WIDE:  # the exporter writes board figures on each instance
                    g.setdefault(f"{f}:mig", value)
            else:
                g[f] = value
    for g in per.values():
        for f in BOARD_WIDE:
            if f not in g and f"{f}:mig" in g:
                g[f] = g[f"{f}:mig"]
    return per, migs, canonical


def _dcgm_gpu(gpu: str, v: dict[str, Any], mig: dict[str, dict[str, Any]]) -> Gpu:
    """One GPU from its DCGM fields and its instances'."""
    devices = []
    for i, (gi_id, m) in enumerate(sorted(mig.items(), key=lambda kv: int(kv[0]))):
        used, free = m.get("FB_USED"), m.get("FB_FREE")
        devices.append(
            MigDevice(
                index=i,
                profile=m.get("profile"),
                gpu_instance_id=int(gi_id),
                memory_used_bytes=int(used * MIB) if used is not None else None,
                memory_total_bytes=int((used + free) * MIB)
                if used is not None and free is not None
                else None,
                # DCGM's graphics engine activity of the instance, as GPM reads it
                activity=GpmActivity(graphics_pct=m["ACTIVE"] * 100, interval_s=DCGM_INTERVAL_S)
                if m.get("ACTIVE") is not None
                else None,
                unavailable={"placement_start": "DCGM does not export placements"},
            )
        )
    used = v.get(
        "FB_USED",
        sum(m.get("FB_USED", 0) for m in mig.values()) or None,
    )
    free = v.get(
        "FB_FREE",
        sum(m.get("FB_FREE", 0) for m in mig.values()) or None,
    )
    na = {}
    total = int((used + free) * MIB) if used is not None and free is not None else None
    if "FB_USED" not in v and devices:
        # only the instances' memory is exported: their sum leaves out what no instance
        # holds, so the board's total is its model's (the catalogue), or unknown
        board = next((m for m in catalog().values() if m.name == v.get("name")), None)
        total = board.memory_total_mib * MIB if board is not None else None
        if board is None:
            na["memory_total_bytes"] = (
                "MIG: DCGM exports the instances' memory only, and the model is not in the "
                "GPU catalogue"
            )
    if "GPU_UTIL" not in v:
        na["utilization_gpu_pct"] = "n/a under MIG" if devices else "not in Prometheus"
    if v.get("XID_ERRORS"):
        na["xid"] = f"XID error {v['XID_ERRORS']:.0f} reported by DCGM"
    return Gpu(
        index=int(gpu) if gpu.isdigit() else 0,
        uuid=v.get("uuid"),
        name=v.get("name"),
        memory_used_bytes=int(used * MIB) if used is not None else None,
        memory_total_bytes=total,
        utilization_gpu_pct=v.get("GPU_UTIL"),
        power_w=v.get("POWER_USAGE"),
        temperature_c=v.get("GPU_TEMP"),
        clock_sm_mhz=round(v["SM_CLOCK"]) if "SM_CLOCK" in v else None,
        activity=GpmActivity(
            graphics_pct=v["ACTIVE"] * 100 if v.get("ACTIVE") is not None else None,
            pcie_tx_mib_s=v.get("PCIE_TX"),
            pcie_rx_mib_s=v.get("PCIE_RX"),
            interval_s=DCGM_INTERVAL_S,
        )
        if any(v.get(f) is not None for f in ("ACTIVE", "PCIE_TX", "PCIE_RX")) and not devices
        else None,
        mig=MigState(current=bool(devices), pending=bool(devices), devices=devices)
        if devices
        else None,
        unavailable=na,
    )


def _exported(
    got: dict[str, Any],
) -> tuple[dict[str, list[tuple[dict[str, str], float]]], dict[str, list[Alert]], dict[str, float]]:
    """What each node's own inferdeck export says: its alert counts, its named alerts (with the
    headroom behind each), and its cost per good token."""
    exported: dict[str, list[tuple[dict[str, str], float]]] = {}
    for labels, value in got.get("x:alerts") or []:
        exported.setdefault(_node(labels), []).append((labels, value))
    node_cost: dict[str, float] = {}
    for labels, value in got.get("x:cost") or []:
        n = _node(labels)
        if not math.isnan(value):
            node_cost[n] = min(value, node_cost.get(n, value))
    named: dict[str, list[Alert]] = {}
    heads: dict[tuple[str, str, str], tuple[float, str]] = {}
    budgets: dict[tuple[str, str, str], float] = {}
    for lab, v in got.get("x:headroom") or []:
        name = lab.get("__name__", "")
        key = (_node(lab), lab.get("service", ""), lab.get("rule", ""))
        if name.startswith(f"{PREFIX}headroom_budget_"):
            budgets[key] = v
        else:
            heads[key] = (v, name.removeprefix(f"{PREFIX}headroom_"))
    for labels, since in got.get("x:alert") or []:
        severity = labels.get("severity", "")
        if severity not in ("warning", "critical"):
            continue
        rule, subject = labels.get("rule", "?"), labels.get("subject", "node")
        key = (_node(labels), subject, rule)
        head = heads.get(key)
        named.setdefault(_node(labels), []).append(
            Alert(
                key=f"exported:{rule}:{subject}",
                rule=rule,
                severity=severity,
                subject=subject,
                # the time is the alert's own (since), shown once by the pane
                message=headroom_sentence(rule, head, budgets.get(key))
                + ", by the node's inferdeck export",
                since=datetime.fromtimestamp(since, tz=UTC),
            )
        )
    return exported, named, node_cost


# each headroom's words in the node's own sentences, and how its exported unit reads
HEADROOM_WORDS = {
    "memory": "memory headroom",
    "kv": "KV cache room",
    "queue": "requests waiting",
    "power": "power headroom",
    "thermal": "thermal headroom",
}


def _amount(v: float, unit: str) -> str:
    """An exported headroom in the unit the console shows it in: bytes as GiB, counts whole."""
    if unit == "bytes":
        return f"{v / 2**30:.1f} GiB"
    if unit == "requests":
        return f"{v:,.0f}"
    shown = {"sequences": "seqs", "watts": "W", "celsius": "°C", "seconds": "s"}.get(unit, unit)
    return f"{v:.1f} {shown}" if abs(v) < 10 else f"{v:,.0f} {shown}"


# the node's other alerts, as the fleet names them (the export carries their rule, not their text)
RULE_WORDS = {
    "engine_down": "engine down",
    "engine_restart": "engine restarted",
    "saturation": "saturated: latency past its SLO at this load",
    "gpu": "GPU unhealthy",
    "config-invalid": "its config file cannot be used",
}


def headroom_sentence(rule: str, head: tuple[float, str] | None, budget: float | None) -> str:
    """'KV cache room 0.1 seqs (plan 2.0 seqs)': the rule's headroom as the node exports it;
    'engine down' for an alert that is not about a headroom."""
    if rule not in HEADROOM_WORDS:
        return RULE_WORDS.get(rule, f"{rule.replace('_', ' ')} alert active")
    words = HEADROOM_WORDS[rule]
    if head is None:
        return f"{words} past its budget (figure not exported)"
    value, unit = head
    if rule == "queue":
        return f"{_amount(value, unit)} {words} where the plan allows none"
    text = f"{words} {_amount(value, unit)}"
    return text + (f" (plan {_amount(budget, unit)})" if budget is not None else "")


def _counted_alerts(rows: list[tuple[dict[str, str], float]], taken: datetime) -> list[Alert]:
    """Alerts from an export that only counts them (an older inferdeck)."""
    alerts: list[Alert] = []
    for labels, count in rows:
        severity = labels.get("severity", "")
        sev: Severity | None = (
            "warning" if severity == "warning" else "critical" if severity == "critical" else None
        )
        if sev is not None and count > 0:
            rule = labels.get("rule", "?")
            alerts.append(
                Alert(
                    key=f"exported:{rule}:{severity}",
                    rule=rule,
                    severity=sev,
                    subject="node",
                    message=f"{count:.0f} {rule} alert(s) active on the node "
                    "(its inferdeck export, its plan)",
                    since=taken,
                )
            )
    return alerts


def _verdict_alerts(counts: dict[str, float], alerts: list[Alert], taken: datetime) -> list[Alert]:
    """The node's own verdict where no alert carries it: its findings and pending conditions (an
    SLO missed before its burn is judged, a saturation before its hold), counted by its export,
    so the fleet's row says what `inferdeck check` on the node says."""
    out: list[Alert] = []
    severities: tuple[Severity, ...] = ("critical", "warning")
    for sev in severities:
        n = counts.get(sev, 0.0)
        if n <= 0 or any(a.severity == sev for a in alerts):
            continue
        out.append(
            Alert(
                key=f"exported:verdict:{sev}",
                rule="verdict",
                severity=sev,
                subject="node",
                message=f"{n:.0f} {sev} finding{'s' if n != 1 else ''} in its own verdict; "
                f"`inferdeck check` there names {'it' if n == 1 else 'them'}",
                since=taken,
            )
        )
    return out


def _seen_alerts(engines: list[Engine], gpus: list[Gpu], taken: datetime) -> list[Alert]:
    """Alerts the fleet sees itself: an engine Prometheus reports down, a GPU's XID."""
    alerts: list[Alert] = []
    for e in engines:
        if not e.up:
            alerts.append(
                Alert(
                    key=f"engine-down:{e.name}",
                    rule="engine_down",
                    severity="critical",
                    subject=e.name,
                    message=f"down: {e.error}",
                    since=taken,
                )
            )
    for g in gpus:
        if g.unavailable.get("xid"):
            alerts.append(
                Alert(
                    key=f"xid:{g.index}",
                    severity="critical",
                    subject=f"GPU {g.index}",
                    message=g.unavailable["xid"],
                    since=taken,
                )
            )
    return alerts


def _duration_s(text: object) -> float | None:
    """A Prometheus duration ("15s", "1m", "1m30s", "500ms") in seconds."""
    if not isinstance(text, str) or not text:
        return None
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)


def _timestamp(text: object) -> float | None:
    """Prometheus' RFC 3339 activeAt (nanoseconds and all) as Unix time."""
    if not isinstance(text, str):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        t = datetime.fromisoformat(head).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
    digits = "".join(ch for ch in frac if ch.isdigit())
    return t + (float("0." + digits) if digits else 0.0)
