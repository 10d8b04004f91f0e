"""Triton ensembles: a client request passes through every step of an ensemble (pre-processing,
the model, post-processing) and each step counts it. Requests are counted once, at the top-level
models — those no ensemble calls — read from Triton's model configuration API, from the config,
or, failing both, from the TensorRT-LLM backend's standard repository layout."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from console.engines import Extract
from console.promtext import label
from console.safetext import printable

# the TensorRT-LLM backend's repository: these front models call the others
KNOWN_FRONTS = ("ensemble", "tensorrt_llm_bls")


def api_base(metrics_url: str) -> str:
    """Triton's HTTP API beside its metrics endpoint: port 8002 -> 8000 (the defaults)."""
    parts = urlsplit(metrics_url)
    host = parts.hostname or "127.0.0.1"
    port = 8000 if parts.port in (None, 8002) else parts.port
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit((parts.scheme or "http", netloc, "", "", ""))


def top_models(index: list[dict[str, Any]], configs: dict[str, dict[str, Any]]) -> list[str]:
    """Models no ensemble calls as a step, from the repository index and each model's config."""
    names = [printable(str(m.get("name"))) for m in index if m.get("name")]
    called = {
        str(step.get("model_name"))
        for cfg in configs.values()
        for step in ((cfg.get("ensemble_scheduling") or {}).get("step") or [])
    }
    return sorted(n for n in names if n not in called)


def count_once(
    ex: Extract, signals: list[str], by: str, tops: list[str] | None
) -> tuple[Extract, str | None]:
    """The scrape with request-counting signals kept only for top-level models, and how they were
    chosen (None when every model counts)."""
    models = {label(lab, by) for sig in signals for lab in ex.counters.get(sig, {})}
    models.discard(None)
    how = "the model configuration"
    if not tops:
        tops = [m for m in KNOWN_FRONTS if m in models]
        how = "TensorRT-LLM's repository layout"
    keep = set(tops) & models
    if not keep or keep == models:
        return ex, None

    def only(values: dict[Any, Any]) -> dict[Any, Any]:
        return {lab: v for lab, v in values.items() if label(lab, by) in keep}

    counters = {k: only(v) if k in signals else v for k, v in ex.counters.items()}
    counters.update(
        {f"{k}@models": v for k, v in ex.counters.items() if k in signals}
    )  # per model, for the detail
    histograms = {k: only(v) if k in signals else v for k, v in ex.histograms.items()}
    out = Extract(
        t=ex.t,
        series=ex.series,
        gauges=ex.gauges,
        counters=counters,
        histograms=histograms,
        bounds=ex.bounds,
        info=ex.info,
        model=ex.model,
        hints=ex.hints,
        problems=ex.problems,
    )
    return (
        out,
        f"requests counted at {', '.join(sorted(keep))} (from {how}), not at each ensemble step",
    )
