"""PromQL for the engine profiles: each signal as Prometheus holds it (the `vllm:` names as
scraped and the `vllm_` form some OpenMetrics exporters write), rates and quantiles done by the
server."""

from __future__ import annotations

from console.engines import EngineProfile, as_list, parse_selector, profiles

BY = "instance, job, node"


def _names(name: str) -> list[str]:
    """A series name as scraped (``vllm:x`` is stored as is) and the underscore form some exporters
    produce under OpenMetrics."""
    return [name] if ":" not in name else [name, name.replace(":", "_")]


def _sel(candidate: str, suffix: str = "") -> list[str]:
    base, labels = parse_selector(candidate)
    body = ",".join(
        f'{k}="{v}"' if isinstance(v, str) else f'{k}=~"{"|".join(v)}"' for k, v in labels
    )
    return [f"{n}{suffix}{{{body}}}" if body else f"{n}{suffix}" for n in _names(base)]


def signal_query(signal: str, how: str, window: str, kind: str | None = None) -> str | None:
    """One PromQL expression covering every engine kind's series for a signal (``or`` between
    kinds; each instance is matched by the series its engine exports); ``kind``: that one only."""
    parts = []
    for prof in _profiles(kind):
        spec = prof.signals.get(signal)
        if spec is None or spec.type == "info" or spec.minus or spec.divide_by:
            continue  # combinations of two signals are left out rather than shown half-done
        for cand in spec.series:
            suffix = (
                "_bucket" if how.startswith(("q", "within")) else "_count" if how == "count" else ""
            )
            for sel in _sel(cand, suffix):
                if how == "gauge":
                    agg = {"max": "max", "mean": "avg", "count": "count"}.get(spec.aggregate, "sum")
                    parts.append(f"{agg} by ({BY}) ({sel})")
                elif how == "rate":
                    parts.append(f"sum by ({BY}) (rate({sel}[{window}]))")
                elif how == "count":
                    parts.append(f"sum by ({BY}) (increase({sel}[{window}]))")
                elif how.startswith(
                    "within"
                ):  # share of requests within a limit (le must be a bound)
                    limit = float(how[6:]) / spec.scale
                    le = f"{limit:.1f}" if limit == int(limit) else f"{limit:g}"
                    base_sel = sel.removesuffix("_bucket")
                    bucket = (
                        sel.replace("_bucket{", f'_bucket{{le="{le}",')
                        if "{" in sel
                        else f'{sel}{{le="{le}"}}'
                    )
                    count = (
                        base_sel.replace("{", "_count{", 1)
                        if "{" in base_sel
                        else f"{base_sel}_count"
                    )
                    parts.append(
                        f"sum by ({BY}) (rate({bucket}[{window}])) / sum by ({BY}) (rate({count}[{window}]))"
                    )
                else:  # q0.95
                    q = how[1:]
                    scale = f" * {spec.scale:g}" if spec.scale != 1 else ""
                    parts.append(
                        f"histogram_quantile({q}, sum by ({BY}, le) (rate({sel}[{window}]))){scale}"
                    )
    return " or ".join(parts) if parts else None


def _profiles(kind: str | None) -> list[EngineProfile]:
    return [p for k, p in profiles().items() if kind is None or k == kind]


def success_query(window: str, kind: str | None = None) -> str | None:
    """Completed OK / completed over the window per engine, by each profile's outcome recipe
    (finish reasons: good ones over all but aborts; ok vs failed counters). Ensemble steps are
    not told apart here (the node does that from Triton's API)."""
    parts = []
    for prof in _profiles(kind):
        spec = prof.success
        if spec is None:
            continue

        def names(signal: str | None, prof: EngineProfile = prof) -> list[str]:
            sig = prof.signals.get(signal or "")
            return _names(parse_selector(sig.series[0])[0]) if sig is not None else []

        def inc(name: str, matcher: str = "") -> str:
            sel = f"{{{matcher}}}" if matcher else ""
            return f"sum by ({BY}) (increase({name}{sel}[{window}]))"

        if spec.finished and spec.label and spec.good:
            good = "|".join(spec.good)
            aborted = "|".join(as_list(spec.aborted))
            for n in names(spec.finished):
                den = inc(n, f'{spec.label}!~"{aborted}"') if aborted else inc(n)
                num = inc(n, f'{spec.label}=~"{good}"')
                parts.append(f"({num} / {den})")
        elif spec.total:  # SGLang: finished minus aborted, no failure signal (as on the node)
            gone = [a for sig in as_list(spec.aborted) for a in names(sig)]
            for n in names(spec.total):
                done = (
                    f"({inc(n)} - "
                    + (" - ".join(f"({inc(a)} or {inc(n)} * 0)" for a in gone) or "0")
                    + ")"
                )
                parts.append(f"({done} / {done})")
        elif spec.ok:
            failed = [f for sig in as_list(spec.failed) for f in names(sig)]
            for n in names(spec.ok):
                bad = " + ".join(f"({inc(f)} or {inc(n)} * 0)" for f in failed) or "0"
                parts.append(f"({inc(n)} / ({inc(n)} + {bad}))")
    return " or ".join(parts) if parts else None


SEEN = "15m"  # how far back a target that stopped answering is still known for what it served


def detect_query(prof: EngineProfile) -> str:
    """The targets serving this engine kind: a count above 0 now, or 0 for one that served its
    first detection series within the last SEEN but no longer does (down, or its series stale),
    so a dead engine is still known as one."""
    names = "|".join(n for d in prof.detect for n in _names(d))
    seen = " or ".join(
        f"count by ({BY}) (last_over_time({n}[{SEEN}])) * 0" for n in _names(prof.detect[0])
    )
    return f'count by ({BY}) ({{__name__=~"{names}"}}) or {seen}'


def dcgm_seen_query(names: list[str]) -> str:
    """The DCGM exporter targets: those that served a GPU series within the last SEEN (the
    hostname labels kept: a node may be named by them)."""
    by = f"{BY}, hostname, Hostname"
    return " or ".join(f"count by ({by}) (last_over_time({n}[{SEEN}]))" for n in names)


def model_query() -> str:
    """Each target's model: the first series each profile with model labels detects by, grouped
    by those labels."""
    profs = [p for p in profiles().values() if p.model_labels]
    names = "|".join(n for p in profs for n in _names(p.detect[0]))
    labels = ", ".join(dict.fromkeys(lab for p in profs for lab in p.model_labels))
    return f'group by ({BY}, {labels}) ({{__name__=~"{names}"}})'


def model_labels() -> tuple[str, ...]:
    """The labels a model's name may come in, in the profiles' order."""
    return tuple(dict.fromkeys(lab for p in profiles().values() for lab in p.model_labels))


TTFT_TARGET_S = 1.0  # DESIGN's 8B-class TTFT limit: the fleet's SLO column (exact where a bound)
RECORDED = "inferdeck:fleet_"  # recording rules' prefix (`inferdeck rules --fleet`)


def window_queries(w: str) -> dict[str, str | None]:
    """The fleet's windowed queries (rates, quantiles, shares: the costly ones), by name. The
    same expressions make `inferdeck rules --fleet`'s records, so a fleet reading them shows the
    same figures."""
    queries: dict[str, str | None] = {}
    for sig in ("requests_running", "requests_waiting", "kv_cache_usage"):
        queries[sig] = signal_query(sig, "gauge", w)
    queries["generation_tokens_per_s"] = signal_query("generation_tokens", "rate", w)
    for q in ("0.5", "0.95", "0.99"):
        queries[f"ttft:{q}"] = signal_query("ttft", f"q{q}", w)
    queries["ttft:count"] = signal_query("ttft", "count", w)
    queries["tpot:0.95"] = signal_query("tpot", "q0.95", w)
    queries["tpot:count"] = signal_query("tpot", "count", w)
    queries["success_rate"] = success_query(w)
    queries["ttft:within"] = signal_query("ttft", f"within{TTFT_TARGET_S:g}", w)
    return queries


# figures where a lower value is the worse one: a fleet larger than a query's series cap keeps
# its lowest (bottomk), every other figure its highest (topk)
LOW_IS_WORSE = ("success_rate", "ttft:within")


def worst(name: str, expr: str, k: int) -> str:
    """A per-target figure's query keeping only the k worst targets, chosen on the server: a
    fleet past the client's series cap gets its worst rows rather than an arbitrary cut (or an
    answer too large to read). Up to k targets the answer is the same."""
    return f"{'bottomk' if name in LOW_IS_WORSE else 'topk'}({k}, {expr})"


# the DCGM labels a fleet node's GPUs are built from; the exporter writes many more (pod,
# container, namespace, pci_bus_id, device, driver version ...) that are left on the server
DCGM_LABELS = (
    "__name__, instance, job, node, hostname, Hostname, gpu, UUID, modelName, GPU_I_ID, "
    "GPU_I_PROFILE"
)


def dcgm_query(old: str, new: str) -> str:
    """One DCGM field in both its names, reduced on the server to the labels the fleet reads
    (a Kubernetes exporter's series carry three times as many bytes of labels)."""
    return f'max by ({DCGM_LABELS}) ({{__name__=~"{old}|{new}"}})'


def record_name(query: str, w: str) -> str:
    """The series a recording rule keeps a fleet query in: inferdeck:fleet_ttft_0_95:60s."""
    slug = query.replace(":", "_").replace(".", "_")
    return f"{RECORDED}{slug}:{w}"


def fleet_rule_groups(window_s: float, every: str = "15s") -> dict[str, object]:
    """`inferdeck rules --fleet`: every windowed figure the fleet shows, recorded per engine
    target at the window, so a refresh of thousands of nodes reads stored series instead of
    evaluating rates and quantiles over every bucket (the fleet uses them when present)."""
    w = f"{int(window_s)}s"
    rules = [
        {"record": record_name(name, w), "expr": expr}
        for name, expr in window_queries(w).items()
        if expr
    ]
    return {"groups": [{"name": f"inferdeck-fleet-{w}", "interval": every, "rules": rules}]}
