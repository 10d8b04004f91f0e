"""Engine profiles (config/engines.yaml), kind detection, and extraction of signals from a page."""

from __future__ import annotations

import functools
import math
import re
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from console.promtext import Labels, Page, Vector, label, without
from console.records import Record
from console.safetext import printable
from console.yamlfile import ConfigError, load_entries

_SELECTOR = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)(=~|=)"([^"]*)"\s*(?:,|$)')
_WORDS = re.compile(r"^[A-Za-z0-9_.:-]+(?:\|[A-Za-z0-9_.:-]+)*$")
# a label equal to one value, or (``=~"a|b"``) to one of several: literal words only, the PromQL
# regex read as the alternation it is, so the profile and Prometheus select the same series
Matchers = tuple[tuple[str, str | tuple[str, ...]], ...]


@functools.lru_cache(maxsize=1024)
def parse_selector(text: str) -> tuple[str, Matchers]:
    """'name{a="b",c=~"d|e"}' -> ("name", (("a", "b"), ("c", ("d", "e")))) (memoised: profiles
    name the same few each scrape)."""
    m = _SELECTOR.match(text.strip())
    if m is None:
        raise ValueError(f"not a series selector: {text!r}")
    body = m.group(2) or ""
    found = _PAIR.findall(body)
    if body.strip() and (not found or _PAIR.sub("", body).strip()):
        raise ValueError(f"not a series selector: {text!r}")
    pairs: list[tuple[str, str | tuple[str, ...]]] = []
    for k, op, v in found:
        if op == "=~" and not _WORDS.match(v):
            raise ValueError(
                f'not a series selector: {text!r} (=~ takes words joined by |, e.g. "a|b")'
            )
        pairs.append((k, tuple(v.split("|")) if op == "=~" else v))
    return m.group(1), tuple(pairs)


class SignalSpec(Record):
    type: Literal["gauge", "counter", "histogram", "info"]
    series: list[str] = Field(min_length=1)
    # across DP engines / separate schedulers; count: how many series (workers) there are
    aggregate: Literal["sum", "max", "mean", "count"] = "sum"
    # labels whose series are parts of one figure (SGLang's CUDA-graph memory per ``phase``):
    # summed within each rank first, then the ranks combine by ``aggregate``
    sum_by: list[str] = Field(default_factory=list)
    scale: float = 1.0
    # a gauge's domain after ``scale``: never below 0, and at most ``max`` when given (a usage
    # is at most 1); a value outside it, or not finite, is n/a with the engine's value named
    max: float | None = None
    parts: list[str] | None = None
    labels_product: list[str] | None = None
    by: str | None = None  # a figure per value of this label (waiting by reason, tokens by source)
    # gauges built from another signal of the same scrape: each series minus, or divided by, that
    # signal's combined value (Dynamo: running = in flight - waiting; KV use = blocks / total)
    minus: str | None = None
    divide_by: str | None = None
    # each series the larger of it and the same series of another gauge (SGLang: KV use is the
    # fuller of the full-attention and sliding-window pools)
    max_with: str | None = None
    # histogram series among ``series`` observed once per output token, not once per request
    # (vLLM <= 0.10's TPOT): an SLO's attainment over them is a share of tokens
    per_token: list[str] = Field(default_factory=list)
    # a histogram's bucket edges in the current release (in its own unit, before ``scale``):
    # `inferdeck rules --slo` reads a latency SLO at the edge at or below its bound
    le: list[float] = Field(default_factory=list)
    # edges only other releases write: the rules read the highest edge at or below a bound that
    # the engine writes, whichever release it runs
    le_older: list[float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _selectors(self) -> Self:
        for s in self.series + (self.parts or []):
            parse_selector(s)
        return self


class SuccessSpec(Record):
    """Completion-rate recipe: by finish-reason label, total vs aborted, or ok vs failed."""

    finished: str | None = None
    label: str | None = None
    good: list[str] = Field(default_factory=list)
    aborted: str | list[str] | None = None
    failed: str | list[str] | None = None
    total: str | None = None
    ok: str | None = None

    def rules(self) -> list[tuple[str, Callable[[str], tuple[float, float, float]]]]:
        """The one classification of request outcomes: each counter signal, first the one that must
        exist, with a rule from the value of ``label`` to its weight in (good, failed, aborted).
        Aborts are the client's choice: counted apart, never as failures."""
        aborted = as_list(self.aborted)
        if self.finished:

            def by_reason(reason: str) -> tuple[float, float, float]:
                return (
                    (1.0, 0.0, 0.0)
                    if reason in self.good
                    else (0.0, 0.0, 1.0)
                    if reason in aborted
                    else (0.0, 1.0, 0.0)
                )

            return [(self.finished, by_reason)]
        if self.total:  # good = total - aborted
            return [(self.total, lambda _: (1.0, 0.0, 0.0))] + [
                (n, lambda _: (-1.0, 0.0, 1.0)) for n in aborted
            ]
        if self.ok:
            return [(self.ok, lambda _: (1.0, 0.0, 0.0))] + [
                (n, lambda _: (0.0, 1.0, 0.0)) for n in as_list(self.failed)
            ]
        return []


def as_list(v: str | list[str] | None) -> list[str]:
    return [] if v is None else [v] if isinstance(v, str) else list(v)


class DiscoverSpec(Record):
    commands: list[list[str]]
    port_flag: str = "--port"
    default_port: int
    path: str = (
        "/metrics"  # where the Prometheus text is served (trtllm-serve: /prometheus/metrics)
    )


class Knobs(Record):
    """The engine's own names for what findings suggest turning (vLLM's when a profile is silent)."""

    max_seqs: str = "--max-num-seqs"  # sequences scheduled at once
    memory: str = "--gpu-memory-utilization"  # the device share the engine takes (its KV pool)
    max_len: str = "--max-model-len"  # context per sequence
    batched_tokens: str = "--max-num-batched-tokens"  # prefill tokens per step
    prefix: str = "--enable-prefix-caching"
    preemptions: str = "preemptions"  # what the engine calls evicting a running sequence
    mamba: str = "the Mamba state cache size"  # hybrid models: requests' recurrent state slots
    swa: str = "the sliding-window pool's share"  # hybrid models: the sliding-window KV pool


class EngineProfile(Record):
    title: str
    prefixes: list[str] = Field(default_factory=list)  # family-name prefixes only this engine uses
    detect: list[str] = Field(min_length=1)
    model_labels: list[str] = Field(default_factory=list)
    rank_labels: list[str] = Field(default_factory=list)
    # labels whose series repeat one figure (TP/PP ranks, multiprocess pids): taken once (max) before
    # the signal's aggregate combines the rest (DP engines, schedulers)
    replica_labels: list[str] = Field(default_factory=list)
    hints: dict[str, str] = Field(default_factory=dict)
    signals: dict[str, SignalSpec]
    success: SuccessSpec | None = None
    discover: DiscoverSpec | None = None
    # engines that count one request at every step of a pipeline (Triton ensembles): these signals
    # are counted only at the top-level models, told apart by this label
    count_once: list[str] = Field(default_factory=list)
    count_once_label: str | None = None
    role_label: str | None = None  # a rank's role (Dynamo's worker_type: prefill / decode)
    knobs: Knobs = Field(default_factory=Knobs)

    @model_validator(mode="after")
    def _references(self) -> Self:
        for key in ("model_labels", "rank_labels", "replica_labels", "count_once_label"):
            value = getattr(self, key)
            for lab in [value] if isinstance(value, str) else value or []:
                if not _LABEL_NAME.fullmatch(lab):
                    raise ValueError(
                        f"{key}: {lab!r} is not a Prometheus label name (letters, digits and _, "
                        "not starting with a digit)"
                    )
        for name, spec in self.signals.items():
            for ref in (spec.minus, spec.divide_by, spec.max_with):
                if ref is not None and ref not in self.signals:
                    raise ValueError(f"signal {name} refers to {ref!r}, which is not a signal here")
                if ref is not None and (spec.type != "gauge" or self.signals[ref].type != "gauge"):
                    raise ValueError(f"signal {name}: minus/divide_by/max_with combine gauges only")
        return self


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class ProfileError(ConfigError):
    """config/engines.yaml (or a user override) is not valid."""


def _load(text: str, source: str) -> dict[str, EngineProfile]:
    try:
        return load_entries(text, source, EngineProfile, "engine kind to profile")
    except ConfigError as exc:
        raise ProfileError(str(exc)) from None


def per_token_series() -> frozenset[str]:
    """Every profile's histogram series observed once per output token."""
    return frozenset(
        n for p in profiles().values() for sp in p.signals.values() for n in sp.per_token
    )


@cache
def profiles() -> dict[str, EngineProfile]:
    text = resources.files("config").joinpath("engines.yaml").read_text(encoding="utf-8")
    return _load(text, "config/engines.yaml")


def add_profiles(path: Path) -> list[str]:
    """An operator's engines file (same shape as config/engines.yaml): its profiles join the shipped
    ones, a kind of the same name replacing it. Errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the engines file ({exc.strerror}).") from None
    extra = _load(text, str(path))
    profiles().update(extra)
    needed_families.cache_clear()
    _detected.clear()
    return list(extra)


def kinds() -> tuple[str, ...]:
    """The engine kinds: the profiles in config/engines.yaml, in their order."""
    return tuple(profiles())


def metrics_paths() -> list[str]:
    """Every path an engine serves its Prometheus text at: ``/metrics`` first, then those a
    profile declares (trtllm-serve's ``/prometheus/metrics``)."""
    declared = {p.discover.path for p in profiles().values() if p.discover}
    return ["/metrics"] + sorted(declared - {"/metrics"})


@cache
def needed_families() -> frozenset[str]:
    """Every family name a profile reads (parse may skip the rest)."""
    names: set[str] = set()
    for prof in profiles().values():
        names.update(prof.detect)
        names.update(prof.hints)
        for spec in prof.signals.values():
            for s in spec.series + (spec.parts or []):
                base = parse_selector(s)[0]
                names.update(
                    {base, base + "_bucket", base + "_count", base + "_sum", base + "_total"}
                )
    return frozenset(names)


def detect_kind(page: Page) -> str | None:
    """The profile whose detection series are most present on the page (None if none is).

    Named detection series weigh most; families under the engine's own prefix (also those the
    parser skipped) decide excerpts that carry none of them. An engine's pages name the same
    families scrape after scrape: the answer is kept per set of names.
    """
    names = frozenset(page.samples.keys() | page.skipped_names.keys())
    if names not in _detected:
        if len(_detected) > 256:
            _detected.clear()
        _detected[names] = _detect(names)
    return _detected[names]


_detected: dict[frozenset[str], str | None] = {}  # cleared when the profiles change


def _detect(names: frozenset[str]) -> str | None:
    best, best_score = None, 0
    for kind, prof in profiles().items():
        score = 1000 * sum(1 for n in prof.detect if n in names or n + "_bucket" in names)
        score += sum(1 for n in names if n.startswith(tuple(prof.prefixes))) if prof.prefixes else 0
        if score > best_score:
            best, best_score = kind, score
    return best


def version_hints(page: Page, profile: EngineProfile) -> list[str]:
    names = page.samples.keys()
    hits = (
        hint
        for series, hint in profile.hints.items()
        if series in names or series + "_bucket" in names
    )
    return list(dict.fromkeys(hits))  # two series may point to one release: said once


@dataclass(slots=True)
class Extract:
    """What one scrape says about one engine, reduced to the profile's signals."""

    t: float
    series: dict[str, str] = field(default_factory=dict)  # signal -> exposed series used
    gauges: dict[str, dict[Labels, float]] = field(default_factory=dict)
    counters: dict[str, dict[Labels, Vector]] = field(default_factory=dict)
    histograms: dict[str, dict[Labels, Vector]] = field(default_factory=dict)
    bounds: dict[str, dict[Labels, tuple[float, ...]]] = field(default_factory=dict)
    # each histogram's _sum (in the bounds' unit), for the OTLP export's histograms; never recorded
    sums: dict[str, dict[Labels, float]] = field(default_factory=dict, compare=False, repr=False)
    info: dict[str, Labels] = field(default_factory=dict)
    model: str | None = None
    hints: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(
        default_factory=dict
    )  # signal -> why a present series was unusable
    # (kind, signal) whose every series only grew since the previous scrape kept beside it: the
    # same series, the same shapes, no restart (set by EngineHistory; never recorded)
    grew: set[tuple[str, str]] = field(default_factory=set, compare=False, repr=False)
    # this scrape's KV use as a window reads it (``kv_usage``), with the aggregate and replica
    # labels it was combined by: worked out once, not at every poll the scrape stays in a window
    kv_read: tuple[str, tuple[str, ...], float | None] | None = field(
        default=None, compare=False, repr=False
    )
    # whether its capacity waiters waited for KV (``enginestats``), worked out once likewise
    kv_blocked: bool | None = field(default=None, compare=False, repr=False)
    # the reader, then requests running and waiting and KV use as it combines them: the capacity
    # estimate reads each scrape of its window every few seconds, worked out once per reader
    # (``capacity._load``)
    load_read: tuple[Any, float | None, float | None, float | None] | None = field(
        default=None, compare=False, repr=False
    )


_INTERNED: dict[Any, Any] = {}


def _intern(x: Any) -> Any:
    """One shared copy of a label set or bucket bounds: the history holds 15 minutes of scrapes that
    repeat the same keys, and each would otherwise keep its own."""
    if (
        len(_INTERNED) > 50_000
    ):  # label churn (a new pod name per restart) must not grow this forever
        _INTERNED.clear()
    return _INTERNED.setdefault(x, x)


def _select(rows: list[tuple[Labels, float]], selector: Matchers) -> list[tuple[Labels, float]]:
    """The rows the selector matches; a label matched to one value is dropped from them (it
    names the signal), one matched to several stays (its values are the signal's parts)."""
    if not selector:
        return rows
    keys = tuple(k for k, want in selector if isinstance(want, str))
    return [
        (without(lab, *keys), v)
        for lab, v in rows
        if all(
            label(lab, k) == want if isinstance(want, str) else label(lab, k) in want
            for k, want in selector
        )
    ]


class Repeated(ValueError):
    """A page holds one series twice (same name and labels)."""

    def __init__(self, labels: Labels) -> None:
        super().__init__(labels)
        self.labels = labels


def _repeated(rows: list[tuple[Labels, float]]) -> Labels | None:
    """A label set that stands twice among one family's rows, if any."""
    if len(rows) < 2:
        return None
    seen: set[Labels] = set()
    for lab, _ in rows:
        if lab in seen:
            return lab
        seen.add(lab)
    return None


def _show(labels: Labels) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels) or "no labels"


@functools.lru_cache(maxsize=8192)
def _split_le(labels: Labels) -> tuple[Labels, float] | None:
    """A bucket's series labels and its bound (memoised: the same label sets come back every
    scrape), or None without a readable ``le``."""
    le = label(labels, "le")
    if le is None:
        return None
    try:
        return without(labels, "le"), float(le)
    except ValueError:
        return None


def histogram(
    page: Page, selector: str, scale: float = 1.0
) -> tuple[dict[Labels, Vector], dict[Labels, tuple[float, ...]]] | None:
    """Per-series cumulative bucket vectors (+ count last) and their bounds, or None if absent."""
    base, sel = parse_selector(selector)
    buckets = _select(page.get(base + "_bucket"), sel)
    if not buckets:
        return None
    groups: dict[Labels, dict[float, float]] = {}
    for labels, value in buckets:
        split = _split_le(labels)
        if split is None:
            continue
        series = groups.get(split[0])
        if series is None:
            series = groups[split[0]] = {}
        bound = split[1] * scale
        if bound in series:
            raise Repeated(labels)
        series[bound] = value
    counts = dict(_select(page.get(base + "_count"), sel))
    vectors: dict[Labels, Vector] = {}
    bounds: dict[Labels, tuple[float, ...]] = {}
    for lab, per_le in groups.items():
        les = tuple(sorted(per_le))
        if not les or not math.isinf(les[-1]):
            continue
        count = counts.get(lab, per_le[les[-1]])
        lab = _intern(lab)
        vectors[lab] = array("d", [per_le[le] for le in les] + [count])  # 8 bytes a value, not 32
        bounds[lab] = _intern(les)
    return (vectors, bounds) if vectors else None


def extract(page: Page, profile: EngineProfile, t: float) -> Extract:
    ex = Extract(t=t)
    for signal, spec in profile.signals.items():
        candidates = spec.series
        for cand in candidates:
            if spec.type == "histogram":
                if spec.parts:
                    try:
                        got_parts = [histogram(page, p, spec.scale) for p in spec.parts]
                    except Repeated as exc:
                        ex.problems[signal] = (
                            f"{' + '.join(spec.parts)}: a bucket stands twice with the same "
                            f"labels ({_show(exc.labels)}): n/a until the engine's page is fixed"
                        )
                        break
                    if any(g is None for g in got_parts):
                        continue
                    for i, g in enumerate(got_parts):
                        assert g is not None
                        ex.histograms[f"{signal}#{i}"], ex.bounds[f"{signal}#{i}"] = g
                    ex.series[signal] = " + ".join(spec.parts)
                    break
                try:
                    got = histogram(page, cand, spec.scale)
                except Repeated as exc:
                    ex.problems[signal] = (
                        f"{cand} has a bucket twice with the same labels ({_show(exc.labels)}) "
                        "on the page: n/a until the engine's page is fixed"
                    )
                    break
                if got is None:
                    if page.get(parse_selector(cand)[0] + "_bucket"):
                        ex.problems[signal] = f"{cand} has no +Inf bucket (truncated page?)"
                    continue
                ex.histograms[signal], ex.bounds[signal] = got
                base, matchers = parse_selector(cand)
                sums = _select(page.get(base + "_sum"), matchers)
                ex.sums[signal] = {lab: v * spec.scale for lab, v in sums}
            else:
                base, sel = parse_selector(cand)
                rows = _select(page.get(base), sel)
                if not rows:
                    continue
                twice = _repeated(rows)
                if twice is not None:  # Prometheus rejects such a scrape: which one is true?
                    ex.problems[signal] = (
                        f"{cand} appears twice with the same labels ({_show(twice)}) on the "
                        "page: n/a until the engine's page is fixed"
                    )
                    break
                if spec.type == "gauge":
                    kept = {}
                    for lab, v in rows:
                        # a gauge built from another is checked against ``max`` once built
                        most = None if spec.divide_by or spec.minus else spec.max
                        why = out_of_domain(v * spec.scale, most)
                        if why is None:
                            kept[_intern(lab)] = v * spec.scale
                        else:
                            ex.problems[signal] = f"{cand} reads {v:g}: {why}"
                    if not kept:
                        break
                    ex.gauges[signal] = kept
                elif spec.type == "counter":
                    # a one-value tuple: the size of a one-value array, and once the collector
                    # has seen it neither it nor the dict holding it is walked again (a 15-minute
                    # history of arrays was half of what every full collection walked)
                    ex.counters[signal] = {_intern(lab): (v * spec.scale,) for lab, v in rows}
                else:
                    ex.info[signal] = rows[0][0]
            ex.series[signal] = cand
            break
    _combine(ex, profile)
    ex.model = _model(page, profile.model_labels)
    ex.hints = version_hints(page, profile)
    return ex


def out_of_domain(value: float, most: float | None = None) -> str | None:
    """Why a gauge's value cannot be what it says (None: it can). NaN is left to the figures,
    which say 'engine reported NaN'."""
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "not a finite number"
    if value < 0:
        return "below zero, which this figure cannot be"
    if most is not None and value > most * (1 + 1e-6):
        return f"above {most:g}, which this figure cannot exceed"
    return None


def _combine(ex: Extract, profile: EngineProfile) -> None:
    """Gauges stated as another gauge minus or divided by a third signal's combined value, or as
    the larger of two gauges series by series."""
    for signal, spec in profile.signals.items():
        if spec.max_with and signal in ex.gauges and spec.max_with in ex.gauges:
            other_rows = ex.gauges[spec.max_with]
            ex.gauges[signal] = {
                lab: max(v, other_rows.get(lab, v)) for lab, v in ex.gauges[signal].items()
            }
            ex.series[signal] += f" (or {ex.series[spec.max_with]} when fuller)"
        ref = spec.minus or spec.divide_by
        values = ex.gauges.get(signal)
        if ref is None or values is None:
            continue
        other_values = ex.gauges.get(ref)
        other = (
            gauge_value(
                other_values,
                profile.signals[ref].aggregate,
                profile.replica_labels,
                profile.signals[ref].sum_by,
            )
            if other_values
            else None
        )
        if other is None or (spec.divide_by and other <= 0):
            del ex.gauges[signal]
            ex.problems[signal] = f"{ex.series.pop(signal)} needs {ref}, which this page lacks"
            continue
        combined = {lab: (v - other if spec.minus else v / other) for lab, v in values.items()}
        low = min(combined.values())
        if spec.minus and low < 0:  # two gauges read at different instants crossed
            del ex.gauges[signal]
            ex.problems[signal] = (
                f"{ex.series.pop(signal)} ({low + other:g}) is below {ref} ({other:g}): the two "
                "were read at different instants; n/a until they agree"
            )
            continue
        built = f"{ex.series[signal]} {'-' if spec.minus else '/'} {ex.series.get(ref, ref)}"
        bad = next((v for v in combined.values() if out_of_domain(v, spec.max)), None)
        if bad is not None:
            del ex.gauges[signal]
            del ex.series[signal]
            ex.problems[signal] = f"{built} reads {bad:g}: {out_of_domain(bad, spec.max)}"
            continue
        ex.gauges[signal] = combined
        ex.series[signal] = built


def _model(page: Page, model_labels: list[str]) -> str | None:
    for name in model_labels:
        for rows in page.samples.values():
            model = label(rows[0][0], name) if rows else None
            if model:
                return model
        for raw in page.skipped_names.values():  # excerpts whose kept families carry no labels
            m = re.search(rf'(?:^|[,{{\s]){re.escape(name)}="([^"]*)"', raw)
            if m and m.group(1):
                return printable(m.group(1))
    return None


def kv_usage(ex: Extract, aggregate: str, replica_labels: Sequence[str]) -> float | None:
    """The scrape's KV use combined across ranks (``gauge_value``), kept on the scrape for the
    polls that read it again while it stays in the window."""
    how = tuple(replica_labels)
    kept = ex.kv_read
    if kept is not None and kept[0] == aggregate and kept[1] == how:
        return kept[2]
    values = ex.gauges.get("kv_cache_usage")
    value = gauge_value(values, aggregate, how) if values else None
    ex.kv_read = (aggregate, how, value)
    return value


def gauge_value(
    values: dict[Labels, float],
    aggregate: str,
    replica_labels: list[str] | tuple[str, ...] = (),
    sum_labels: list[str] | tuple[str, ...] = (),
) -> float | None:
    """Combine a gauge across DP engines and ranks; NaN samples are ignored.

    Series that differ only in ``replica_labels`` (TP/PP ranks, pids) repeat one figure and count
    once (their max); series that differ only in ``sum_labels`` are parts of one figure and add
    up; what remains (DP engines, schedulers) combines by ``aggregate``.
    """
    groups: dict[Labels, float] = {}
    for lab, v in values.items():
        if math.isnan(v):
            continue
        key = without(lab, *replica_labels) if replica_labels else lab
        groups[key] = max(groups[key], v) if key in groups else v
    if sum_labels:
        parts: dict[Labels, float] = {}
        for lab, v in groups.items():
            key = without(lab, *sum_labels)
            parts[key] = parts.get(key, 0.0) + v
        groups = parts
    if not groups:
        return None
    if aggregate == "max":
        return max(groups.values())
    if aggregate == "mean":
        return sum(groups.values()) / len(groups)
    if aggregate == "count":
        return float(len(groups))
    return sum(groups.values())


def gauge_by(
    values: dict[Labels, float], by: str, replica_labels: list[str] | tuple[str, ...] = ()
) -> dict[str, float]:
    """A gauge summed per value of one label (replicas counted once), in the values' sorted
    order: the same bytes whatever the hash seed."""
    out: dict[str, float] = {}
    for key in sorted({label(lab, by) or "" for lab in values}):
        part = {lab: v for lab, v in values.items() if (label(lab, by) or "") == key}
        v = gauge_value(part, "sum", replica_labels)
        if v is not None:
            out[key] = v
    return out


def rank_key(labels: Labels, rank_labels: list[str]) -> str:
    parts = [f"{k}={v}" for k, v in labels if k in rank_labels]
    return ",".join(parts) or "all"


__all__ = [
    "ConfigError",
    "EngineProfile",
    "Extract",
    "kinds",
    "ProfileError",
    "detect_kind",
    "extract",
    "gauge_by",
    "gauge_value",
    "histogram",
    "needed_families",
    "parse_selector",
    "profiles",
    "rank_key",
]
