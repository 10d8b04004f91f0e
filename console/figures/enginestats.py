"""Derived engine figures from a history of scrapes: gauges, windowed rates, percentiles,
completion rate, prefix-cache hit rate. Pure functions of (history, profile, window)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from console.engines import EngineProfile, Extract, gauge_by, gauge_value, kv_usage, rank_key
from console.figures.thresholds import at_least
from console.figures.window import (
    Delta,
    bucket_of,
    histogram_quantiles,
    rate,
    wide,
    window_delta,
)
from console.figures.windowed import (
    Windowed,
    covered,
    covered_from,
    kept_delta,
    partial,
    restart_times,
    signal_delta,
    summed_buckets,
    window_label,
    window_points,
)
from console.frame import (
    EngineMemory,
    EngineRank,
    KvOffload,
    LoraState,
    Percentiles,
    RequestTokens,
    SpecDecode,
)
from console.promtext import label

QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
KV_FULL = 0.9  # a KV cache this full is full (findings; the plan's kv_usage_critical for alerts)
FEW_OBSERVATIONS = 20
# a rank's gauges shown in the rank view (each signal of that name, per rank)
RANK_FIELDS = tuple(f for f in EngineRank.model_fields if f not in ("key", "role"))
# DP imbalance: the busiest rank holds at least IMBALANCE_MIN_WAITING more waiting requests than
# the least busy and IMBALANCE_RATIO times the mean; or its KV use is IMBALANCE_KV_SPREAD above the
# least used rank's while at least half full
IMBALANCE_MIN_WAITING = 4.0
IMBALANCE_RATIO = 1.5
IMBALANCE_KV_SPREAD = 0.3
HISTOGRAM_FIELDS = (
    ("ttft_s", "ttft"),
    ("tpot_s", "tpot"),
    ("itl_s", "itl"),
    ("e2e_s", "e2e"),
    ("queue_time_s", "queue_time"),
)


def _top_bound(buckets: list[tuple[float, float]]) -> float | None:
    """The upper bound of the highest bucket holding an observation (cumulative counts): no
    observation was larger. None when one lies in +Inf (or there is none)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    for le, count in buckets:
        if count >= total:
            return None if math.isinf(le) else le
    return None


def percentiles(
    buckets: list[tuple[float, float]],
    window: str,
    approx: bool = False,
    covered_s: float | None = None,
) -> Percentiles:
    values: dict[str, Any] = {}  # the quantile fields, p50 … p99 (checked by Percentiles)
    lower: list[str] = []
    spread: dict[str, tuple[float, float]] = {}
    marked: list[str] = []
    ordered = sorted(buckets)
    for (name, _), (value, ge) in zip(
        QUANTILES, histogram_quantiles([q for _, q in QUANTILES], buckets), strict=True
    ):
        values[name] = value
        if ge:
            lower.append(name)
        elif value is not None:
            bucket = bucket_of(value, ordered)
            if bucket is not None:
                spread[name] = bucket
                if wide(bucket, value):
                    marked.append(name)
    observations = buckets[-1][1] if buckets else 0.0
    return Percentiles(
        window=window,
        observations=observations,
        lower_bound_only=lower,
        approx=approx,
        buckets=spread,
        wide=marked,
        covered_s=covered_s,
        **values,
    )


@dataclass
class Derived:
    # Engine's fields named by the profile's signals: checked by Engine when it is built
    fields: dict[str, Any] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    reset_at: float | None = None

    def note_reset(self, delta: Delta) -> None:
        if delta.reset_at is not None:
            self.reset_at = max(self.reset_at or 0.0, delta.reset_at)


class _Deriver:
    def __init__(self, history: Sequence[Extract], profile: EngineProfile, window_s: float) -> None:
        self.h, self.p, self.w = history, profile, window_s
        self.newest = history[-1]
        self.restarts = restart_times(history)
        self.out = Derived()
        self.win = Windowed([history], window_s, on_delta=self.out.note_reset)

    def missing(self, signal: str) -> str:
        if signal in self.newest.problems:
            return self.newest.problems[signal]
        spec = self.p.signals.get(signal)
        if spec is None:
            return f"{self.p.title} does not export this"
        return f"not exposed by this engine (looked for {', '.join(spec.series)})"

    def gauge(self, fld: str, signal: str) -> float | None:
        values = self.newest.gauges.get(signal)
        if values is None:
            self.out.unavailable[fld] = self.missing(signal)
            return None
        spec = self.p.signals[signal]
        value = gauge_value(values, spec.aggregate, self.p.replica_labels, spec.sum_by)
        if value is None:
            self.out.unavailable[fld] = "engine reported NaN"
        self.out.fields[fld] = value
        return value

    def increase(
        self, signal: str, by: str | None = None
    ) -> tuple[dict[str, float] | None, Delta | None]:
        """Window increase of a counter, summed (key "") or per value of label ``by``."""
        sums, deltas = self.win.increase(signal, by)
        return sums, (deltas[0] if deltas else None)

    def rate_of(self, signal: str) -> float | None:
        """A counter's rate over the window (None without two scrapes of it)."""
        return self.win.rate(signal)

    def rate(self, fld: str, signal: str) -> None:
        delta = signal_delta(self.h, "counters", signal, self.w, self.restarts)
        if delta is not None:
            self.out.note_reset(delta)
        value = rate(delta) if delta is not None and not delta.since_start else None
        if delta is None:
            self.out.unavailable[fld] = self.missing(signal)
        elif value is None:
            self.out.unavailable[fld] = "a rate needs two scrapes"
        else:
            self.out.fields[fld] = value

    def quantiles(self, fld: str, signal: str) -> None:
        spec = self.p.signals.get(signal)
        if spec is not None and spec.parts and f"{signal}#0" in self.newest.histograms:
            parts = [self._window_buckets(f"{signal}#{i}") for i in range(len(spec.parts))]
            labelled = [percentiles(b, w, covered_s=c) for b, w, c in parts]
            sums: dict[str, Any] = {
                name: (
                    None
                    if any(getattr(p, name) is None for p in labelled)
                    else sum(getattr(p, name) for p in labelled)
                )
                for name, _ in QUANTILES
            }
            if all(v is None for v in sums.values()):
                window = parts[0][1]
                self.out.unavailable[fld] = (
                    "no observations since the engine started"
                    if window == "since_start"
                    else f"no observations in the last {window_label(self.w)}"
                )
                return
            self.out.fields[fld] = Percentiles(
                window=parts[0][1],
                observations=labelled[0].observations,
                approx=True,
                covered_s=parts[0][2],
                lower_bound_only=sorted({n for p in labelled for n in p.lower_bound_only}),
                note="approx.: " + " + ".join(spec.parts) + " quantiles",
                **sums,
            )
            return
        if signal not in self.newest.histograms:
            self.out.unavailable[fld] = self.missing(signal)
            return
        buckets, window, covered_s = self._window_buckets(signal)
        pct = percentiles(buckets, window, covered_s=covered_s)
        self.out.fields[fld] = pct
        if pct.observations <= 0:
            self.out.unavailable[fld] = f"no observations in the last {window_label(self.w)}"

    def _window_buckets(self, signal: str) -> tuple[list[tuple[float, float]], str, float | None]:
        """The window's summed bucket increases, its label, and the seconds it covers when the
        console has not watched a whole window yet (None: the whole window)."""
        points, grew, n = window_points(self.h, "histograms", signal, self.w)
        delta = kept_delta(points, grew, self.w, self.restarts, n, covered_from(self.h))
        assert delta is not None
        self.out.note_reset(delta)
        bounds = self.newest.bounds.get(signal, {})
        buckets = summed_buckets(delta, bounds)
        since_start = delta.since_start
        if (
            not since_start
            and (not buckets or buckets[-1][1] <= 0)
            and delta.span_s < self.w
            and delta.reset_at is None
        ):
            # watched for less than one window and nothing finished yet: the engine's own
            # since-start buckets say more than nothing, and are labelled as such
            since_start = True
            last = window_delta(points[-1:], self.w)
            assert last is not None
            buckets = summed_buckets(last, bounds)
        if since_start:
            return buckets, "since_start", None
        part = delta.covered_s if partial(delta.covered_s, self.w) else None
        return buckets, window_label(self.w), part

    def success(self) -> None:
        spec = self.p.success
        f, na = self.out.fields, self.out.unavailable
        if spec is None:
            na["success_rate"] = f"{self.p.title} exports no request outcomes"
            return
        # requests finished per second: rate() of each counter that counts every finished
        # request once (its outcomes' weights sum to 1; SGLang's aborted counter, 0, is a part)
        per_s: float | None = 0.0
        for signal, weigh in spec.rules():
            if abs(sum(weigh("")) - 1.0) < 1e-9:
                r = self.rate_of(signal) if signal in self.newest.counters else None
                per_s = None if per_s is None or r is None else per_s + r
        if per_s is not None and spec.rules()[0][0] in self.newest.counters:
            f["requests_per_s"] = per_s
        done = self.win.outcomes(self.p)
        if done is None:
            na["success_rate"] = self.missing(spec.rules()[0][0])
            return
        good, bad, aborted = done.good, done.failed, done.aborted
        f["requests_finished"] = good + bad + aborted
        f["requests_aborted"] = aborted
        f["requests_failed"] = bad
        if done.reasons:
            f["finish_reasons"] = done.reasons
        completed = good + bad  # aborts are the client's choice: shown, not counted against
        if completed > 0:
            f["success_rate"] = good / completed
        else:
            na["success_rate"] = f"no requests finished in the last {window_label(self.w)}"

    def prefix_cache(self) -> None:
        hits, _ = self.increase("prefix_cache_hits")
        queries, _ = self.increase("prefix_cache_queries")
        if hits is not None and queries is not None:
            q = sum(queries.values())
            if q > 0:
                self.out.fields["prefix_cache_hit_rate"] = sum(hits.values()) / q
            else:
                self.out.unavailable["prefix_cache_hit_rate"] = (
                    "no prefix-cache queries in the window"
                )
        elif "prefix_cache_hit_rate" in self.newest.gauges:
            self.gauge("prefix_cache_hit_rate", "prefix_cache_hit_rate")
        else:
            self.out.unavailable["prefix_cache_hit_rate"] = self.missing("prefix_cache_hits")

    def prefill(self) -> None:
        """The prompt tokens the engine computed per second: its prompt counter also counts the
        tokens the prefix cache served, work that was never done."""
        if "prompt_tokens" not in self.newest.counters:
            return
        if "prefill_tokens" in self.newest.counters:
            self.rate("prefill_tokens_per_s", "prefill_tokens")
        elif "prompt_tokens_cached" in self.newest.counters:
            prompt, cached = self.rate_of("prompt_tokens"), self.rate_of("prompt_tokens_cached")
            if prompt is None or cached is None:
                self.out.unavailable["prefill_tokens_per_s"] = "a rate needs two scrapes"
            else:
                self.out.fields["prefill_tokens_per_s"] = max(0.0, prompt - cached)
        else:
            self.out.unavailable["prefill_tokens_per_s"] = (
                f"{self.p.title} does not say which prompt tokens it computed (prompt tok/s "
                "counts prefix-cache hits too)"
            )

    def kv_pools(self) -> None:
        """A hybrid model's KV memory pools, each apart, and the fullest (the one that stops
        admission). Engines write the pools a model lacks at 0: shown once one of them is used."""
        pools = {
            sig.removeprefix("kv_pool_"): v
            for sig in self.p.signals
            if sig.startswith("kv_pool_") and (v := self.optional_gauge(sig)) is not None
        }
        if not any(v > 0 for name, v in pools.items() if name != "full"):
            return
        self.out.fields["kv_pools"] = pools
        if "full" in pools:
            self.out.fields["kv_binding_pool"] = max(pools, key=lambda name: pools[name])
        else:
            self.out.unavailable["kv_binding_pool"] = (
                "no full-attention pool figure on this page: KV % is "
                f"{self.newest.series.get('kv_cache_usage', 'the engine figure')}, the fullest of "
                "its pools"
            )

    def offload(self) -> None:
        """KV moved to and from the offload tier: bytes in the window, their rate, and the speed
        of the transfers themselves (bytes over the time spent moving them)."""
        store, store_d = self.increase("offload_store_bytes")
        load, load_d = self.increase("offload_load_bytes")
        if store is None and load is None:
            return
        store_t, _ = self.increase("offload_store_time")
        load_t, _ = self.increase("offload_load_time")

        def total(values: dict[str, float] | None) -> float | None:
            return sum(values.values()) if values is not None else None

        def speed(moved: float | None, took: float | None) -> float | None:
            return moved / took if moved is not None and took else None

        since = any(d is not None and d.since_start for d in (store_d, load_d))
        self.out.fields["kv_offload"] = KvOffload(
            store_bytes=total(store),
            load_bytes=total(load),
            store_bytes_per_s=self.rate_of("offload_store_bytes"),
            load_bytes_per_s=self.rate_of("offload_load_bytes"),
            store_transfer_bytes_per_s=speed(total(store), total(store_t)),
            load_transfer_bytes_per_s=speed(total(load), total(load_t)),
            window="since_start" if since else window_label(self.w),
        )

    def lmcache(self) -> None:
        """LMCache's hit rate from its token counters over the window (its hit-rate gauge holds
        the last interval with retrievals, however long ago)."""
        requested, _ = self.increase("lmcache_requested_tokens")
        hit, _ = self.increase("lmcache_hit_tokens")
        if requested is None or hit is None:
            return
        if sum(requested.values()) > 0:
            self.out.fields["lmcache_hit_rate"] = sum(hit.values()) / sum(requested.values())
        else:
            self.out.unavailable["lmcache_hit_rate"] = (
                f"no LMCache retrievals in the last {window_label(self.w)}"
            )

    def spec_positions(self, drafts: float) -> list[float | None] | None:
        """Accepted / offered per draft position: offered from the engine's per-position drafted
        counter, else once per draft (each draft offers every position)."""
        spec = self.p.signals.get("spec_accepted_by_position")
        accepted = self.increase("spec_accepted_by_position", by=spec.by)[0] if spec else None
        if not accepted:
            return None
        dspec = self.p.signals.get("spec_drafted_by_position")
        offered = self.increase("spec_drafted_by_position", by=dspec.by)[0] if dspec else None
        out: list[float | None] = []
        for pos in sorted(accepted, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0)):
            n = offered.get(pos) if offered is not None else drafts
            out.append(accepted[pos] / n if n else None)
        return out

    def kv_window(self) -> None:
        """The KV use over the window's scrapes, not one instant: its peak and the share of
        scrapes at or above KV_FULL (bursts of 1-8 s above 90 % fall between two looks)."""
        spec = self.p.signals.get("kv_cache_usage")
        if spec is None or "kv_cache_usage" not in self.newest.gauges:
            return
        start = self.newest.t - self.w
        seen: list[float] = []
        blocked = 0
        for ex in reversed(self.h):
            if ex.t <= start and seen:
                break
            v = kv_usage(ex, spec.aggregate, self.p.replica_labels)
            if v is not None:
                seen.append(v)
                blocked += self.kv_blocked(ex, v)
        if seen:
            self.out.fields["kv_cache_usage_peak"] = max(seen)
            self.out.fields["kv_full_share"] = sum(at_least(v, KV_FULL) for v in seen) / len(seen)
            self.out.fields["kv_blocked_share"] = blocked / len(seen)

    def scrape_gauge(self, ex: Extract, signal: str) -> float | None:
        """One scrape's gauge, combined as the profile says (None when absent or NaN)."""
        values = ex.gauges.get(signal)
        spec = self.p.signals.get(signal)
        if not values or spec is None:
            return None
        return gauge_value(values, spec.aggregate, self.p.replica_labels, spec.sum_by)

    def waiting_for_capacity(self, ex: Extract) -> float | None:
        """Requests the scrape shows waiting for the engine's capacity: vLLM's
        ``waiting_by_reason{reason="capacity"}`` (KV blocks or the batch limit; 'deferred' is
        LoRA or KV transfer), else every waiting request."""
        by = ex.gauges.get("waiting_by_reason")
        spec = self.p.signals.get("waiting_by_reason")
        if by and spec is not None and spec.by is not None:
            reasons = gauge_by(by, spec.by, self.p.replica_labels)
            if "capacity" in reasons:
                return reasons["capacity"]
        return self.scrape_gauge(ex, "requests_waiting")

    def kv_blocked(self, ex: Extract, usage: float) -> bool:
        """Requests wait for capacity while the KV cache could not hold another sequence the
        size of those running (or is full): they wait for KV, not for a batch slot. Kept on the
        scrape for the polls that read it again while it stays in the window."""
        if ex.kv_blocked is None:
            waiting = self.waiting_for_capacity(ex) or 0.0
            running = max(1.0, self.scrape_gauge(ex, "requests_running") or 0.0)
            ex.kv_blocked = waiting > 0 and (
                at_least(usage, KV_FULL) or usage + usage / running > 1.0
            )
        return ex.kv_blocked

    def kv_waiting(self) -> None:
        """Requests waiting for the KV cache now: the newest scrape's capacity waiters, when the
        window shows the cache binds (a scrape whose waiters the cache could not take, a
        preemption, or a peak at KV_FULL); 0 when they wait for something else. Judged over the
        window, so a KV gauge that swings as one long request comes and goes does not flap it."""
        waiting = self.waiting_for_capacity(self.newest)
        peak = self.out.fields.get("kv_cache_usage_peak")
        if waiting is None or peak is None:
            return
        preempted = (
            not self.out.fields.get("preemptions_since_start")
            and (self.out.fields.get("preemptions") or 0.0) > 0
        )
        blocked = (self.out.fields.get("kv_blocked_share") or 0.0) > 0
        binds = preempted or blocked or at_least(peak, KV_FULL)
        self.out.fields["requests_waiting_kv"] = waiting if binds else 0.0

    def kv(self) -> None:
        usage = self.newest.gauges.get("kv_cache_usage")
        self.gauge("kv_cache_usage", "kv_cache_usage")
        self.kv_window()
        if usage and len(usage) > 1:
            self.out.fields["kv_cache_usage_by_rank"] = {
                rank_key(lab, self.p.rank_labels): v
                for lab, v in usage.items()
                if not math.isnan(v)
            }
        spec = self.p.signals.get("kv_capacity_tokens")
        info = self.newest.info.get("kv_capacity_tokens")
        if spec is not None and spec.labels_product and info is not None:
            try:
                value = 1.0
                for name in spec.labels_product:
                    value *= float(label(info, name) or "nan")
                if math.isfinite(value):
                    self.out.fields["kv_capacity_tokens"] = value
                    return
            except ValueError:
                pass
            self.out.unavailable["kv_capacity_tokens"] = (
                f"{'/'.join(spec.labels_product)} not numeric"
            )
        elif "kv_blocks_max" in self.newest.gauges:
            # blocks x tokens per block, times the pools when the figure is one worker's (Dynamo)
            blocks = self.optional_gauge("kv_blocks_max")
            per = self.optional_gauge("kv_tokens_per_block")
            pools = self.optional_gauge("kv_pools") if "kv_pools" in self.p.signals else 1.0
            if blocks is not None and per is not None and pools:
                self.out.fields["kv_capacity_tokens"] = blocks * per * pools
            else:
                self.out.unavailable["kv_capacity_tokens"] = (
                    "KV blocks are exported without tokens per block"
                    if per is None
                    else "no worker holds a KV pool"
                )
        elif spec is not None and spec.type == "gauge":
            self.gauge("kv_capacity_tokens", "kv_capacity_tokens")
        else:
            self.out.unavailable["kv_capacity_tokens"] = self.missing("kv_capacity_tokens")

    def by_label(self, fld: str, signal: str) -> None:
        """A figure per value of the signal's ``by`` label: a gauge's value now, a counter's
        increase over the window. Absent (not n/a) when the engine does not run that feature."""
        spec = self.p.signals.get(signal)
        if spec is None or spec.by is None:
            return
        if spec.type == "gauge":
            values = self.newest.gauges.get(signal)
            if values is not None:
                self.out.fields[fld] = gauge_by(values, spec.by, self.p.replica_labels)
        else:
            sums, _ = self.increase(signal, by=spec.by)
            if sums is not None:
                self.out.fields[fld] = sums

    def optional_gauge(self, signal: str) -> float | None:
        values = self.newest.gauges.get(signal)
        spec = self.p.signals.get(signal)
        if values is None or spec is None:
            return None
        return gauge_value(values, spec.aggregate, self.p.replica_labels, spec.sum_by)

    def request_tokens(self) -> None:
        """Prompt and output tokens per request over the window (the engine's histograms)."""
        if "prompt_len" not in self.newest.histograms or "output_len" not in self.newest.histograms:
            self.out.unavailable["request_tokens"] = self.missing(
                "prompt_len" if "prompt_len" not in self.newest.histograms else "output_len"
            )
            return
        prompt, window, _ = self._window_buckets("prompt_len")
        output, _, _ = self._window_buckets("output_len")
        p, o = percentiles(prompt, window), percentiles(output, window)
        if p.observations <= 0:
            self.out.unavailable["request_tokens"] = (
                f"no requests finished in the last {window_label(self.w)}"
            )
            return
        tops = [_top_bound(prompt), _top_bound(output)]
        self.out.fields["request_tokens"] = RequestTokens(
            prompt_p50=p.p50,
            prompt_p99=None if "p99" in p.lower_bound_only else p.p99,
            output_p50=o.p50,
            output_p99=None if "p99" in o.lower_bound_only else o.p99,
            most=None if None in tops else sum(t for t in tops if t is not None),
            requests=p.observations,
            window=window,
        )

    def speculative(self) -> None:
        accepted, delta = self.increase("spec_accepted_tokens")
        drafted, _ = self.increase("spec_draft_tokens")
        drafts, _ = self.increase("spec_drafts")
        length = self.optional_gauge("spec_accepted_length")
        if accepted is not None and drafted is not None and delta is not None:
            a, t = sum(accepted.values()), sum(drafted.values())
            n = sum(drafts.values()) if drafts is not None else 0.0
            self.out.fields["speculative"] = SpecDecode(
                acceptance_rate=a / t if t > 0 else None,
                mean_accepted_length=1.0 + a / n if n > 0 else length,
                draft_tokens=t,
                accepted_tokens=a,
                window="since_start" if delta.since_start else window_label(self.w),
                by_position=self.spec_positions(n) if t > 0 else None,
            )
            if t <= 0:
                self.out.unavailable["speculative"] = (
                    f"no draft tokens in the last {window_label(self.w)}"
                )
            return
        rate = self.optional_gauge("spec_acceptance_rate")
        if rate is not None or length is not None:
            self.out.fields["speculative"] = SpecDecode(
                acceptance_rate=rate, mean_accepted_length=length
            )

    def per_request_preemptions(self) -> None:
        total, _ = self.increase("preemptions_sum")
        count, _ = self.increase("preemptions_count")
        if total is not None and count is not None and sum(count.values()) > 0:
            self.out.fields["preemptions_per_request"] = sum(total.values()) / sum(count.values())

    def mfu(self) -> None:
        if "flops_per_gpu" in self.newest.counters:
            delta = signal_delta(self.h, "counters", "flops_per_gpu", self.w, self.restarts)
            value = rate(delta) if delta is not None and not delta.since_start else None
            if value is not None:
                self.out.fields["flops_per_gpu_per_s"] = value

    def lora(self) -> None:
        """vLLM's lora_requests_info: a gauge whose value is the time of its last update, one row
        per label set ever written; the newest row holds the adapters now."""
        rows = self.newest.gauges.get("lora")
        if not rows:
            return
        labels, _ = max(rows.items(), key=lambda kv: kv[1])

        def names(key: str) -> list[str]:
            return [n for n in (label(labels, key) or "").split(",") if n]

        max_lora = label(labels, "max_lora")
        self.out.fields["lora"] = LoraState(
            running=names("running_lora_adapters"),
            waiting=names("waiting_lora_adapters"),
            max_lora=int(max_lora) if max_lora and max_lora.isdigit() else None,
        )

    def pd_queues(self) -> None:
        queues: dict[str, float] = {}
        for signal, spec in self.p.signals.items():
            if not signal.startswith("pd_") or signal not in self.newest.gauges:
                continue
            name = signal.removeprefix("pd_")
            values = self.newest.gauges[signal]
            if spec.by:
                for key, v in gauge_by(values, spec.by, self.p.replica_labels).items():
                    queues[f"{name} {key}"] = v
            else:
                value = gauge_value(values, spec.aggregate, self.p.replica_labels, spec.sum_by)
                if value is not None:
                    queues[name] = value
        if queues:
            self.out.fields["pd_queues"] = queues

    def memory(self) -> None:
        got = {
            f: self.optional_gauge(f"memory_{f.removesuffix('_bytes')}")
            for f in EngineMemory.model_fields
        }
        if any(v is not None for v in got.values()):
            self.out.fields["memory"] = EngineMemory(**got)

    def ranks(self) -> None:
        """Per-rank gauges of two or more DP ranks (or Dynamo workers), and the imbalance flag."""
        own = [k for k in self.p.rank_labels if k not in self.p.replica_labels]
        rows: dict[str, dict[str, Any]] = {}  # EngineRank's fields (checked when built)
        for signal in RANK_FIELDS:
            for lab, v in (self.newest.gauges.get(signal) or {}).items():
                key = ",".join(f"{k}={label(lab, k)}" for k in own if label(lab, k) is not None)
                if not key or math.isnan(v):
                    continue
                row = rows.setdefault(key, {"key": key})
                role = label(lab, self.p.role_label) if self.p.role_label else None
                if role:
                    row["role"] = role
                before = row.get(signal)
                row[signal] = max(v, before) if isinstance(before, float) else v  # replicas repeat
        if len(rows) < 2:
            return
        ranks = [EngineRank(**r) for r in rows.values()]
        self.out.fields["ranks"] = ranks
        flag = imbalance(ranks)
        if flag:
            self.out.fields["imbalance"] = flag

    def means(self) -> None:
        """Triton's cumulative-microsecond counters: mean = Δtotal / Δsuccesses."""
        ok, _ = self.increase("requests_ok")
        for fld, signal in (("e2e_mean_s", "e2e_total_s"), ("queue_mean_s", "queue_total_s")):
            if signal not in self.p.signals:
                continue
            total, _ = self.increase(signal)
            n = sum(ok.values()) if ok else 0.0
            if total is None:
                self.out.unavailable[fld] = self.missing(signal)
            elif n > 0:
                self.out.fields[fld] = sum(total.values()) / n
            else:
                self.out.unavailable[fld] = (
                    f"no successful requests in the last {window_label(self.w)}"
                )


def derive(history: Sequence[Extract], profile: EngineProfile, window_s: float) -> Derived:
    if not history:
        return Derived()
    d = _Deriver(history, profile, window_s)
    d.out.fields["covered_s"] = covered(history, window_s)
    d.gauge("requests_running", "requests_running")
    d.gauge("requests_waiting", "requests_waiting")
    d.kv()
    d.rate("prompt_tokens_per_s", "prompt_tokens")
    d.rate("generation_tokens_per_s", "generation_tokens")
    d.prefill()
    d.kv_pools()
    d.offload()
    d.lmcache()
    for fld, signal in HISTOGRAM_FIELDS:
        d.quantiles(fld, signal)
    d.success()
    d.prefix_cache()
    pre, pre_delta = d.increase("preemptions")
    if pre is not None:
        d.out.fields["preemptions"] = sum(pre.values())
        # one scrape holds the engine's lifetime count, not the window's: said so
        d.out.fields["preemptions_since_start"] = bool(pre_delta and pre_delta.since_start)
        per_s = d.rate_of("preemptions")
        if per_s is not None:
            d.out.fields["preemptions_per_min"] = per_s * 60
    else:
        d.out.unavailable["preemptions"] = d.missing("preemptions")
    d.kv_waiting()
    d.means()
    for fld, signal in (
        ("waiting_by_reason", "waiting_by_reason"),
        ("admission_rejections", "admission_rejections"),
        ("prompt_tokens_by_source", "prompt_tokens_by_source"),
    ):
        d.by_label(fld, signal)
    for fld in ("kv_evictable_tokens", "context_tokens_max"):
        value = d.optional_gauge(fld)
        if value is not None:
            d.out.fields[fld] = value
    d.request_tokens()
    d.speculative()
    d.per_request_preemptions()
    d.mfu()
    d.lora()
    d.pd_queues()
    d.memory()
    d.ranks()
    return d.out


def imbalance(ranks: Sequence[EngineRank]) -> str | None:
    """Names the rank that carries more than its share of the queue or of the KV cache, among
    ranks of one role (Dynamo's prefill and decode workers are not compared with each other)."""
    for role in sorted({r.role or "" for r in ranks}):
        group = [r for r in ranks if (r.role or "") == role]
        if len(group) < 2:
            continue
        what = f"{role} worker" if role else "rank"
        waiting = [r for r in group if r.requests_waiting is not None]
        if len(waiting) >= 2:
            busiest = max(waiting, key=lambda r: r.requests_waiting or 0.0)
            least = min(r.requests_waiting or 0.0 for r in waiting)
            total = sum(r.requests_waiting or 0.0 for r in waiting)
            top = busiest.requests_waiting or 0.0
            mean = total / len(waiting)
            if at_least(top - least, IMBALANCE_MIN_WAITING) and at_least(
                top, IMBALANCE_RATIO * mean
            ):
                return (
                    f"{what} {busiest.key} holds {top:.0f} of {total:.0f} waiting requests "
                    f"(mean {mean:.1f} per {what})"
                )
        used = [r for r in group if r.kv_cache_usage is not None]
        if len(used) >= 2:
            fullest = max(used, key=lambda r: r.kv_cache_usage or 0.0)
            low = min(r.kv_cache_usage or 0.0 for r in used)
            top = fullest.kv_cache_usage or 0.0
            if at_least(top, 0.5) and at_least(top - low, IMBALANCE_KV_SPREAD):
                return (
                    f"{what} {fullest.key} KV cache {top * 100:.0f}% full, "
                    f"least used {low * 100:.0f}%"
                )
    return None


def by_model(
    history: Sequence[Extract], profile: EngineProfile, window_s: float
) -> dict[str, float] | None:
    """Successful requests in the window per model (Triton: every model, ensemble steps included)."""
    spec = profile.success
    signal = spec.ok if spec is not None else None
    by = profile.count_once_label
    if not signal or not by:
        return None
    name = f"{signal}@models" if f"{signal}@models" in history[-1].counters else signal
    delta = signal_delta(history, "counters", name, window_s)
    if delta is None:
        return None
    out: dict[str, float] = {}
    for lab, vec in delta.values.items():
        key = label(lab, by) or "?"
        out[key] = out.get(key, 0.0) + vec[0]
    return out
