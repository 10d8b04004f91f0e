"""What one poll acquired, before any derivation: the NVML reading and each engine's scrape
reduced to its profile's signals. Live polls derive Frames from Samples; recordings store
Samples, so replay derives the same Frames (windows, alerts) through the same code."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from console.engines import Extract
from console.frame import Gpu, GpuSource


@dataclass
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
    slots: dict[str, Any] | None = None  # llama.cpp /slots: fields, unavailable, series
    top_models: list[str] | None = None  # Triton: models no ensemble calls (API or config)


@dataclass
class Sample:
    t: float
    source: GpuSource
    gpus: list[Gpu] = field(default_factory=list)
    engines: list[EngineSample] = field(default_factory=list)


def _pairs(values: dict[Any, Any]) -> list[Any]:
    return [
        [[list(p) for p in labels], list(vec) if isinstance(vec, (tuple, array)) else vec]
        for labels, vec in values.items()
    ]


def _unpairs(rows: list[Any], tuples: bool) -> dict[Any, Any]:
    return {
        tuple(tuple(p) for p in labels): (tuple(vec) if tuples else vec) for labels, vec in rows
    }


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


def extract_from_json(d: dict[str, Any]) -> Extract:
    return Extract(
        t=d["t"],
        series=d["series"],
        model=d.get("model"),
        hints=d.get("hints", []),
        problems=d.get("problems", {}),
        gauges={k: _unpairs(v, False) for k, v in d["gauges"].items()},
        counters={k: _unpairs(v, True) for k, v in d["counters"].items()},
        histograms={k: _unpairs(v, True) for k, v in d["histograms"].items()},
        bounds={k: _unpairs(v, True) for k, v in d["bounds"].items()},
        info={k: tuple(tuple(p) for p in v) for k, v in d["info"].items()},
    )


def sample_to_json(s: Sample) -> dict[str, Any]:
    return {
        "t": s.t,
        "source": s.source.model_dump(mode="json"),
        "gpus": [g.model_dump(mode="json", exclude_defaults=True) for g in s.gpus],
        "engines": [
            {
                **{k: v for k, v in e.__dict__.items() if k != "extract"},
                "extract": extract_to_json(e.extract) if e.extract is not None else None,
            }
            for e in s.engines
        ],
    }


def sample_from_json(d: dict[str, Any]) -> Sample:
    engines = []
    for e in d["engines"]:
        ex = e.get("extract")
        engines.append(
            EngineSample(**{**e, "extract": extract_from_json(ex) if ex is not None else None})
        )
    return Sample(
        t=d["t"],
        source=GpuSource.model_validate(d["source"]),
        gpus=[Gpu.model_validate(g) for g in d["gpus"]],
        engines=engines,
    )
