"""Columns a dashboard table and snapshot.md's table share: one spec per column — its label, key,
the pane's width (or its widths at 80 and at 160 columns), the heading snapshot.md writes (where
the page has room for the whole name), and pure text functions: the whole figure, and where the
pane has less room than the page its brief form (the pane adds style). Each surface names the
columns it draws, in its order, from the one spec. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from console.figures.findings import strays
from console.frame import (
    CostReport,
    Engine,
    Gpu,
    GpuProcess,
    Headroom,
    MemoryLine,
    MigDevice,
    Percentiles,
    ServiceStatus,
)
from console.units import (
    GIB,
    NA,
    PARTIAL,
    count_text,
    gib,
    money,
    num,
    pct,
    price_range,
    quantile_text,
    room_cell,
    saturation_cell,
    seconds,
    share_range,
    target_text,
    watts,
    workload_text,
)

R = TypeVar("R")


@dataclass(frozen=True)
class Column(Generic[R]):
    label: str
    key: str
    width: int | tuple[int, int]  # the pane's, or its widths at 80 and at 160 columns
    text: Callable[[R], str]  # the whole figure: snapshot.md's cell
    heading: str | None = None  # snapshot.md's, when not the label in lower case
    brief: Callable[[R], str] | None = None  # the pane's, where it has less room than the page
    wide_only: bool = False  # the pane draws it from 160 columns on

    @property
    def doc(self) -> str:
        return self.heading or self.label.lower()

    def width_at(self, wide: bool) -> int:
        return self.width if isinstance(self.width, int) else self.width[1 if wide else 0]

    def short(self, row: R) -> str:
        """The pane's text."""
        return (self.brief or self.text)(row)


def pick(columns: tuple[Column[R], ...], keys: tuple[str, ...]) -> tuple[Column[R], ...]:
    """The columns a surface draws, in its order."""
    by_key = {c.key: c for c in columns}
    return tuple(by_key[k] for k in keys)


def _cost(text: Callable[[CostReport], str]) -> Callable[[ServiceStatus], str]:
    """A cost cell: n/a for a service without cost figures, never a stand-in 0."""
    return lambda s: NA if s.cost is None else text(s.cost)


def _joules(k: CostReport) -> str:
    return f"{k.joules_per_output_token:.1f}" if k.joules_per_output_token else NA


# the Cost pane and snapshot.md's Cost table, a row per service
COST_COLUMNS: tuple[Column[ServiceStatus], ...] = (
    Column("Service", "service", 12, lambda s: s.name),
    Column("$/h", "hourly", 6, _cost(lambda k: money(k.usd_per_h))),
    Column("Energy", "energy", 7, _cost(lambda k: money(k.energy.usd_per_h if k.energy else None, 3))),
    Column("Busy", "busy", 5, _cost(lambda k: pct(k.occupancy))),
    Column("$/M out", "out", 8, _cost(lambda k: money(k.usd_per_m_output_tokens)),
           heading="$/M output tokens"),
    Column("$/M good", "good", 13, _cost(lambda k: price_range(k.usd_per_m_compliant_tokens)),
           heading="$/M good tokens"),
    Column("J/tok", "jtok", 6, _cost(_joules), heading="J/tok"),
)  # fmt: skip


def _q(p: Percentiles | None, name: str) -> str:
    """A percentile on the page: every mark, its bucket where the bucket is wide."""
    return quantile_text(p, name, ranges=True)


def _kv(e: Engine) -> str:
    """KV use to a tenth, with the pool that binds where it is not the full-attention one."""
    pool, pools = e.kv_binding_pool, e.kv_pools
    binds = f" ({pool} {pct(pools[pool], 0)} binds)" if pool and pool != "full" and pools else ""
    return pct(e.kv_cache_usage, 1) + binds


def _completion_brief(e: Engine) -> str:
    if e.success_rate is None:
        return NA
    return f"{e.success_rate * 100:.1f}" if e.success_rate < 0.9995 else "100"


# the Engines pane and snapshot.md's Engines table, a row per engine (an engine down draws its
# name columns and says so in the next)
ENGINE_COLUMNS: tuple[Column[Engine], ...] = (
    Column("Engine", "engine", 12, lambda e: e.name),
    Column("Kind", "kind", 8, lambda e: e.kind or NA, wide_only=True),
    Column("Model", "model", 22, lambda e: e.model or NA, wide_only=True,
           brief=lambda e: e.model.rsplit("/", 1)[-1] if e.model else NA),
    Column("Dev", "dev", 3, lambda e: e.device or NA, heading="device"),
    Column("Run", "run", 4, lambda e: count_text(e.requests_running)),
    Column("Wait", "wait", 4, lambda e: count_text(e.requests_waiting)),  # 1834 → "1.8k"
    Column("Run/Wait", "queue", 9, lambda e: f"{num(e.requests_running)} / {num(e.requests_waiting)}",
           heading="running / waiting"),
    Column("KV", "kv", (4, 8), _kv, heading="KV",
           brief=lambda e: NA if e.kv_cache_usage is None else f"{e.kv_cache_usage * 100:.0f}%"),
    Column("tok/s", "tps", 5, lambda e: num(e.generation_tokens_per_s, 1),
           brief=lambda e: num(e.generation_tokens_per_s)),
    Column("TTFT p95", "ttft", 10,
           lambda e: f"{_q(e.ttft_s, 'p50')} / {_q(e.ttft_s, 'p95')} / {_q(e.ttft_s, 'p99')}",
           heading="TTFT p50/p95/p99", brief=lambda e: quantile_text(e.ttft_s, "p95", fit=10)),
    Column("TPOT p95", "tpot", 10, lambda e: _q(e.tpot_s, "p95"), heading="TPOT p95",
           brief=lambda e: quantile_text(e.tpot_s, "p95", fit=10)),
    # completion (requests finished without an error or abort), under the name every surface
    # gives it
    Column("Compl%", "ok", 6, lambda e: pct(e.success_rate, 2), heading="completion",
           wide_only=True, brief=_completion_brief),
    Column("Req/s", "rps", 5, lambda e: num(e.requests_per_s, 1), wide_only=True),
    # the room before an SLO breaks is on every width (at 80 columns the pane draws its rate only)
    Column("Room", "room", (6, 11), lambda e: room_cell(e.capacity)),
    Column("Sat", "sat", 6, lambda e: saturation_cell(e.capacity), wide_only=True),
)  # fmt: skip
# what each surface draws: the pane a column each for running and waiting and the p95s; the page
# has the room for both counts in one and for every percentile
ENGINE_PANE = ("engine", "kind", "model", "dev", "run", "wait", "kv", "tps", "ttft", "tpot", "ok",
               "rps", "room", "sat")  # fmt: skip
ENGINE_DOC = ("engine", "kind", "dev", "model", "queue", "kv", "tps", "ttft", "tpot", "ok")


def _observed(key: str, brief: bool = False) -> Callable[[ServiceStatus], str]:
    """A target's observed figure: the page's with its bucket, the target and whether it was
    met ("236ms° / 1.00s (met)"); the pane's ``brief`` one without its bucket, then its target
    ("236ms°/1.00s")."""

    def text(s: ServiceStatus) -> str:
        e = s.slo.targets.get(key) if s.slo else None
        if e is None or e.observed_s is None:
            return NA
        if brief:
            return f"{target_text(e, compact=True)}/{seconds(e.target_s)}"
        met = "met" if e.met else "MISSED"
        return f"{target_text(e, ranges=True)} / {seconds(e.target_s)} ({met})"

    return text


def _completion(s: ServiceStatus) -> float | None:
    return s.slo.completion.observed if s.slo and s.slo.completion else None


def burn_text(s: ServiceStatus) -> str:
    """The 5-minute and 1-hour burn rates, '°' on a window not yet full, '-' where unread."""
    w = s.slo.burn.windows if s.slo and s.slo.burn else {}
    got = [w.get(k) for k in ("5m", "1h")]
    if all(b is None or b.burn is None for b in got):
        return NA
    return "/".join(
        "-"
        if b is None or b.burn is None
        else f"{b.burn:.1f}" + ("" if b.ready is not False else PARTIAL)
        for b in got
    )


# the SLO pane and snapshot.md's SLO table, a row per service
SLO_COLUMNS: tuple[Column[ServiceStatus], ...] = (
    Column("Service", "service", 12, lambda s: s.name, brief=lambda s: s.name[:12]),
    Column("Window", "window", 6, lambda s: s.slo.window if s.slo else NA),
    Column("TTFT p95", "ttft", 14, _observed("ttft_s"), heading="TTFT observed / target",
           brief=_observed("ttft_s", brief=True)),
    Column("TPOT p95", "tpot", 13, _observed("tpot_s"), heading="TPOT observed / target",
           brief=_observed("tpot_s", brief=True)),
    Column("Compl%", "done", 6, lambda s: pct(_completion(s), 2), heading="completion",
           brief=lambda s: NA if (v := _completion(s)) is None else f"{v * 100:.1f}"),
    Column("Good", "good", 13, lambda s: share_range(s.slo.good_share if s.slo else None),
           heading="good share"),
    Column("Burn 5m/1h", "burn", 10, burn_text),
)  # fmt: skip
# the pane's title carries the window and it has the room for the burn; the page says where each
# target stands against it
SLO_PANE = ("service", "ttft", "tpot", "done", "good", "burn")
SLO_DOC = ("service", "window", "ttft", "tpot", "done", "good")


def headroom_words(h: Headroom | None) -> str:
    """A headroom against its budget, in words: "5.2G left", "1.5 over", "3 wait"; the engine's
    "up", "DOWN" or "?"; "-" where the service has no such headroom."""
    if h is None:
        return "-"
    if h.name == "engine":
        return "up" if h.state == "ok" else ("DOWN" if h.state == "critical" else "?")
    if h.value is None:
        return NA
    if h.unit == "waiting":
        return f"{count_text(h.value)} wait"  # a queue in the thousands whole: "1.8k wait"
    unit = {"GiB": "G", "W": "W", "°C": "°"}.get(h.unit, "")
    size = f"{abs(h.value):.1f}" if h.unit in ("GiB", "seqs") else f"{abs(h.value):.0f}"
    return f"{size}{unit} {'left' if h.value >= 0 else 'over'}"


def headroom_of(s: ServiceStatus, name: str) -> Headroom | None:
    return next((h for h in s.headroom if h.name == name), None)


def _words(name: str) -> Callable[[ServiceStatus], str]:
    return lambda s: headroom_words(headroom_of(s, name))


def _headrooms(s: ServiceStatus) -> str:
    """The page's: every headroom's state, with its figure."""
    return "; ".join(
        f"{h.name} {h.state}" + (f" ({h.value:.1f} {h.unit})" if h.value is not None else "")
        for h in s.headroom
    )


def drift_line(lines: list[MemoryLine]) -> MemoryLine | None:
    """The memory line where the engine strays furthest from the plan."""
    known = [m for m in lines if m.drift_bytes is not None and m.engine_bytes is not None]
    return max(known, key=lambda m: abs(m.drift_bytes or 0.0)) if known else None


def _drift(s: ServiceStatus) -> str:
    """That line: engine / planned, drift ("kv 33.6/20.0 +13.6")."""
    m = drift_line(s.memory)
    if m is None:
        return "-"
    return (
        f"{m.name} {gib(m.engine_bytes)}/{gib(m.planned_bytes)} {(m.drift_bytes or 0.0) / GIB:+.1f}"
    )


def drifts(s: ServiceStatus) -> bool:
    """That line strays from the plan (KV below it, or a total above it)."""
    m = drift_line(s.memory)
    return m is not None and strays(m)


def _planned(digits: int, fits: bool) -> Callable[[ServiceStatus], str]:
    """The plan's GiB over the device's ("36.87 / 47.38 GiB"); the pane's says first when it does
    not fit (a cell too narrow cuts the figures, never the verdict)."""

    def text(s: ServiceStatus) -> str:
        cap = f"{s.capacity_bytes / 2**30:.{digits}f}" if s.capacity_bytes else "?"
        head = "NO FIT " if fits and s.fits is False else ""
        return f"{head}{s.required_bytes / 2**30:.{digits}f} / {cap} GiB"

    return text


# the Budget pane and snapshot.md's plan-fit table, a row per planned service: the pane a column
# per headroom, the page every headroom's state in one
BUDGET_COLUMNS: tuple[Column[ServiceStatus], ...] = (
    Column("Service", "service", 12, lambda s: s.name),
    Column("Dev", "dev", 4, lambda s: f"{s.device} → {s.device_id or 'not found'}",
           heading="device", brief=lambda s: s.device_id or "?"),
    Column("Memory", "memory", (10, 15), _words("memory")),
    Column("KV seqs", "kv", (10, 15), _words("kv")),
    Column("Queue", "queue", (9, 14), _words("queue")),
    Column("Power", "power", (9, 14), _words("power")),
    Column("Thermal", "thermal", (8, 13), _words("thermal")),
    Column("Engine", "engine", 6, _words("engine"), wide_only=True),
    Column("Planned / capacity", "planned", 22, _planned(2, fits=False), wide_only=True,
           brief=_planned(1, fits=True)),
    Column("Fits", "fits", 4, lambda s: {True: "yes", False: "NO", None: "?"}[s.fits]),
    Column("Headroom", "headroom", 0, _headrooms),
    Column("Engine vs plan GiB", "drift", 22, _drift, wide_only=True),
)  # fmt: skip
BUDGET_PANE = ("service", "dev", "memory", "kv", "queue", "power", "thermal", "engine", "planned",
               "drift")  # fmt: skip
BUDGET_DOC = ("service", "dev", "planned", "fits", "headroom")


@dataclass(frozen=True)
class GpuRow:
    """A row of the GPU table: a GPU, or one of its MIG devices under it."""

    gpu: Gpu
    mig: MigDevice | None = None


def gpu_rows(gpus: list[Gpu]) -> list[GpuRow]:
    """Each GPU, then its MIG devices."""
    return [
        row
        for g in gpus
        for row in [GpuRow(g)] + [GpuRow(g, d) for d in (g.mig.devices if g.mig else [])]
    ]


def short_gpu_name(name: str | None) -> str:
    if not name:
        return NA
    name = name.removeprefix("NVIDIA ")
    return name.replace("Blackwell Server Edition", "BSE").replace(" Blackwell", "")


def clock_events_text(g: Gpu) -> str:
    """The active clock event reasons, "none", or n/a where NVML did not say."""
    if g.clock_events is None:
        return NA
    return ", ".join(g.clock_events) or "none"


def process_text(p: GpuProcess) -> str:
    """A process: pid, the engine it serves, its pod or container."""
    where = workload_text(p.workload) if p.workload is not None else ""
    return f"{p.pid}{' ' + p.engine if p.engine else ''}{' (' + where + ')' if where else ''}"


def _name(r: GpuRow) -> str:
    d = r.mig
    if d is None:
        return r.gpu.name or NA
    # (DCGM, in the fleet, exports no placement: none is written, where '@None' was)
    where = f" @{d.placement_start}" if d.placement_start is not None else ""
    return f"MIG {d.profile or NA}{where}"


def _name_brief(r: GpuRow) -> str:
    d = r.mig
    if d is None:
        return short_gpu_name(r.gpu.name)
    where = f"@{d.placement_start}" if d.placement_start is not None else ""
    return f"└ {d.profile or NA}{where}"


def _memory(r: GpuRow) -> tuple[int | None, int | None]:
    of = r.mig or r.gpu
    return of.memory_used_bytes, of.memory_total_bytes


def _memory_brief(r: GpuRow) -> str:
    used, total = _memory(r)
    return NA if used is None or total is None else f"{used / GIB:4.1f}/{total / GIB:.0f}G"


def _util(r: GpuRow) -> str:
    """The GPU's utilisation; a MIG device's GPM graphics activity (NVML has no utilisation
    there)."""
    if r.mig is not None:
        act = r.mig.activity.graphics_pct if r.mig.activity is not None else None
        return f"activity {act:.0f}%" if act is not None else "n/a under MIG"
    v = r.gpu.utilization_gpu_pct
    return pct(v / 100 if v is not None else None)


def _util_brief(r: GpuRow) -> str:
    if r.mig is not None:
        act = r.mig.activity.graphics_pct if r.mig.activity is not None else None
        return "n/a MIG" if act is None else f"{act:4.0f}%"
    v = r.gpu.utilization_gpu_pct
    if v is None:  # why, where the reader said ("n/a under MIG")
        return r.gpu.unavailable.get("utilization_gpu_pct", NA).replace("n/a under MIG", "n/a MIG")
    return f"{v:4.0f}%"


def _gpu_only(text: Callable[[Gpu], str]) -> Callable[[GpuRow], str]:
    """A figure of the whole GPU: blank on its MIG devices' rows."""
    return lambda r: "" if r.mig is not None else text(r.gpu)


def _temp(g: Gpu) -> str:
    return (
        f"{num(g.temperature_c)}°C ({clock_events_text(g)})" if g.temperature_c is not None else NA
    )


def _clock(g: Gpu) -> str:
    if g.clock_sm_mhz is None:
        return NA
    if g.clock_sm_max_mhz is None:  # the fleet's DCGM series hold no maximum
        return f"{g.clock_sm_mhz}"
    return f"{g.clock_sm_mhz}/{g.clock_sm_max_mhz}"


def _procs(r: GpuRow) -> str:
    """How many processes: a MIG device's, or the GPU's with its devices'."""
    g = r.gpu
    n = (
        len(r.mig.processes)
        if r.mig is not None
        else len(g.processes) + sum(len(d.processes) for d in (g.mig.devices if g.mig else []))
    )
    return str(n) if n else ""


def _mig_and_processes(r: GpuRow) -> str:
    """MIG on or off (or n/a), the GPU's own processes and the MIG note; a device's processes."""
    if r.mig is not None:
        return ", ".join(process_text(p) for p in r.mig.processes)
    g = r.gpu
    text = "on" if g.mig and g.mig.current else ("off" if g.mig else "n/a")
    if g.processes:
        text += "; " + ", ".join(process_text(p) for p in g.processes)
    if g.mig and g.mig.note:
        text += f" ({g.mig.note})"
    return text


# the GPU pane and snapshot.md's GPU table, a row per GPU and per MIG device (a GPU lost draws
# its index and says so in the next columns)
GPU_COLUMNS: tuple[Column[GpuRow], ...] = (
    Column("GPU", "gpu", 4,
           lambda r: str(r.gpu.index) if r.mig is None else f"{r.gpu.index}/{r.mig.index}",
           brief=lambda r: str(r.gpu.index) if r.mig is None else f" {r.gpu.index}/{r.mig.index}"),
    Column("Device", "device", (16, 24), _name, heading="name", brief=_name_brief),
    Column("Memory", "memory", 17,
           lambda r: f"{gib(_memory(r)[0])}/{gib(_memory(r)[1])} GiB", brief=_memory_brief),
    Column("Util/Act", "util", 9, _util, heading="util", brief=_util_brief),
    Column("Power", "power", 10, _gpu_only(lambda g: f"{watts(g.power_w)}/{watts(g.power_limit_w)}"),
           brief=_gpu_only(lambda g: NA if g.power_w is None else f"{g.power_w:4.0f}W")),
    Column("Temp", "temp", 8, _gpu_only(_temp), heading="temp (clock events)",
           brief=_gpu_only(lambda g: NA if g.temperature_c is None else f"{g.temperature_c:3.0f}°C")),
    Column("SM clock", "clock", 10, _gpu_only(_clock), wide_only=True),
    Column("Clock events", "events", 18, _gpu_only(clock_events_text), wide_only=True),
    Column("Procs", "procs", 5, _procs, wide_only=True),
    Column("MIG / processes", "mig", 0, _mig_and_processes, heading="MIG / processes"),
)  # fmt: skip
GPU_PANE = ("gpu", "device", "memory", "util", "power", "temp", "clock", "events", "procs")
GPU_DOC = ("gpu", "device", "memory", "util", "power", "temp", "mig")
