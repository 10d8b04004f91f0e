"""The operator's plan: services, their memory budget, and the fit arithmetic (DESIGN §1).

    required = weights + KV cache + runtime reserve + allocation margin
    weights  = params x bits / 8                (or a measured checkpoint size)
    KV       = 2 x layers x kv_heads x head_dim x KV bytes  per token
               x resident tokens per sequence x concurrent sequences

GiB (2**30 bytes) throughout; device capacity from the driver-reported bytes when live, from the
GPU catalog when planning offline.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from console.figures.cost import CostSpec
from console.frame import Gpu
from console.gpucatalog import MIB, catalog
from console.records import UserFile
from console.yamlfile import load_entries

GIB = 2**30
DEVICE_RE = re.compile(
    r"^(?:(?P<gpu>\d+)(?::(?P<profile>\d+g\.\d+gb[^@]*)@(?P<start>\d+))?|(?P<uuid>(?:GPU|MIG)-[0-9a-fA-F-]+))$"
)


class _Strict(UserFile):
    """A part of a file a user wrote: checked by ``model_validate``, unknown keys refused."""


class ModelShape(_Strict):
    title: str | None = None
    params_b: float = Field(gt=0)
    layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)


@cache
def model_catalog() -> dict[str, ModelShape]:
    text = resources.files("config").joinpath("models.yaml").read_text(encoding="utf-8")
    return load_entries(text, "config/models.yaml", ModelShape)


class SloSpec(_Strict):
    """Latency and completion targets for one service (the SLO issue fills these in)."""

    percentile: float = Field(0.95, gt=0, lt=1)
    ttft_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)
    e2e_s: float | None = Field(None, gt=0)
    completion: float = Field(0.995, gt=0, le=1)
    window: str = "5m"
    # the error budget's period: the console's burn and budget figures and `inferdeck rules --slo`
    budget_period_days: int = Field(28, ge=1, le=366)


class Service(_Strict):
    name: str
    engine: str | None = (
        None  # the engine's name (config engines[].name); default: the service name
    )
    replicas: list[str] | None = (
        None  # several engines serving this service (SLOs sum their buckets)
    )
    # how the router spreads requests over the replicas: round-robin (equal shares: the service
    # breaks with its weakest replica) or least-loaded (each takes what it can: capacities add)
    routing: Literal["round-robin", "least-loaded"] = "round-robin"
    # the engine's batch cap (vLLM --max-num-seqs, SGLang --max-running-requests ...), for the
    # capacity model when the engine exports none and discovery did not read it
    max_running: int | None = Field(None, gt=0)
    device: str
    model: str | ModelShape
    weight_bits: float | None = Field(None, gt=0, le=32)
    weights_gib: float | None = Field(
        None, gt=0
    )  # a measured checkpoint size instead of the arithmetic
    weight_overhead: float = Field(0.0, ge=0, le=1)  # allowance for scales and unquantised tensors
    kv_bits: float = Field(16, gt=0, le=32)
    tokens_per_sequence: int = Field(gt=0)
    concurrent_sequences: int = Field(gt=0)
    runtime_reserve_gib: float = Field(0.0, ge=0)
    margin_gib: float = Field(0.0, ge=0)
    slo: SloSpec | None = None

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.match(v):
            raise ValueError(
                f"{v!r} is not a GPU index (0), a MIG device (1:2g.48gb@0) or a GPU/MIG uuid"
            )
        return v

    @model_validator(mode="after")
    def _weights(self) -> Self:
        if (self.weight_bits is None) == (self.weights_gib is None):
            raise ValueError(
                "give weight_bits or weights_gib (a measured checkpoint size), exactly one"
            )
        return self

    @property
    def engine_name(self) -> str:
        return self.engine or (self.replicas[0] if self.replicas else self.name)

    @property
    def engine_names(self) -> list[str]:
        return self.replicas or [self.engine_name]


class Node(_Strict):
    name: str | None = None
    gpus: int | None = Field(None, ge=0)  # GPUs expected on the node
    gpu_model: str | None = None  # catalog key, for planning offline


class AlertRule(_Strict):
    for_s: float = Field(0.0, ge=0)
    clear_s: float = Field(30.0, ge=0)
    enabled: bool = True


class AlertRules(_Strict):
    memory: AlertRule = AlertRule(for_s=15, clear_s=30)
    kv: AlertRule = AlertRule(for_s=15, clear_s=30)
    kv_usage_critical: float = Field(0.90, gt=0, le=1)
    queue: AlertRule = AlertRule(for_s=60, clear_s=30)
    power: AlertRule = AlertRule(for_s=30, clear_s=60)
    power_within_pct: float = Field(5.0, ge=0)
    thermal: AlertRule = AlertRule(for_s=15, clear_s=60)
    thermal_within_c: float = Field(5.0, ge=0)
    engine_down: AlertRule = AlertRule(for_s=0, clear_s=0)
    burn: AlertRule = AlertRule(for_s=0, clear_s=60)
    imbalance: AlertRule = AlertRule(for_s=30, clear_s=30)  # one DP rank carries the load
    # p90 latency at or past its SLO, or near it while load and TTFT rise (warning: burn pages)
    saturation: AlertRule = AlertRule(for_s=30, clear_s=60)
    # a headroom's rising trend uses it up (KV full, a queue past the TTFT SLO, power at its
    # limit) within the planned horizon; the error budget is spent within its own horizon
    exhaustion: AlertRule = AlertRule(for_s=30, clear_s=60)
    exhaustion_horizon_s: float = Field(900.0, gt=0)
    budget_horizon_s: float = Field(86400.0, gt=0)


class Plan(_Strict):
    node: Node = Node()
    services: list[Service] = Field(default_factory=list)
    cost: CostSpec | None = None
    alerts: AlertRules = AlertRules()
    bell: bool = False


# --- arithmetic -------------------------------------------------------------------------------


def shape(svc: Service) -> ModelShape:
    if isinstance(svc.model, ModelShape):
        return svc.model
    return model_catalog()[svc.model]


def weights_bytes(params_b: float, bits: float) -> float:
    return params_b * 1e9 * bits / 8


def kv_bytes_per_token(m: ModelShape, kv_bits: float) -> float:
    return 2 * m.layers * m.kv_heads * m.head_dim * kv_bits / 8


@dataclass(frozen=True)
class Fit:
    service: str
    device: str
    weights_bytes: float
    kv_bytes_per_token: float
    kv_bytes: float
    runtime_bytes: float
    margin_bytes: float
    required_bytes: float
    capacity_bytes: float | None
    capacity_source: str  # "driver" | "catalog" | "unknown"
    device_label: str  # "GPU 0 (RTX PRO 6000 ..., 96 GB)"

    @property
    def headroom_bytes(self) -> float | None:
        return None if self.capacity_bytes is None else self.capacity_bytes - self.required_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.required_bytes <= self.capacity_bytes


def fit(svc: Service, capacity_bytes: float | None, capacity_source: str, device_label: str) -> Fit:
    m = shape(svc)
    if svc.weights_gib is not None:
        w = svc.weights_gib * GIB
    else:
        assert svc.weight_bits is not None
        w = weights_bytes(m.params_b, svc.weight_bits)
    w *= 1 + svc.weight_overhead
    per_token = kv_bytes_per_token(m, svc.kv_bits)
    kv = per_token * svc.tokens_per_sequence * svc.concurrent_sequences
    runtime, margin = svc.runtime_reserve_gib * GIB, svc.margin_gib * GIB
    return Fit(
        svc.name,
        svc.device,
        w,
        per_token,
        kv,
        runtime,
        margin,
        w + kv + runtime + margin,
        capacity_bytes,
        capacity_source,
        device_label,
    )


# --- devices ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRef:
    gpu: int | None
    profile: str | None = None
    start: int | None = None
    uuid: str | None = None


def parse_device(text: str) -> DeviceRef:
    m = DEVICE_RE.match(text)
    if m is None:
        raise ValueError(text)
    if m.group("uuid"):
        return DeviceRef(None, uuid=m.group("uuid"))
    start = m.group("start")
    return DeviceRef(
        int(m.group("gpu")), m.group("profile"), int(start) if start is not None else None
    )


def catalog_capacity(ref: DeviceRef, node: Node) -> tuple[float | None, str]:
    """(capacity bytes, label) from the GPU catalog, or (None, why) when it cannot say."""
    if node.gpu_model is None:
        return None, "no node.gpu_model to plan against offline"
    model = catalog()[node.gpu_model]
    if ref.uuid is not None:
        return None, f"{ref.uuid} (a uuid needs the live node)"
    if ref.profile is None:
        return model.memory_total_mib * MIB, f"GPU {ref.gpu}, {model.memory_gb} GB {model.name}"
    assert model.mig is not None
    prof = model.mig.profile(ref.profile)
    return prof.memory_mib * MIB, f"GPU {ref.gpu} MIG {ref.profile}@{ref.start}"


def live_device(
    ref: DeviceRef, gpus: list[Gpu]
) -> tuple[str | None, float | None, float | None, Gpu | None]:
    """(device id like "1/0", capacity bytes, used bytes, parent GPU) on the live node, or Nones."""
    for g in gpus:
        if ref.uuid is not None and g.uuid == ref.uuid:
            return str(g.index), g.memory_total_bytes, g.memory_used_bytes, g
        for d in g.mig.devices if g.mig else []:
            if ref.uuid is not None and d.uuid == ref.uuid:
                return f"{g.index}/{d.index}", d.memory_total_bytes, d.memory_used_bytes, g
            if (
                ref.gpu == g.index
                and ref.profile is not None
                and d.profile == ref.profile
                and d.placement_start == ref.start
            ):
                return f"{g.index}/{d.index}", d.memory_total_bytes, d.memory_used_bytes, g
        if ref.uuid is None and ref.profile is None and ref.gpu == g.index:
            return str(g.index), g.memory_total_bytes, g.memory_used_bytes, g
    return None, None, None, None


def check_plan(plan: Plan, where: object = None) -> None:
    """Cross-checks the field checks cannot do: known models, devices that exist (offline), distinct names."""
    from console.yamlfile import ConfigError

    def at(path: tuple[Any, ...]) -> str:
        return f"{where(path)}: " if callable(where) else ""

    names: set[str] = set()
    for i, svc in enumerate(plan.services):
        if svc.name in names:
            raise ConfigError(
                f"{at(('services', i, 'name'))}services.{i}.name: {svc.name!r} is used twice; "
                "give each service its own name."
            )
        names.add(svc.name)
        if isinstance(svc.model, str) and svc.model not in model_catalog():
            known = ", ".join(sorted(model_catalog()))
            raise ConfigError(
                f"{at(('services', i, 'model'))}services.{i}.model: unknown model {svc.model!r}; "
                f"use one of {known}, or give layers/kv_heads/head_dim/params_b inline."
            )
        ref = parse_device(svc.device)
        if plan.node.gpus is not None and ref.gpu is not None and ref.gpu >= plan.node.gpus:
            raise ConfigError(
                f"{at(('services', i, 'device'))}services.{i}.device: GPU {ref.gpu} does not exist "
                f"(node.gpus is {plan.node.gpus}; GPUs are numbered from 0)."
            )
        if plan.node.gpu_model is not None:
            if plan.node.gpu_model not in catalog():
                raise ConfigError(
                    f"{at(('node', 'gpu_model'))}node.gpu_model: unknown GPU {plan.node.gpu_model!r}; "
                    f"use one of {', '.join(sorted(catalog()))}."
                )
            model = catalog()[plan.node.gpu_model]
            if ref.profile is not None:
                profiles = {p.name: p for p in (model.mig.profiles if model.mig else [])}
                prof = profiles.get(ref.profile)
                if prof is None:
                    raise ConfigError(
                        f"{at(('services', i, 'device'))}services.{i}.device: {model.name} has no MIG "
                        f"profile {ref.profile!r}; use one of {', '.join(profiles) or 'none (no MIG)'}."
                    )
                if ref.start not in prof.starts:
                    raise ConfigError(
                        f"{at(('services', i, 'device'))}services.{i}.device: {ref.profile} cannot "
                        f"start at {ref.start}; valid placements are {prof.starts}."
                    )


def plan_of(doc: object) -> Plan:
    """The Plan part of a config as JSON (a recording's header, a config read again): the
    engines and how they are watched left out. A ValidationError when it does not fit."""
    got = doc if isinstance(doc, dict) else {}
    return Plan.model_validate({k: v for k, v in got.items() if k in Plan.model_fields})


def plan_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What a plan read again changes (both as JSON), one phrase each, services by name:
    "service batch added", "services.chat.slo.ttft_p95_s 1 → 0.5"."""
    out: list[str] = []

    def by_name(plan: dict[str, Any]) -> dict[str, Any]:
        return {str(s.get("name")): s for s in plan.get("services") or []}

    was, now = by_name(old), by_name(new)
    out += [f"service {n} added" for n in now if n not in was]
    out += [f"service {n} removed" for n in was if n not in now]

    def flat(value: Any, path: str, into: dict[str, Any]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                flat(v, f"{path}.{k}" if path else str(k), into)
        else:
            into[path] = value

    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    flat({**old, "services": {n: s for n, s in was.items() if n in now}}, "", a)
    flat({**new, "services": {n: s for n, s in now.items() if n in was}}, "", b)

    def said(v: Any) -> str:
        if v is None:
            return "none"
        if isinstance(v, float):
            return f"{v:g}"
        return json.dumps(v) if isinstance(v, (list, str)) else str(v)

    for path in [*a, *(p for p in b if p not in a)]:
        if a.get(path) != b.get(path):
            out.append(f"{path} {said(a.get(path))} → {said(b.get(path))}")
    return out
