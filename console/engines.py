"""Engine profiles (config/engines.yaml), kind detection, and extraction of signals from a page."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from console.promtext import Labels, Page, label, without
from console.window import Vector

KINDS = ("vllm", "sglang", "tgi", "triton", "llamacpp")


class SignalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["gauge", "counter", "histogram", "info"]
    series: list[str] = Field(min_length=1)
    aggregate: Literal["sum", "max"] = "sum"


class EngineProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str
    detect: list[str] = Field(min_length=1)
    model_label: str | None = None
    signals: dict[str, SignalSpec]


class ProfileError(ValueError):
    """config/engines.yaml (or a user override) is not valid."""


def _load(text: str, source: str) -> dict[str, EngineProfile]:
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ProfileError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}).") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: expected a mapping of engine kind to profile.")
    out: dict[str, EngineProfile] = {}
    for kind, body in raw.items():
        try:
            out[str(kind)] = EngineProfile.model_validate(body)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise ProfileError(f"{source}: engine {kind!r}, {loc}: {err['msg']}.") from None
    return out


@cache
def profiles() -> dict[str, EngineProfile]:
    text = resources.files("config").joinpath("engines.yaml").read_text(encoding="utf-8")
    return _load(text, "config/engines.yaml")


def detect_kind(page: Page) -> str | None:
    """The profile whose detection series are most present on the page (None if none is)."""
    names = page.samples.keys()
    best, best_hits = None, 0
    for kind, prof in profiles().items():
        hits = sum(1 for n in prof.detect if n in names)
        if hits > best_hits:
            best, best_hits = kind, hits
    return best


@dataclass(slots=True)
class Extract:
    """What one scrape says about one engine, reduced to the profile's signals."""

    t: float
    series: dict[str, str] = field(default_factory=dict)  # signal -> exposed name used
    gauges: dict[str, dict[Labels, float]] = field(default_factory=dict)
    counters: dict[str, dict[Labels, Vector]] = field(default_factory=dict)
    histograms: dict[str, dict[Labels, Vector]] = field(default_factory=dict)
    bounds: dict[str, dict[Labels, tuple[float, ...]]] = field(default_factory=dict)
    info: dict[str, Labels] = field(default_factory=dict)
    model: str | None = None


def _histogram(page: Page, base: str) -> tuple[dict[Labels, Vector], dict[Labels, tuple[float, ...]]] | None:
    buckets = page.get(base + "_bucket")
    if not buckets:
        return None
    groups: dict[Labels, dict[float, float]] = {}
    for labels, value in buckets:
        le = label(labels, "le")
        if le is None:
            continue
        try:
            bound = float(le)
        except ValueError:
            continue
        groups.setdefault(without(labels, "le"), {})[bound] = value
    counts = {lab: v for lab, v in page.get(base + "_count")}
    vectors: dict[Labels, Vector] = {}
    bounds: dict[Labels, tuple[float, ...]] = {}
    for lab, per_le in groups.items():
        les = tuple(sorted(per_le))
        if not les or not math.isinf(les[-1]):
            continue
        count = counts.get(lab, per_le[les[-1]])
        vectors[lab] = tuple(per_le[le] for le in les) + (count,)
        bounds[lab] = les
    return vectors, bounds


def extract(page: Page, profile: EngineProfile, t: float) -> Extract:
    ex = Extract(t=t)
    for signal, spec in profile.signals.items():
        for name in spec.series:
            if spec.type == "histogram":
                got = _histogram(page, name)
                if got is None:
                    continue
                ex.histograms[signal], ex.bounds[signal] = got
            else:
                rows = page.get(name)
                if not rows:
                    continue
                if spec.type == "gauge":
                    ex.gauges[signal] = {lab: v for lab, v in rows}
                elif spec.type == "counter":
                    ex.counters[signal] = {lab: (v,) for lab, v in rows}
                else:
                    ex.info[signal] = rows[0][0]
            ex.series[signal] = name
            break
    if profile.model_label:
        for rows in page.samples.values():
            model = label(rows[0][0], profile.model_label) if rows else None
            if model:
                ex.model = model
                break
    return ex


def gauge_value(values: dict[Labels, float], aggregate: str) -> float | None:
    """Combine a gauge across engines/ranks; NaN samples are ignored."""
    nums = [v for v in values.values() if not math.isnan(v)]
    if not nums:
        return None
    return max(nums) if aggregate == "max" else sum(nums)
