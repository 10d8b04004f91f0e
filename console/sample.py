"""What one poll acquired, before any derivation: the NVML reading and each engine's scrape
reduced to its profile's signals. Live polls derive Frames from Samples; recordings store
Samples, so replay derives the same Frames (windows, alerts) through the same code."""

from __future__ import annotations

import functools
from array import array
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, with_config

from console.engines import Extract
from console.frame import Gpu, GpuSource, LlamaSlot
from console.records import Record


class SlotFigures(Record):
    kv_cache_usage: float
    kv_capacity_tokens: float
    slots: list[LlamaSlot]


class SlotsReading(Record):
    """What llama.cpp's GET /slots said this poll: its figures, or why there are none."""

    fields: SlotFigures | None = None
    unavailable: dict[str, str] = {}
    series: dict[str, str] = {}


@dataclass
@with_config(ConfigDict(extra="forbid"))  # a recording's engine, read back by pydantic
class EngineSample:
    label: str
    url: str
    t: float
    device: str | None = None
    model: str | None = None  # the configured model name, for engines without model labels
    fresh: bool = True  # False: not due this poll (its own interval); the last figures stand
    scrape_s: float | None = None
    up: bool = False
    error: str | None = None
    kind: str | None = None
    extract: Extract | None = None
    slots: SlotsReading | None = None  # llama.cpp /slots
    top_models: list[str] | None = None  # Triton: models no ensemble calls (API or config)
    moved_to: str | None = None  # the page came from another host, by a redirect: that host
    max_running: int | None = None  # the batch cap its command line set (discovery), if seen


class ConfigChange(Record):
    """The config file read again by a running console: its new plan (and the keys that wait
    for a restart), or why it could not be read (the plan before stays in force)."""

    path: str
    plan: dict[str, Any] | None = None
    at_restart: list[str] = []
    error: str | None = None


@dataclass
class Sample:
    t: float
    source: GpuSource
    gpus: list[Gpu] = field(default_factory=list)
    engines: list[EngineSample] = field(default_factory=list)
    # how far the wall clock stands from the steady clock ``t`` is read on (a step: NTP, a VM
    # resumed); recorded once it is a step (WALL_STEP_S), so a replay states it as the console did
    wall_offset_s: float = 0.0
    config: ConfigChange | None = None  # the config file read again at this poll


def _pairs(values: dict[Any, Any]) -> list[Any]:
    return [
        [[list(p) for p in labels], list(vec) if isinstance(vec, (tuple, array)) else vec]
        for labels, vec in values.items()
    ]


def extract_to_json(ex: Extract) -> dict[str, Any]:
    return {
        "t": ex.t,
        "series": ex.series,
        "model": ex.model,
        "hints": ex.hints,
        "problems": ex.problems,
        "gauges": {k: _pairs(v) for k, v in ex.gauges.items()},
        "counters": {k: _pairs(v) for k, v in ex.counters.items()},
        "histograms": {k: _pairs(v) for k, v in ex.histograms.items()},
        "bounds": {k: _pairs(v) for k, v in ex.bounds.items()},
        "info": {k: [list(p) for p in v] for k, v in ex.info.items()},
    }


Pair = tuple[list[tuple[str, str]], float]  # label pairs, a gauge's value
VectorPair = tuple[list[tuple[str, str]], list[float]]  # label pairs, a counter or buckets


class _ExtractDoc(BaseModel):
    """A recorded Extract as JSON holds it (label sets as lists of pairs), checked field by
    field."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built when a recording is read
    t: float
    series: dict[str, str] = {}
    model: str | None = None
    hints: list[str] = []
    problems: dict[str, str] = {}
    gauges: dict[str, list[Pair]] = {}
    counters: dict[str, list[VectorPair]] = {}
    histograms: dict[str, list[VectorPair]] = {}
    bounds: dict[str, list[VectorPair]] = {}
    info: dict[str, list[tuple[str, str]]] = {}


WALL_STEP_S = 2.0  # the wall clock this far from the steady one: it stepped


class _SampleDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    t: float
    source: GpuSource
    gpus: list[Gpu] = []
    engines: list[dict[str, Any]] = []
    wall_offset_s: float = 0.0
    config: ConfigChange | None = None


@functools.cache
def _engine_adapter() -> TypeAdapter[EngineSample]:
    """A recorded engine's reader, built when a recording is first read (not by a live console)."""
    return TypeAdapter(EngineSample)


def _labels(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(pairs)


def extract_from_json(d: dict[str, Any]) -> Extract:
    doc = _ExtractDoc.model_validate(d)
    return Extract(
        t=doc.t,
        series=doc.series,
        model=doc.model,
        hints=doc.hints,
        problems=doc.problems,
        gauges={k: {_labels(p): v for p, v in rows} for k, rows in doc.gauges.items()},
        counters={k: {_labels(p): tuple(v) for p, v in rows} for k, rows in doc.counters.items()},
        histograms={
            k: {_labels(p): tuple(v) for p, v in rows} for k, rows in doc.histograms.items()
        },
        bounds={k: {_labels(p): tuple(v) for p, v in rows} for k, rows in doc.bounds.items()},
        info={k: _labels(v) for k, v in doc.info.items()},
    )


def sample_to_json(s: Sample) -> dict[str, Any]:
    step: dict[str, Any] = (
        {"wall_offset_s": s.wall_offset_s} if abs(s.wall_offset_s) >= WALL_STEP_S else {}
    )
    if s.config is not None:
        step["config"] = s.config.model_dump(mode="json")
    return {
        "t": s.t,
        **step,
        "source": s.source.model_dump(mode="json"),
        "gpus": [g.model_dump(mode="json", exclude_defaults=True) for g in s.gpus],
        "engines": [
            {
                **{k: v for k, v in e.__dict__.items() if k not in ("extract", "slots")},
                "slots": e.slots.model_dump(exclude_defaults=True) if e.slots else None,
                "extract": extract_to_json(e.extract) if e.extract is not None else None,
            }
            for e in s.engines
        ],
    }


def sample_from_json(d: object) -> Sample:
    """A recorded Sample, checked by pydantic field by field (a pydantic ValidationError, a
    ValueError, for anything else)."""
    doc = _SampleDoc.model_validate(d)
    engines = []
    for e in doc.engines:
        ex = e.get("extract")
        engine = _engine_adapter().validate_python({**e, "extract": None})
        engine.extract = extract_from_json(ex) if ex is not None else None
        engines.append(engine)
    return Sample(
        t=doc.t,
        source=doc.source,
        gpus=doc.gpus,
        engines=engines,
        wall_offset_s=doc.wall_offset_s,
        config=doc.config,
    )
