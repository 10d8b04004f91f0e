"""``inferdeck export --otlp ENDPOINT``: each poll's figures pushed over OTLP (HTTP/protobuf, or gRPC
with ``--otlp-protocol grpc``) through the OpenTelemetry SDK and its OTLP exporters: the same
figures, from the same call, as the Prometheus page of that poll (``exporter.frame_figures``).

Names: inferdeck's own figures keep the exporter's family names under ``inferdeck.`` with their
unit in the unit field (a Prometheus receiving OTLP writes them back as the page's names); the
GPU's utilisation and memory follow OpenTelemetry's hardware conventions (``hw.gpu.utilization``,
``hw.gpu.memory.usage``, ``hw.gpu.memory.limit``, keyed by ``hw.id``; a MIG device is its own
``hw.id`` with the GPU as ``hw.parent``). The engines' TTFT, TPOT and request duration go as their pages hold
them, cumulative histograms under the GenAI server conventions (``gen_ai.server.time_to_first_token``,
``…time_per_output_token``, ``…request.duration``, with ``gen_ai.provider.name`` the engine kind,
``gen_ai.request.model``, ``server.address``/``port``). Every figure is an observable gauge read at the push: a
figure that could not be read is absent from that push, never 0, never its last value. The
timeline's events go as OTLP log records (``/v1/logs``, or the gRPC logs service; event name
``inferdeck.timeline.<kind>``, body the entry's sentence, its figures as ``inferdeck.evidence.*``):
once when an event shows, once more when a range ends.

The SDK is an optional extra (``pip install 'inferdeck[otlp]'``, ``'inferdeck[otlp-grpc]'`` for
gRPC): without it ``--otlp`` says what to install in one sentence. ``OTEL_EXPORTER_OTLP_HEADERS``
and the other ``OTEL_EXPORTER_OTLP_*`` variables are the SDK's own and apply as documented there.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from console.out.exporter import frame_figures
from console.out.redact import redact

if TYPE_CHECKING:
    from console.figures.plan import Plan
    from console.frame import Frame
    from console.sample import Sample

PROTOCOLS = ("http/protobuf", "grpc")  # OTEL_EXPORTER_OTLP_PROTOCOL's names for them
MISSING = {
    "http/protobuf": (
        "--otlp needs the OpenTelemetry SDK and its OTLP exporter: pip install 'inferdeck[otlp]' "
        "(with pipx: pipx inject inferdeck opentelemetry-sdk opentelemetry-exporter-otlp-proto-http)."
    ),
    "grpc": (
        "--otlp-protocol grpc needs the OpenTelemetry SDK and its OTLP/gRPC exporter: pip install "
        "'inferdeck[otlp-grpc]' (with pipx: pipx inject inferdeck opentelemetry-sdk "
        "opentelemetry-exporter-otlp-proto-grpc)."
    ),
}
# a family's unit suffix -> the OTLP unit (UCUM)
UNITS = (
    ("_requests_per_second", "{request}/s"),
    ("_timestamp_seconds", "s"),
    ("_seconds", "s"),
    ("_bytes", "By"),
    ("_ratio", "1"),
    ("_rate", "1"),
    ("_watts", "W"),
    ("_celsius", "Cel"),
    ("_requests", "{request}"),
    ("_sequences", "{sequence}"),
    ("_estimates", "{estimate}"),
    ("_concerns", "{concern}"),
    ("_active", "{alert}"),
)
# families that have a name in OpenTelemetry's conventions: name, unit, the label that is hw.id
CONVENTIONS = {"gpu_utilization_ratio": ("hw.gpu.utilization", "1", "gpu")}


def otlp_name(family: str) -> tuple[str, str]:
    """The OTLP metric name and unit of an exporter family."""
    if family in CONVENTIONS:
        name, unit, _ = CONVENTIONS[family]
        return name, unit
    unit = next((u for suffix, u in UNITS if family.endswith(suffix)), "1")
    return "inferdeck." + family, unit


def points(
    frame: Frame, plan: Plan, version: str
) -> dict[tuple[str, str], list[tuple[dict[str, str], float]]]:
    """Every figure of one push: (name, unit) -> [(attributes, value)]."""
    out: dict[tuple[str, str], list[tuple[dict[str, str], float]]] = {}
    for family, rows in frame_figures(frame, plan, version).samples.items():
        key = otlp_name(family)
        hw = CONVENTIONS.get(family)
        for labels, value in rows:
            attrs = dict(labels)
            if hw is not None:
                attrs = {"hw.id": f"gpu{attrs.pop(hw[2])}", "hw.type": "gpu", **attrs}
            out.setdefault(key, []).append((attrs, value))
    for g in frame.gpus:
        gpu = f"gpu{g.index}"
        base = {"hw.id": gpu, "hw.type": "gpu", **({"hw.name": g.name} if g.name else {})}
        _memory(out, base, g.memory_used_bytes, g.memory_total_bytes)
        for d in g.mig.devices if g.mig else []:
            mig = {"hw.id": d.uuid or f"{gpu}/mig{d.gpu_instance_id}", "hw.type": "gpu",
                   "hw.parent": gpu}  # fmt: skip
            _memory(out, mig, d.memory_used_bytes, d.memory_total_bytes)
    return out


# the engines' histograms under OpenTelemetry's GenAI server conventions (seconds)
GENAI = {
    "ttft": ("gen_ai.server.time_to_first_token", "Time to generate the first token."),
    "tpot": ("gen_ai.server.time_per_output_token", "Time per output token after the first."),
    "e2e": ("gen_ai.server.request.duration", "Request duration, first byte to last."),
}


def engine_histograms(sample: Sample, when_ns: int) -> list[Any]:
    """Each engine's TTFT, TPOT and request duration as its page holds them: cumulative since the
    engine started, one point per labelled series, with its buckets, count and sum as read (a
    series without its _sum is left out: no sum is made up)."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Histogram,
        HistogramDataPoint,
        Metric,
    )

    points: dict[str, list[Any]] = {}
    for es in sample.engines:
        ex = es.extract
        if not es.up or ex is None:
            continue
        where = urlsplit(es.url)
        base: dict[str, Any] = {"gen_ai.provider.name": es.kind or "unknown", "inferdeck.engine": es.label,
                "server.address": where.hostname or "", **({"server.port": where.port}
                                                           if where.port else {})}  # fmt: skip
        start = next(iter(ex.gauges.get("process_start", {}).values()), None)
        for signal in GENAI:
            sums = ex.sums.get(signal, {})
            for labels, vec in ex.histograms.get(signal, {}).items():
                total, bounds = sums.get(labels), ex.bounds[signal][labels]
                if total is None:
                    continue
                cum = [int(round(v)) for v in vec[:-1]]
                labs = dict(labels)
                model = labs.get("model_name") or labs.get("model") or es.model
                attrs: dict[str, Any] = {**labs, **base}
                if model:
                    attrs["gen_ai.request.model"] = model
                points.setdefault(signal, []).append(
                    HistogramDataPoint(
                        attributes=attrs,
                        start_time_unix_nano=int(start * 1e9) if start else 0,  # 0: unknown
                        time_unix_nano=when_ns,
                        count=int(round(vec[-1])),
                        sum=total,
                        bucket_counts=[cum[0]]
                        + [b - a for a, b in zip(cum, cum[1:], strict=False)],
                        explicit_bounds=list(bounds[:-1]),  # +Inf is implied
                        min=None,  # type: ignore[arg-type]  # not on the page: left unset
                        max=None,  # type: ignore[arg-type]
                    )
                )
    return [
        Metric(name=GENAI[sig][0], description=GENAI[sig][1], unit="s",
               data=Histogram(pts, AggregationTemporality.CUMULATIVE))
        for sig, pts in points.items()
    ]  # fmt: skip


def _memory(
    out: dict[tuple[str, str], list[tuple[dict[str, str], float]]],
    attrs: dict[str, str],
    used: int | None,
    total: int | None,
) -> None:
    if used is not None:
        out.setdefault(("hw.gpu.memory.usage", "By"), []).append((attrs, float(used)))
    if total is not None:
        out.setdefault(("hw.gpu.memory.limit", "By"), []).append((attrs, float(total)))


class OtlpPush:
    """Pushes one frame's figures per call to ``send``; says in one sentence when the endpoint
    stops and starts taking them (``said``), never a traceback or a log line per poll."""

    def __init__(
        self,
        endpoint: str,
        version: str,
        timeout_s: float = 5.0,
        protocol: str = "http/protobuf",
    ) -> None:
        package = "opentelemetry.exporter.otlp.proto." + ("grpc" if protocol == "grpc" else "http")
        try:
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader

            metrics: Any = importlib.import_module(package + ".metric_exporter")
            logs: Any = importlib.import_module(package + "._log_exporter")
        except ImportError:
            raise RuntimeError(MISSING[protocol]) from None
        url = endpoint.rstrip("/")
        self.protocol = protocol
        self.version = version
        self._timeout_s = timeout_s
        self._log_exporter_type = logs.OTLPLogExporter
        if protocol == "grpc":  # one address for both services; http:// is a plain channel
            self.url = url
            plain = url.startswith("http://")
            self._exporter = metrics.OTLPMetricExporter(
                endpoint=url, insecure=plain, timeout=timeout_s
            )
            self._logs_at: dict[str, Any] = {"endpoint": url, "insecure": plain}
        else:
            self.url = url if url.endswith("/v1/metrics") else url + "/v1/metrics"
            self._exporter = metrics.OTLPMetricExporter(endpoint=self.url, timeout=timeout_s)
            self._logs_at = {"endpoint": self.url.removesuffix("/v1/metrics") + "/v1/logs"}
        self._reader = InMemoryMetricReader()
        self._provider: Any = None  # a MeterProvider, at the first frame: its host names it
        self._logger: Any = None  # the timeline's events as OTLP logs (at the first frame too)
        self._told: dict[tuple[str, str, float], str] = {}  # each event's last state pushed
        self._now: dict[tuple[str, str], list[tuple[dict[str, str], float]]] = {}
        self._gauges: dict[tuple[str, str], Any] = {}
        self.failing: str | None = None  # why the last push was refused (None: it was taken)
        self.said: list[str] = []  # the sentences for the operator, newest last
        self.secrets: list[str] = []  # never sent: the engines' tokens (the timeline's words)
        sdk = logging.getLogger("opentelemetry")
        sdk.addHandler(logging.NullHandler())
        sdk.propagate = False  # its per-poll warnings: said once here instead

    def _resource(self, host: str) -> Any:
        from opentelemetry.sdk.resources import Resource

        return Resource.create(
            {"service.name": "inferdeck", "service.version": self.version, "host.name": host}
        )

    def _meter(self, host: str) -> Any:
        from opentelemetry.sdk.metrics import MeterProvider

        if self._provider is None:
            self._provider = MeterProvider(
                metric_readers=[self._reader], resource=self._resource(host), shutdown_on_exit=False
            )
        return self._provider.get_meter("inferdeck", self.version)

    def _events(self, frame: Frame) -> None:
        """Each timeline event as an OTLP log record when it first shows and when a range ends
        (never once a poll)."""
        if frame.timeline is None:
            return
        if self._logger is None:
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

            logs = LoggerProvider(resource=self._resource(frame.host), shutdown_on_exit=False)
            self._log_exporter = self._log_exporter_type(**self._logs_at, timeout=self._timeout_s)
            logs.add_log_record_processor(SimpleLogRecordProcessor(self._log_exporter))
            self._logs = logs
            self._logger = logs.get_logger("inferdeck.timeline", self.version)
        now: dict[tuple[str, str, float], str] = {}
        for e in frame.timeline.events:
            key = (e.kind, e.subject, e.start.timestamp())
            state = ("began" if e.ongoing else "ended") if e.range else "point"
            now[key] = state
            if self._told.get(key) == state:
                continue
            self._emit(e, state)
        self._told = now

    def _emit(self, e: Any, state: str) -> None:
        from opentelemetry._logs import SeverityNumber

        when = e.end if state == "ended" and e.end is not None else e.start
        attrs: dict[str, Any] = {
            "inferdeck.event.kind": e.kind,
            "inferdeck.event.subject": e.subject,
            "inferdeck.event.scope": e.scope,
            "inferdeck.event.state": state,
            "inferdeck.event.start": e.start.isoformat(),
            "inferdeck.event.count": e.count,
            "inferdeck.event.first_sign": e.first_sign,
            **({"inferdeck.event.end": e.end.isoformat()} if e.end is not None else {}),
            **{f"inferdeck.evidence.{k}": v for k, v in e.evidence.items()},
        }
        attrs = {k: redact(v, self.secrets) if isinstance(v, str) else v for k, v in attrs.items()}
        level = {"critical": SeverityNumber.ERROR, "warning": SeverityNumber.WARN}
        self._logger.emit(
            timestamp=int(when.timestamp() * 1e9),
            severity_number=level.get(e.severity, SeverityNumber.INFO),
            severity_text=e.severity.upper(),
            body=redact(e.text, self.secrets),
            attributes=attrs,
            event_name=f"inferdeck.timeline.{e.kind}",
        )

    def _gauge(self, key: tuple[str, str], host: str) -> None:
        if key in self._gauges:
            return
        from opentelemetry.metrics import CallbackOptions, Observation

        def observe(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(v, attrs) for attrs, v in self._now.get(key, [])]

        name, unit = key
        self._gauges[key] = self._meter(host).create_observable_gauge(
            name, callbacks=[observe], unit=unit
        )

    def send(self, frame: Frame, plan: Plan, sample: Sample | None = None) -> bool:
        """Push this frame's figures (and, given the poll's sample, its engines' histograms);
        True when the endpoint took them."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        self._now = points(frame, plan, self.version)
        for key in self._now:
            self._gauge(key, frame.host)
        data = self._reader.get_metrics_data()
        if data is not None and sample is not None:
            data = self._with_histograms(data, sample, frame)
        ok = False
        # (the gRPC exporter returns a failure, refused or unreachable alike, where HTTP raises)
        why = "it refused them, or is not there" if self.protocol == "grpc" else "it refused them"
        try:
            ok = data is None or self._exporter.export(data) == MetricExportResult.SUCCESS
        except Exception as exc:  # the SDK's transport: any failure is the endpoint's, said
            why = f"{type(exc).__name__}: {exc}"
        if ok and self.failing is not None:
            self.said.append(f"OTLP endpoint {self.url} takes the figures again")
        if not ok and self.failing is None:
            self.said.append(
                f"OTLP endpoint {self.url} does not take the figures ({why}); each poll tries "
                "again (the Prometheus page is unaffected)"
            )
        self.failing = None if ok else why
        if ok:
            self._events(frame)  # an endpoint refusing the figures is told once, above
        return ok

    def _with_histograms(self, data: Any, sample: Sample, frame: Frame) -> Any:
        from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        metrics = engine_histograms(sample, int(frame.taken_at.timestamp() * 1e9))
        if not metrics or not data.resource_metrics:
            return data
        scope = ScopeMetrics(InstrumentationScope("inferdeck.engines", self.version), metrics, "")
        rm = data.resource_metrics[0]
        first = ResourceMetrics(rm.resource, [*rm.scope_metrics, scope], rm.schema_url)
        return MetricsData([first, *data.resource_metrics[1:]])

    def close(self) -> None:
        self._exporter.shutdown()
        if self._logger is not None:
            self._logs.shutdown()
        if self._provider is not None:
            self._provider.shutdown()
