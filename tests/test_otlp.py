"""`inferdeck export --otlp`: the OTLP push received by a real HTTP server (and, for
--otlp-protocol grpc, a real gRPC server) on 127.0.0.1, decoded with opentelemetry-proto, and compared figure by figure with the Prometheus page of the same Frame
(read back with a parser written here)."""

from __future__ import annotations

import math
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from console.frame import Frame
from console.out.exporter import frame_metrics
from console.out.otlp import OtlpPush
from console.settings import demo_settings
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden" / "demo-frame.json"
LINE = re.compile(r"^(inferdeck_\w+)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Receiver:
    """An OTLP/HTTP receiver: each POST to /v1/metrics decoded, kept in order."""

    protocol = "http/protobuf"

    def __init__(self, status: int = 200) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self.logs: list[ExportLogsServiceRequest] = []
        self.status = status
        self.delay_s = 0.0  # a slow receiver: each answer held this long
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(outer.delay_s)
                known = self.path in ("/v1/metrics", "/v1/logs")
                if known and outer.status == 200:
                    metrics = self.path == "/v1/metrics"
                    req = ExportMetricsServiceRequest() if metrics else ExportLogsServiceRequest()
                    req.ParseFromString(body)
                    (outer.requests if metrics else outer.logs).append(req)
                self.send_response(outer.status if known else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver:
    """An OTLP/gRPC receiver: the collector's metrics and logs services (opentelemetry-proto's
    own service definitions) on a grpcio server; ``status`` a gRPC code to refuse with."""

    protocol = "grpc"

    def __init__(self, status: object = None) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import (
            metrics_service_pb2,
            metrics_service_pb2_grpc,
        )

        self.requests: list[ExportMetricsServiceRequest] = []
        self.logs: list[ExportLogsServiceRequest] = []
        self.status = status
        self.delay_s = 0.0
        outer = self

        def take(kept: list, request: object, context: grpc.ServicerContext) -> None:
            time.sleep(outer.delay_s)
            if outer.status is not None:
                context.abort(outer.status, "refused here")
            kept.append(request)

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802
                take(outer.requests, request, context)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):  # noqa: N802
                take(outer.logs, request, context)
                return logs_service_pb2.ExportLogsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.server.stop(grace=None)


@pytest.fixture(params=["http/protobuf", "grpc"])
def receiver(request):
    r = Receiver() if request.param == "http/protobuf" else GrpcReceiver()
    yield r
    r.close()


@pytest.fixture
def http_receiver():
    r = Receiver()
    yield r
    r.close()


def prometheus_figures(page: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for line in page.splitlines():
        if line.startswith("#") or not line:
            continue
        m = LINE.match(line)
        assert m, line
        labels = frozenset((k, v.replace('\\"', '"').replace("\\\\", "\\"))
                           for k, v in LABEL.findall(m.group(2) or ""))  # fmt: skip
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def otlp_figures(req: ExportMetricsServiceRequest) -> tuple[dict, dict, dict]:
    """(figures by the exporter's name and labels, their units, the resource's attributes)."""
    figures, units, resource = {}, {}, {}
    for rm in req.resource_metrics:
        resource = {a.key: a.value.string_value for a in rm.resource.attributes}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name.startswith("gen_ai."):  # the engines' histograms: their own test
                    assert m.WhichOneof("data") == "histogram", m.name
                    continue
                assert m.WhichOneof("data") == "gauge", m.name
                for dp in m.gauge.data_points:
                    attrs = {a.key: a.value.string_value for a in dp.attributes}
                    value = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                    figures[(m.name, frozenset(attrs.items()))] = float(value)
                units[m.name] = m.unit
    return figures, units, resource


# OpenTelemetry's names for the exporter's families that have one (written here, not imported)
CONVENTION = {"hw.gpu.utilization": "inferdeck_gpu_utilization_ratio"}


def as_prometheus(figures: dict) -> dict:
    """The OTLP figures under the exporter's names: hw.* back to their family, inferdeck.* as is;
    the GPU memory (hw.gpu.memory.*, not on the Prometheus page) left out."""
    out = {}
    for (name, attrs), v in figures.items():
        if name.startswith("hw.gpu.memory."):
            continue
        if name in CONVENTION:
            a = dict(attrs)
            assert a.pop("hw.type") == "gpu"
            out[(CONVENTION[name], frozenset({("gpu", a.pop("hw.id").removeprefix("gpu"))}))] = v
            assert not a
            continue
        assert name.startswith("inferdeck."), name
        out[("inferdeck_" + name.removeprefix("inferdeck."), attrs)] = v
    return out


def frames() -> list[Frame]:
    from tests.frames import node_frame

    return [Frame.model_validate_json(GOLDEN.read_text()), node_frame()]


def test_every_figure_pushed_is_the_prometheus_pages_for_the_same_frame(receiver):
    plan = demo_settings()
    for k, frame in enumerate(frames()):  # one push a node: its host names the resource
        push = OtlpPush(receiver.url, "9.9", protocol=receiver.protocol)
        try:
            assert push.send(frame, plan) and push.said == []
            assert len(receiver.requests) == k + 1
            figures, units, resource = otlp_figures(receiver.requests[-1])
            page = prometheus_figures(frame_metrics(frame, plan, "9.9"))
            assert as_prometheus(figures) == page  # every figure, every label, every digit
            assert len(page) > 20
            assert resource["host.name"] == frame.host and resource["service.name"] == "inferdeck"
            if k == 0:
                assert units["inferdeck.headroom_bytes"] == "By"
            assert units["inferdeck.status"] == "1" and units["hw.gpu.utilization"] == "1"
            # the GPU's memory under the hardware conventions, a MIG device with its GPU as parent
            for g in frame.gpus:
                attrs = {"hw.id": f"gpu{g.index}", "hw.type": "gpu", "hw.name": g.name}
                key = ("hw.gpu.memory.usage", frozenset(attrs.items()))
                assert figures.get(key) == g.memory_used_bytes
                for d in g.mig.devices if g.mig else []:
                    mig = {"hw.id": d.uuid, "hw.type": "gpu", "hw.parent": f"gpu{g.index}"}
                    key = ("hw.gpu.memory.limit", frozenset(mig.items()))
                    assert figures.get(key) == d.memory_total_bytes
        finally:
            push.close()


def test_a_figure_that_goes_unread_is_absent_from_the_next_push_never_its_last_value(receiver):
    plan = demo_settings()
    frame = frames()[0]
    push = OtlpPush(receiver.url, "9.9", protocol=receiver.protocol)
    try:
        push.send(frame, plan)
        first, _, _ = otlp_figures(receiver.requests[-1])
        gpus = [g.model_copy(update={"utilization_gpu_pct": None}) for g in frame.gpus]
        push.send(frame.model_copy(update={"gpus": gpus}), plan)
        second, _, _ = otlp_figures(receiver.requests[-1])
    finally:
        push.close()
    assert any(name == "hw.gpu.utilization" for name, _ in first)
    assert not any(name == "hw.gpu.utilization" for name, _ in second)
    assert len(second) == len(first) - sum(1 for n, _ in first if n == "hw.gpu.utilization")


def test_a_receiver_that_refuses_or_is_gone_is_said_once_and_its_return_said():
    refusing = Receiver(status=503)
    push = OtlpPush(refusing.url, "9.9", timeout_s=1.0)
    frame, plan = frames()[0], demo_settings()
    try:
        assert not push.send(frame, plan) and not push.send(frame, plan)
        assert len(push.said) == 1 and push.said[0].startswith(f"OTLP endpoint {push.url} does not")
        refusing.status = 200
        assert push.send(frame, plan)
        assert push.said[-1] == f"OTLP endpoint {push.url} takes the figures again"
    finally:
        push.close()
        refusing.close()


def test_a_grpc_receiver_that_refuses_or_is_gone_is_said_once_and_its_return_said():
    import grpc

    frame, plan = frames()[0], demo_settings()
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INVALID_ARGUMENT):
        refusing = GrpcReceiver(status=code)  # the first retried to the timeout, the second not
        push = OtlpPush(refusing.url, "9.9", timeout_s=1.0, protocol="grpc")
        try:
            started = time.monotonic()
            assert not push.send(frame, plan) and not push.send(frame, plan)
            assert time.monotonic() - started < 2 * 1.0 + 2  # each push within its timeout
            assert push.said == [
                f"OTLP endpoint {refusing.url} does not take the figures (it refused them, or is "
                "not there); each poll tries again (the Prometheus page is unaffected)"
            ]
            refusing.status = None
            assert push.send(frame, plan) and len(refusing.requests) == 1
            assert push.said[-1] == f"OTLP endpoint {refusing.url} takes the figures again"
        finally:
            push.close()
            refusing.close()
    gone = OtlpPush(f"http://127.0.0.1:{_free_port()}", "9.9", timeout_s=1.0, protocol="grpc")
    try:
        assert not gone.send(frame, plan) and len(gone.said) == 1
    finally:
        gone.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.integration
def test_export_otlp_pushes_every_poll_beside_the_prometheus_page(http_receiver, tmp_path: Path):
    receiver = http_receiver
    listen = f"127.0.0.1:{_free_port()}"
    cmd = [sys.executable, "-m", "console", "export", "--demo", "--duration", "4",
           "--listen", listen, "--otlp", receiver.url]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert f"and pushing to {receiver.url}/v1/metrics" in out.stderr
    assert len(receiver.requests) >= 3  # one a poll (1 s)
    figures, _, resource = otlp_figures(receiver.requests[-1])
    assert resource["service.name"] == "inferdeck"
    names = {n for n, _ in figures}
    assert {"inferdeck.engine_up", "hw.gpu.utilization", "hw.gpu.memory.usage"} <= names
    genai = {m.name for rm in receiver.requests[-1].resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}  # fmt: skip
    assert "gen_ai.server.time_to_first_token" in genai  # the demo engines' histograms, each poll
    # a receiver that is not there: one sentence, the export goes on, exit 0
    gone = f"http://127.0.0.1:{_free_port()}"
    cmd[cmd.index(receiver.url)] = gone
    started = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    said = [line for line in out.stderr.splitlines() if "OTLP endpoint" in line]
    assert len(said) == 1 and said[0].startswith(f"inferdeck: OTLP endpoint {gone}/v1/metrics")
    assert time.monotonic() - started < 30
    bad = subprocess.run([*cmd[:-1], "127.0.0.1:4318"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("inferdeck: --otlp 127.0.0.1:4318: give")


@pytest.mark.slow
@pytest.mark.integration
def test_export_otlp_over_grpc_and_the_protocol_from_the_sdks_variable(tmp_path: Path):
    import os

    receiver = GrpcReceiver()
    listen = f"127.0.0.1:{_free_port()}"
    cmd = [sys.executable, "-m", "console", "export", "--demo", "--duration", "3",
           "--listen", listen, "--otlp", receiver.url]  # fmt: skip
    env = {**os.environ, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}  # the SDK's variable picks it
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    finally:
        receiver.close()
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert f"and pushing to {receiver.url}," in out.stderr
    assert len(receiver.requests) >= 2
    figures, _, resource = otlp_figures(receiver.requests[-1])
    assert resource["service.name"] == "inferdeck" and (
        "inferdeck.engine_up" in {n for n, _ in figures}
    )
    # a protocol the SDK names but --otlp does not push: one sentence, exit 2
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
    bad = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and bad.stderr == (
        "inferdeck: OTEL_EXPORTER_OTLP_PROTOCOL=http/json: --otlp pushes http/protobuf or grpc; "
        "set one of them or give --otlp-protocol.\n"
    )
    flag = subprocess.run([*cmd, "--otlp-protocol", "http/protobuf"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert flag.returncode == 0, flag.stderr  # the flag over the variable (nothing takes it: said)
    assert f"OTLP endpoint {receiver.url}/v1/metrics does not take" in flag.stderr


def _records(receiver: Receiver) -> list[dict]:
    out = []
    for req in receiver.logs:
        for rl in req.resource_logs:
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    attrs = {}
                    for a in r.attributes:
                        kind = a.value.WhichOneof("value")
                        attrs[a.key] = getattr(a.value, kind)
                    out.append({"body": r.body.string_value, "severity": r.severity_text,
                                "time": r.time_unix_nano, "event": r.event_name, **attrs})  # fmt: skip
    return out


def test_the_timeline_goes_as_logs_once_when_an_event_shows_and_once_when_its_range_ends(receiver):
    from datetime import UTC, datetime, timedelta

    from console.frame import Event, Timeline

    t0 = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
    kv = Event(kind="kv-full", subject="chat", scope="engine", severity="critical", start=t0,
               range=True, ongoing=True, text="KV ≥ 90 %", evidence={"kv_pct": 97.5},
               first_sign=True)  # fmt: skip
    xid = Event(kind="xid", subject="GPU 1", scope="gpu", severity="warning",
                start=t0 + timedelta(seconds=5), text="XID 48 (token s3cr3t-t0ken)",
                evidence={"url": "http://h/?key=s3cr3t-t0ken"})  # fmt: skip
    frame = frames()[0]
    plan = demo_settings()

    def with_events(*events: Event) -> Frame:
        tl = Timeline(since=t0, events=list(events))
        return frame.model_copy(update={"timeline": tl})

    push = OtlpPush(receiver.url, "9.9", protocol=receiver.protocol)
    push.secrets = ["s3cr3t-t0ken"]  # an engine's token: never sent
    try:
        push.send(with_events(kv, xid), plan)
        push.send(with_events(kv, xid), plan)  # nothing new: nothing sent
        ended = kv.model_copy(update={"ongoing": False, "end": t0 + timedelta(seconds=60)})
        push.send(with_events(ended, xid), plan)
    finally:
        push.close()
    got = _records(receiver)
    assert [(r["inferdeck.event.kind"], r["inferdeck.event.state"]) for r in got] == [
        ("kv-full", "began"),
        ("xid", "point"),
        ("kv-full", "ended"),
    ]
    began, point, end = got
    assert began["body"] == "KV ≥ 90 %" and began["severity"] == "CRITICAL"
    assert began["event"] == "inferdeck.timeline.kv-full" and began["inferdeck.event.first_sign"]
    assert began["inferdeck.evidence.kv_pct"] == 97.5
    assert began["time"] == int(t0.timestamp() * 1e9)
    assert end["time"] == int((t0 + timedelta(seconds=60)).timestamp() * 1e9)
    assert point["inferdeck.event.subject"] == "GPU 1" and point["severity"] == "WARNING"
    assert "s3cr3t" not in str(got) and point["body"].startswith("XID 48 (token ")
    res = receiver.logs[0].resource_logs[0].resource
    assert {a.key: a.value.string_value for a in res.attributes}["host.name"] == frame.host


def _page_histogram(page: str, base: str) -> dict[frozenset, dict]:
    """A histogram read off a page here: per label set its cumulative buckets, count and sum."""
    out: dict[frozenset, dict] = {}
    for line in page.splitlines():
        m = re.match(rf"^{re.escape(base)}_(bucket|count|sum)\{{(.*)\}} (\S+)$", line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        le = labels.pop("le", None)
        h = out.setdefault(frozenset(labels.items()), {"buckets": {}})
        if m.group(1) == "bucket":
            h["buckets"][float(le)] = float(m.group(3))
        else:
            h[m.group(1)] = float(m.group(3))
    return out


def test_engine_histograms_go_under_the_genai_conventions_as_the_page_holds_them(receiver):
    """TTFT, TPOT and request duration of a real vLLM page (captured), through the reader and the
    push: every bucket, count and sum equal to the page's, cumulative, in seconds."""
    import asyncio

    from console.read.live import LiveSource
    from console.read.poller import EngineTarget
    from console.sim.engine import MetricsServer
    from tests.conftest import fixture_text

    page = fixture_text("vllm-live.prom")
    server = MetricsServer(lambda: page).start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    live = LiveSource.reading([EngineTarget(url=url, name="chat")], None)
    push = OtlpPush(receiver.url, "9.9", protocol=receiver.protocol)

    async def poll_once():
        try:
            return await live.poll()
        finally:
            await live.aclose()

    try:
        frame = asyncio.run(poll_once())
        assert push.send(frame, demo_settings(), live.last_sample)
    finally:
        push.close()
        server.stop()
    got: dict[str, list] = {}
    for rm in receiver.requests[-1].resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name.startswith("gen_ai."):
                    assert m.unit == "s" and m.histogram.aggregation_temporality == 2  # cumulative
                    got[m.name] = list(m.histogram.data_points)
    pairs = {
        "gen_ai.server.time_to_first_token": "vllm:time_to_first_token_seconds",
        "gen_ai.server.time_per_output_token": "vllm:request_time_per_output_token_seconds",
        "gen_ai.server.request.duration": "vllm:e2e_request_latency_seconds",
    }
    assert sorted(got) == sorted(pairs)
    for name, base in pairs.items():
        want = _page_histogram(page, base)
        assert len(got[name]) == len(want) >= 1
        for dp in got[name]:
            attrs = {a.key: a.value.string_value or a.value.int_value for a in dp.attributes}
            assert attrs["gen_ai.provider.name"] == "vllm" and attrs["inferdeck.engine"] == "chat"
            assert attrs["gen_ai.request.model"] == attrs["model_name"]
            assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == server.port
            h = want[
                frozenset({"engine": attrs["engine"], "model_name": attrs["model_name"]}.items())
            ]
            assert dp.count == h["count"] and dp.sum == h["sum"]
            bounds = sorted(b for b in h["buckets"] if not math.isinf(b))
            assert list(dp.explicit_bounds) == bounds
            cumulative = [sum(dp.bucket_counts[: i + 1]) for i in range(len(dp.bucket_counts))]
            assert cumulative == [h["buckets"][b] for b in [*bounds, math.inf]]
            assert not dp.HasField("min") and not dp.HasField("max")  # not on the page: unset


def test_an_engine_restart_starts_its_histograms_again_from_its_new_start(receiver):
    """Killed and back between two polls: the page's counters start from 0 and its process start
    moves; the pushed histograms say so (their start time), never a negative bucket."""
    import asyncio

    from console.read.live import LiveSource
    from console.read.poller import EngineTarget
    from console.sim.engine import MetricsServer
    from tests.conftest import fixture_text

    before = fixture_text("vllm-live.prom")
    started = float(re.search(r"^process_start_time_seconds (\S+)$", before, re.M).group(1))
    after = re.sub(r"^(vllm:time_to_first_token_seconds_(?:bucket|count|sum)\{.*\}) \S+$",
                   r"\1 0.0", before, flags=re.M)  # fmt: skip
    after = re.sub(r"^process_start_time_seconds \S+$",
                   f"process_start_time_seconds {started + 600}", after, flags=re.M)  # fmt: skip
    page = {"text": before}
    server = MetricsServer(lambda: page["text"]).start()
    live = LiveSource.reading([EngineTarget(url=f"http://127.0.0.1:{server.port}/metrics", name="chat")],
                    None)  # fmt: skip
    push = OtlpPush(receiver.url, "9.9", protocol=receiver.protocol)

    async def two_polls() -> None:
        try:
            for text in (before, after):
                page["text"] = text
                frame = await live.poll()
                assert push.send(frame, demo_settings(), live.last_sample)
        finally:
            await live.aclose()

    try:
        asyncio.run(two_polls())
    finally:
        push.close()
        server.stop()

    def ttft(req):
        return next(m.histogram.data_points[0] for rm in req.resource_metrics
                    for sm in rm.scope_metrics for m in sm.metrics
                    if m.name == "gen_ai.server.time_to_first_token")  # fmt: skip

    first, second = ttft(receiver.requests[0]), ttft(receiver.requests[1])
    assert first.count == 6 and first.start_time_unix_nano == int(started * 1e9)
    assert (
        second.count == 0
        and second.sum == 0
        and list(second.bucket_counts) == [0] * len(second.bucket_counts)
    )
    assert second.start_time_unix_nano == int((started + 600) * 1e9)


@pytest.mark.slow
@pytest.mark.integration
def test_a_receiver_that_hangs_never_holds_the_polls_or_the_prometheus_page(receiver):
    """Each push held 4 s (over HTTP and over gRPC): the export still polls every second and its
    /metrics page moves on."""
    import httpx

    receiver.delay_s = 4.0
    listen = f"127.0.0.1:{_free_port()}"
    cmd = [sys.executable, "-m", "console", "export", "--demo", "--duration", "7",
           "--listen", listen, "--otlp", receiver.url,
           "--otlp-protocol", receiver.protocol]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip

    def stamp() -> float:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                text = httpx.get(f"http://{listen}/metrics", timeout=2).text
                m = re.search(r"^inferdeck_frame_timestamp_seconds (\S+)$", text, re.M)
                if m:
                    return float(m.group(1))
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("the export served no frame")

    try:
        first = stamp()
        time.sleep(3)
        second = stamp()
    finally:
        _, err = proc.communicate(timeout=60)
    assert second - first >= 2.0  # polls went on while the push hung
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert time.monotonic() - started < 7 + 5 + 10  # the last push waited at most its timeout
    assert receiver.requests  # the held pushes did arrive
