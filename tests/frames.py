"""Hand-built Frames for screen tests (deterministic, so snapshots are stable)."""

from datetime import UTC, datetime

from console.engines import Extract
from console.figures.plan import Plan, Service, SloSpec
from console.frame import (
    Alert,
    CostReport,
    Engine,
    Frame,
    GpmActivity,
    Gpu,
    GpuSource,
    Headroom,
    MemoryLine,
    MigDevice,
    MigState,
    NodeCost,
    Percentiles,
    ServiceStatus,
    SloReport,
)
from console.sample import EngineSample, Sample

GIB = 1024**3
MIB = 1024**2
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def _pct(p50, p95, p99, n=240.0):
    return Percentiles(p50=p50, p95=p95, p99=p99, window="1m", observations=n)


def node_frame(lost_gpu: bool = False, engine_down: bool = True) -> Frame:
    total = 97887 * MIB
    gpus = [
        Gpu(
            index=0,
            uuid="GPU-0",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_bytes=total,
            memory_used_bytes=int(total * 0.9),
            utilization_gpu_pct=63.0,
            power_w=371.0,
            power_limit_w=600.0,
            temperature_c=61.0,
            temperature_slowdown_c=90.0,
            clock_sm_mhz=2430,
            clock_sm_max_mhz=2617,
            clock_events=[],
            mig=MigState(current=False, pending=False),
        ),
        Gpu(
            index=1,
            uuid="GPU-1",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_bytes=total,
            memory_used_bytes=int(2 * 48512 * MIB * 0.9),
            power_w=298.0,
            power_limit_w=600.0,
            temperature_c=55.0,
            unavailable={"utilization_gpu_pct": "n/a under MIG"},
            mig=MigState(
                current=True,
                pending=True,
                devices=[
                    MigDevice(
                        index=i,
                        uuid=f"MIG-1-{i}",
                        profile="2g.48gb",
                        gpu_instance_id=i + 1,
                        compute_instance_id=0,
                        placement_start=6 * i,
                        placement_size=6,
                        activity=GpmActivity(
                            graphics_pct=(71.0, 38.0)[i], sm_pct=(64.0, 34.0)[i], interval_s=1.0
                        ),
                        memory_total_bytes=48512 * MIB,
                        memory_used_bytes=int(48512 * MIB * 0.9),
                    )
                    for i in range(2)
                ],
            ),
        ),
        Gpu(
            index=2,
            uuid="GPU-2",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_bytes=total,
            memory_used_bytes=0,
            power_w=45.0,
            power_limit_w=600.0,
            temperature_c=33.0,
            unavailable={"utilization_gpu_pct": "n/a under MIG"},
            mig=MigState(
                current=True,
                pending=True,
                devices=[
                    MigDevice(
                        index=i,
                        uuid=f"MIG-2-{i}",
                        profile="1g.24gb",
                        gpu_instance_id=i + 1,
                        compute_instance_id=0,
                        placement_start=3 * i,
                        placement_size=3,
                        memory_total_bytes=24192 * MIB,
                        memory_used_bytes=0,
                    )
                    for i in range(4)
                ],
            ),
        ),
        Gpu(
            index=3,
            uuid="GPU-3",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_bytes=total,
            memory_used_bytes=0,
            utilization_gpu_pct=0.0,
            power_w=45.0,
            power_limit_w=600.0,
            temperature_c=31.0,
            temperature_slowdown_c=90.0,
            clock_events=["idle"],
            mig=MigState(current=False, pending=False),
        ),
    ]
    alerts = []
    if lost_gpu:
        gpus[3] = Gpu(
            index=3,
            uuid="GPU-3",
            name=gpus[3].name,
            fault="GPU is lost (fell off the bus or hung): not polled again until restart",
        )
        alerts.append(
            Alert(
                key="gpu-fault:3",
                severity="critical",
                subject="GPU 3",
                message=gpus[3].fault,
                since=T0,
            )
        )
    engines = [
        Engine(
            name="llama-70b",
            url="http://127.0.0.1:8000/metrics",
            kind="vllm",
            model="meta-llama/Llama-3.3-70B-Instruct",
            up=True,
            requests_running=18,
            requests_waiting=3,
            kv_cache_usage=0.72,
            generation_tokens_per_s=412.5,
            ttft_s=_pct(0.21, 0.64, 1.9),
            itl_s=_pct(0.031, 0.047, 0.071),
            tpot_s=_pct(0.034, 0.052, 0.066),
            success_rate=0.998,
            requests_finished=512,
            device="0",
        ),
        Engine(
            name="llama-8b-a",
            url="http://127.0.0.1:8001/metrics",
            kind="vllm",
            model="meta-llama/Llama-3.1-8B-Instruct",
            up=True,
            requests_running=24,
            requests_waiting=0,
            kv_cache_usage=0.95,
            generation_tokens_per_s=1210.0,
            ttft_s=Percentiles(
                p50=0.08,
                p95=0.3,
                p99=2560.0,
                window="1m",
                observations=900,
                lower_bound_only=["p99"],
            ),
            itl_s=_pct(0.02, 0.027, 0.04),
            tpot_s=Percentiles(p50=0.021, p95=0.03, p99=0.04, window="1m", observations=7),
            success_rate=0.97,
            requests_finished=7,
            device="1/0",
        ),
    ]
    if engine_down:
        engines.append(
            Engine(
                name="llama-8b-b",
                url="http://127.0.0.1:8002/metrics",
                kind="vllm",
                up=False,
                device="1/1",
                error="connection refused at http://127.0.0.1:8002/metrics (is the engine running on that port?)",
            )
        )
        alerts.append(
            Alert(
                key="engine-down:http://127.0.0.1:8002/metrics",
                severity="critical",
                subject="llama-8b-b",
                message="engine down: connection refused at http://127.0.0.1:8002/metrics",
                since=T0,
            )
        )
    services = [
        ServiceStatus(
            name="llama-70b",
            engine="llama-70b",
            device="0",
            device_id="0",
            model="llama-3.3-70b",
            required_bytes=64 * GIB,
            capacity_bytes=95.59 * GIB,
            fits=True,
            headroom=[
                Headroom(name="memory", value=5.8, budget=3.4, unit="GiB", state="ok"),
                Headroom(name="kv", value=5.4, budget=8, unit="seqs", state="ok"),
                Headroom(name="queue", value=3, budget=0, unit="waiting", state="warning"),
                Headroom(name="power", value=229, budget=30, unit="W", state="ok"),
                Headroom(name="thermal", value=29, budget=5, unit="°C", state="ok"),
                Headroom(name="engine", state="ok"),
            ],
        ),
        ServiceStatus(
            name="llama-8b-a",
            engine="llama-8b-a",
            device="1:2g.48gb@0",
            device_id="1/0",
            model="llama-3.1-8b",
            required_bytes=36.9 * GIB,
            capacity_bytes=47.38 * GIB,
            fits=True,
            memory=[
                MemoryLine(name="weights", planned_bytes=16e9, source="none exported"),
                MemoryLine(
                    name="kv",
                    planned_bytes=16 * GIB,
                    engine_bytes=12.5 * GIB,
                    drift_bytes=-3.5 * GIB,
                    source="102,400 KV tokens x plan's 131,072 B/token",
                ),
            ],
            headroom=[
                Headroom(name="memory", value=0.8, budget=2.0, unit="GiB", state="warning"),
                Headroom(name="kv", value=3.5, budget=16, unit="seqs", state="critical"),
                Headroom(name="queue", value=0, budget=0, unit="waiting", state="ok"),
                Headroom(name="power", value=302, budget=30, unit="W", state="ok"),
                Headroom(name="thermal", value=35, budget=5, unit="°C", state="ok"),
                Headroom(name="engine", state="ok"),
            ],
        ),
    ]
    slo = {
        "window": "5m",
        "percentile": "p95",
        "targets": {
            "ttft_s": {"target_s": 2.0, "observed_s": 0.64, "met": True, "requests": 512},
            "tpot_s": {"target_s": 0.08, "observed_s": 0.052, "met": True, "requests": 512},
        },
        "completion": {"target": 0.995, "observed": 0.998, "met": True, "requests": 512},
        "good_share": {"low": 0.93, "high": 0.97, "approx": True},
        "burn": {
            "error_budget": 0.005,
            "period_days": 30,
            "windows": {"5m": {"burn": 0.4}, "1h": {"burn": 0.3}},
        },
    }
    cost = {
        "device_share": 0.25,
        "usd_per_h": 0.4566,
        "energy": {"power_w": 820, "usd_per_h": 0.079},
        "occupancy": 0.97,
        "usd_per_m_output_tokens": 0.31,
        "usd_per_m_compliant_tokens": {"low": 0.32, "high": 0.33},
        "joules_per_output_token": 2.0,
    }
    services[0] = services[0].model_copy(
        update={"slo": SloReport.model_validate(slo), "cost": CostReport.model_validate(cost)}
    )
    node_cost = {
        "usd_per_h": 1.826,
        "horizon_h": 26280,
        "total_usd_per_h": 2.012,
        "energy": {"power_w": 1930, "basis": "GPU only", "usd_per_h": 0.186},
    }
    return Frame(
        taken_at=T0,
        host="node-a",
        inferdeck_version="0.1.0",
        window_s=60.0,
        gpu_source=GpuSource(kind="nvml", driver_version="580.95.05"),
        gpus=gpus,
        engines=engines,
        services=services,
        cost=NodeCost.model_validate(node_cost),
        alerts=alerts,
    )


def no_driver_frame() -> Frame:
    return Frame(
        taken_at=T0,
        host="node-a",
        inferdeck_version="0.1.0",
        window_s=60.0,
        gpu_source=GpuSource(
            kind="none",
            error="No NVIDIA driver found (libnvidia-ml.so.1 is missing): "
            "GPU telemetry is off; engines are still watched.",
        ),
        engines=node_frame(engine_down=False).engines,
    )


class StaticSource:
    """A FrameSource that always returns the same Frame."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.polls = 0
        self.plan = Plan()
        self.window_s = 60.0
        self.forgotten: list[int] = []

    def forget_mig(self, index: int) -> None:
        self.forgotten.append(index)

    async def poll(self) -> Frame:
        self.polls += 1
        return self.frame

    async def aclose(self) -> None:
        pass


def whole_gpus_frame() -> Frame:
    """4 whole GPUs, one power-capped and hot."""
    total = 97887 * MIB
    gpus = []
    for i, (util, power, temp, events) in enumerate(
        [
            (97.0, 596.0, 86.0, ["power cap"]),
            (71.0, 420.0, 66.0, []),
            (12.0, 110.0, 41.0, []),
            (0.0, 45.0, 30.0, ["idle"]),
        ]
    ):
        gpus.append(
            Gpu(
                index=i,
                uuid=f"GPU-{i}",
                name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                memory_total_bytes=total,
                memory_used_bytes=int(total * (0.92 if util else 0.0)),
                utilization_gpu_pct=util,
                power_w=power,
                power_limit_w=600.0,
                temperature_c=temp,
                temperature_slowdown_c=90.0,
                clock_sm_mhz=2400 if util else 345,
                clock_sm_max_mhz=2617,
                clock_events=events,
                mig=MigState(
                    current=False,
                    pending=i == 3,
                    note="MIG enable pending — needs a GPU reset or reboot" if i == 3 else None,
                ),
            )
        )
    base = node_frame(engine_down=False)
    return base.model_copy(update={"gpus": gpus, "alerts": []})


def engine_sample(
    ex: Extract, label: str = "v", kind: str = "vllm", port: int = 8000, **more: object
) -> Sample:
    """A poll that scraped one engine on 127.0.0.1 and nothing else (no GPU reading)."""
    return Sample(
        t=ex.t,
        source=GpuSource(kind="none"),
        engines=[
            EngineSample(
                label=label,
                url=f"http://127.0.0.1:{port}/metrics",
                t=ex.t,
                up=True,
                kind=kind,
                extract=ex,
                **more,
            )
        ],
    )


def service(slo: SloSpec) -> Service:
    """An 8B service on GPU 0 planned for one 1,000-token sequence, with the given SLOs."""
    return Service(
        name="s",
        device="0",
        model="llama-3.1-8b",
        weight_bits=16,
        tokens_per_sequence=1000,
        concurrent_sequences=1,
        slo=slo,
    )
