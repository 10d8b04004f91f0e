"""The JSON the reading commands print with ``--format json``, as records: each command's output
is checked against its record before it is printed, and ``inferdeck schema KIND`` writes the
JSON Schema from the same record, so the two cannot drift.

The Frame (``snapshot``, frame.json) and the timeline (``timeline --format json``) are records
of their own in ``frame.py``; the rest are here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from console.figures.plan import Node
from console.frame import Concern, Severity
from console.records import Record

Status = Literal["ok", "warning", "critical", "unknown"]


class Perf(Record):
    """One figure of the check's performance data (``'label'=value[unit];warn;crit;min;max``)."""

    label: str  # '<engine> <figure>'
    engine: str
    figure: str  # ttft_p95, kv, waiting, tok/s, room_rps, saturation
    value: float | None  # None: unknown (U)
    unit: str = ""
    warn: float | None = None
    crit: float | None = None
    min: float | None = None
    max: float | None = None


class CheckDoc(Record):
    """``inferdeck check --format json``: the verdict the plugin's first line says, and its
    exit code (0 ok, 1 warning, 2 critical, 3 unknown)."""

    schema_: Literal["inferdeck.check/1"] = Field("inferdeck.check/1", alias="schema")
    host: str
    taken_at: str
    status: Status
    exit_code: int
    first_line: str  # the Nagios plugin's first line, performance data left out
    source: str | None = None  # where the frame came from when the check did not sample it
    window_s: float
    window_covered_s: float | None = None
    verdict: list[Concern] = Field(default_factory=list)
    perfdata: list[Perf] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class FleetDetail(Record):
    severity: Severity
    node: str | None  # None: an SLO burn whose rules name no node
    subject: str
    message: str
    since: str | None = None


class FleetCheckDoc(Record):
    """``inferdeck check --prometheus URL --format json``: the worst node decides."""

    schema_: Literal["inferdeck.fleet-check/1"] = Field("inferdeck.fleet-check/1", alias="schema")
    prometheus: str
    taken_at: str | None
    status: Status
    exit_code: int
    first_line: str
    nodes: int
    details: list[FleetDetail] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class ActiveAlert(Record):
    severity: Severity
    subject: str
    message: str
    since: str


class FleetNode(Record):
    """One node's row of the fleet (what the fleet screen shows)."""

    node: str
    gpus: int
    mig: int
    engines: str  # up/known
    worst: Literal["ok", "warning", "critical", "down"]
    window_covered_s: float | None
    ttft: float | None  # the worst engine's TTFT p95, seconds
    ttft_within_target: float | None
    ttft_target_s: float | None
    tps: float | None
    usd_per_m_compliant_tokens_at_least: float | None
    cost_basis: str | None
    alerts: int
    down: str | None
    active_alerts: list[ActiveAlert]
    gpu_exporter: str | None
    # each GPU as frame.json's gpus (inferdeck schema frame), less its processes
    gpu_figures: list[dict[str, Any]]


class FleetSlo(Record):
    service: str
    slo: str
    node: str | None
    budget_left: float | None
    period: str | None
    budget_watched_s: float | None
    burn_alert: str | None
    state: str | None
    since: float | None


class FleetDoc(Record):
    """``inferdeck snapshot --prometheus URL --format json``."""

    schema_: Literal["inferdeck.fleet/1"] = Field("inferdeck.fleet/1", alias="schema")
    prometheus: str
    taken_at: str
    window_s: float
    window_note: str | None
    backend: str | None
    rates: str
    from_recording_rules: list[str]
    nodes: list[FleetNode]
    errors: dict[str, str]
    warnings: list[str]
    other_targets_down: list[str]
    slo: list[FleetSlo]
    slo_note: str | None
    timeline: dict[str, Any] | None  # as `inferdeck schema timeline`


class Placement(Record):
    profile: str
    start: int


class MigGpu(Record):
    index: int
    model: str | None = None
    mig: bool | None = None  # None: could not be read (error says why)
    mig_pending: bool | None = None
    layout: str | None = None  # '2g.48gb + 1g.24gb x2'
    placements: list[Placement] = Field(default_factory=list)
    bare: list[Placement] = Field(default_factory=list)  # GPU instances with no MIG device
    error: str | None = None


class Interrupted(Record):
    gpu: int | None  # None: no GPU with the recorded uuid
    state: str  # the layout the GPU is in: new, old, neither or unknown
    sentence: str
    command: str | None  # what brings it to a recorded layout


class MigShowDoc(Record):
    """``inferdeck mig show --format json``."""

    schema_: Literal["inferdeck.mig-show/1"] = Field("inferdeck.mig-show/1", alias="schema")
    gpus: list[MigGpu]
    interrupted: list[Interrupted] = Field(default_factory=list)


class MigLayout(Record):
    layout: str
    placements: list[Placement]
    current: bool


class MigLayoutsDoc(Record):
    """``inferdeck mig layouts GPU --format json``."""

    schema_: Literal["inferdeck.mig-layouts/1"] = Field("inferdeck.mig-layouts/1", alias="schema")
    gpu: int
    spec_source: str
    layouts: list[MigLayout]


class PlanService(Record):
    name: str
    device: str
    device_label: str
    model: str
    weights_gib: float
    kv_bytes_per_token: float
    kv_cache_gib: float
    runtime_gib: float
    margin_gib: float
    required_gib: float
    capacity_gib: float | None
    capacity_source: str
    headroom_gib: float | None
    fits: bool | None


class PlanDevice(Record):
    device: str
    label: str
    services: list[str]
    required_gib: float
    capacity_gib: float | None
    headroom_gib: float | None
    fits: bool


class PlanDoc(Record):
    """``inferdeck plan --format json``."""

    schema_: Literal["inferdeck.plan/1"] = Field("inferdeck.plan/1", alias="schema")
    node: Node
    services: list[PlanService]
    devices: list[PlanDevice]
    fits: bool


DOCS: dict[str, type[Record]] = {
    "check": CheckDoc,
    "fleet-check": FleetCheckDoc,
    "fleet-snapshot": FleetDoc,
    "mig-show": MigShowDoc,
    "mig-layouts": MigLayoutsDoc,
    "plan": PlanDoc,
}


def dump(doc: Record, indent: int = 2) -> str:
    return doc.model_dump_json(by_alias=True, indent=indent) + "\n"


def checked(kind: str, doc: dict[str, Any], indent: int = 2) -> str:
    """``doc`` checked against its record, as JSON."""
    return dump(DOCS[kind].model_validate(doc), indent)
