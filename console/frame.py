"""The Frame: one immutable object holding everything known about the node at one instant.

Screens draw Frames, ``inferdeck snapshot`` prints one, the recorder appends them. A value that
could not be read is ``None`` and its field name appears in ``unavailable`` with the reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from console.records import Record

SCHEMA = "inferdeck.frame/1"
# a headroom's, a concern's or the node's state, and an alert's or a finding's severity
State = Literal["ok", "warning", "critical", "unknown"]
Severity = Literal["info", "warning", "critical"]


class Workload(Record):
    """The container and Kubernetes pod a process runs in (from /proc/PID/cgroup, the process's own
    files, or the kubelet)."""

    runtime: str | None = None  # containerd | cri-o | docker
    container_id: str | None = None
    pod_uid: str | None = None
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None  # the container's name in its pod (from the kubelet)


class GpmActivity(Record):
    """GPU Performance Monitoring figures averaged over ``interval_s`` (percent of the entity: the
    whole GPU, or one MIG GPU instance and its compute instances)."""

    graphics_pct: float | None = None
    sm_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_pct: float | None = None
    dram_bw_pct: float | None = None
    pcie_tx_mib_s: float | None = None
    pcie_rx_mib_s: float | None = None
    nvdec_pct: float | None = None  # the busiest decoder, only when one is used
    interval_s: float


class GpuProcess(Record):
    pid: int
    used_memory_bytes: int | None = None
    command: str | None = None  # from /proc/PID/cmdline when visible from here
    user: str | None = None
    engine: str | None = None  # the engine row this process serves, when matched
    workload: Workload | None = None


class MigDevice(Record):
    """A MIG device as CUDA sees it: one compute instance of one GPU instance."""

    index: int
    uuid: str | None = None
    profile: str | None = None  # e.g. "1g.24gb" (mig-parted naming)
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    placement_start: int | None = None
    placement_size: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    activity: GpmActivity | None = None  # its GPU instance's (shared by the GI's compute instances)
    processes: list[GpuProcess] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)


class ComputeInstance(Record):
    id: int
    profile: str | None = None  # "1g.24gb" for a full-size CI, "1c.3g.40gb" for a sub-profile
    slices: int | None = None


class GpuInstance(Record):
    id: int
    profile: str | None = None
    profile_id: int | None = None
    placement_start: int | None = None
    placement_size: int | None = None
    compute_instances: list[ComputeInstance] = Field(default_factory=list)


class MigRecut(Record):
    """A MIG re-cut the journal holds as begun and never ended (killed, or the power went), with
    the layout its GPU reads back in: the new one, the old one, neither (a slice may have no MIG
    device), or unknown (the instances could not be read)."""

    apply_id: str
    begun: str
    user: str | None = None
    pid: int | None = None
    before: str
    target: str
    state: Literal["new", "old", "neither", "unknown"]
    message: str
    action: str  # the command that brings the GPU to a recorded layout


class MigState(Record):
    current: bool | None = None
    pending: bool | None = None
    note: str | None = None  # "pending — needs a GPU reset", "MIG mode is lost on driver reload"
    instances: list[GpuInstance] = Field(default_factory=list)
    devices: list[MigDevice] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)
    recut: MigRecut | None = None  # an interrupted re-cut found in the MIG journal


class RemappedRows(Record):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class XidEvent(Record):
    """An XID error NVML's event API delivered for a GPU since the last poll (on one MIG
    instance when the ids are given)."""

    xid: int
    gpu_instance: int | None = None
    compute_instance: int | None = None


class Gpu(Record):
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    architecture: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    bar1_total_bytes: int | None = None
    bar1_used_bytes: int | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    clock_sm_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    pstate: int | None = None
    power_w: float | None = None  # 1 s average on Ampere (non-GA100) and newer
    power_limit_w: float | None = None  # enforced
    power_default_limit_w: float | None = None
    energy_j: float | None = None  # since the driver loaded
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    temperature_shutdown_c: float | None = None
    fan_pct: float | None = None
    clock_events: list[str] | None = None  # active clock event ("throttle") reasons, decoded
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    retired_pages: int | None = None
    remapped_rows: RemappedRows | None = None
    mig: MigState | None = None
    activity: GpmActivity | None = None  # whole GPU, when MIG is off
    persistence_mode: bool | None = None
    processes: list[GpuProcess] = Field(
        default_factory=list
    )  # whole-GPU processes (MIG: per device)
    fault: str | None = None  # a device-level fault (GPU lost); the GPU is no longer polled
    xids: list[XidEvent] = Field(default_factory=list)  # XID errors delivered since the last poll
    unavailable: dict[str, str] = Field(default_factory=dict)


class GpuSource(Record):
    """How the GPU side was read: NVML, the simulator, or not at all (with the reason)."""

    kind: Literal["nvml", "simulated", "none"]
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    error: str | None = None
    note: str | None = None  # e.g. running in a container without the host PID namespace


class Percentiles(Record):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    window: str  # "60s", or "since_start" when no earlier scrape gives a baseline
    observations: float = 0.0
    lower_bound_only: list[str] = Field(default_factory=list)  # e.g. ["p99"]: rank in +Inf, "≥"
    approx: bool = False  # not a histogram of this quantity (e.g. TGI TTFT from its phases)
    # each quantile's bucket: (lower, upper] where the truth lies
    buckets: dict[str, tuple[float, float]] = Field(default_factory=dict)
    # quantiles whose bucket spans more than 1.5x (window.WIDE_RATIO): marked '±' on screen
    wide: list[str] = Field(default_factory=list)
    note: str | None = None
    # the console has watched less than the window: the seconds these figures cover
    covered_s: float | None = None


class SpecDecode(Record):
    """Speculative decoding: from the draft/accepted counters over the window, or the engine's own
    gauges (SGLang, trtllm-serve) when it exports no counters."""

    acceptance_rate: float | None = None  # accepted / drafted tokens
    mean_accepted_length: float | None = None  # tokens per verify step: 1 + accepted / drafts
    draft_tokens: float | None = None  # in the window
    accepted_tokens: float | None = None
    window: str | None = None  # "60s", "since_start", or None for the engine's gauges
    # accepted / offered per draft position (first drafted token first), over the same window:
    # the figure that says whether a shorter draft would waste less
    by_position: list[float | None] | None = None


class KvOffload(Record):
    """KV blocks moved between the GPU and the offload tier (vLLM's CPU offloading connector) in
    the window: bytes each way, their rate, and the speed of the transfers while they ran."""

    store_bytes: float | None = None  # GPU -> offload tier
    load_bytes: float | None = None  # offload tier -> GPU
    store_bytes_per_s: float | None = None  # over the window (None until two scrapes)
    load_bytes_per_s: float | None = None
    store_transfer_bytes_per_s: float | None = None  # bytes / time spent storing
    load_transfer_bytes_per_s: float | None = None
    window: str | None = None


class EngineMemory(Record):
    """What the engine says it holds on its device (one rank's device under data parallelism)."""

    weights_bytes: float | None = None
    kv_bytes: float | None = None
    graphs_bytes: float | None = None  # CUDA graphs
    total_bytes: float | None = None


class LoraState(Record):
    running: list[str] = Field(default_factory=list)
    waiting: list[str] = Field(default_factory=list)
    max_lora: int | None = None


class EngineRank(Record):
    """One DP rank (vLLM engine, SGLang scheduler) or, behind Dynamo, one worker."""

    key: str  # "engine=1", "dp_rank=0", "worker_id=…,dp_rank=0"
    role: str | None = None  # Dynamo: prefill | decode
    requests_waiting: float | None = None
    requests_running: float | None = None
    kv_cache_usage: float | None = None
    kv_blocks_active: float | None = None
    prefill_tokens_active: float | None = None
    last_ttft_s: float | None = None
    last_itl_s: float | None = None


class RequestTokens(Record):
    """Tokens per request finished in the window, from the engine's own histograms."""

    prompt_p50: float | None = None
    prompt_p99: float | None = None
    output_p50: float | None = None
    output_p99: float | None = None
    # no request in the window used more: the upper bounds of the highest prompt and output
    # buckets holding a request, summed (None when one fell in +Inf)
    most: float | None = None
    requests: float = 0.0
    window: str = ""


class LlamaSlot(Record):
    """One llama.cpp slot from GET /slots."""

    id: int
    n_ctx: int
    processing: bool
    prompt_tokens: int = 0
    decoded_tokens: int = 0


class Engine(Record):
    name: str
    url: str
    kind: str | None = None
    model: str | None = None
    up: bool = False
    error: str | None = None
    device: str | None = None  # "GPU 0" or "GPU 1 MIG 2g.48gb@0", when known
    version_hints: list[str] = Field(default_factory=list)
    moved_to: str | None = None  # a redirect fetched its page from this other host
    scrape_s: float | None = None
    # when these figures were read: an engine polled at its own, longer interval keeps older ones
    sampled_at: datetime | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # fraction 0..1 (max across ranks)
    kv_cache_usage_by_rank: dict[str, float] | None = None
    kv_cache_usage_peak: float | None = None  # the highest KV use among the window's scrapes
    kv_full_share: float | None = None  # share of the window's scrapes with the KV cache >= 90 %
    # share of the window's scrapes where requests waited for capacity the KV cache could not give
    kv_blocked_share: float | None = None
    # requests waiting for the KV cache now (0: those waiting wait for something else)
    requests_waiting_kv: float | None = None
    kv_capacity_tokens: float | None = None
    # hybrid models' KV memory pools (SGLang: full, swa, mamba) and the fullest one, which binds
    kv_pools: dict[str, float] | None = None
    kv_binding_pool: str | None = None
    prompt_tokens_per_s: float | None = None  # every prompt token, prefix-cache hits included
    # the prompt tokens the engine computed (hits excluded): the prefill work done
    prefill_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    ttft_s: Percentiles | None = None
    tpot_s: Percentiles | None = None
    itl_s: Percentiles | None = None
    e2e_s: Percentiles | None = None
    queue_time_s: Percentiles | None = None
    e2e_mean_s: float | None = None
    queue_mean_s: float | None = None
    success_rate: float | None = None  # completed OK / completed (aborts excluded, shown apart)
    requests_finished: float | None = None  # in the window, every outcome
    requests_per_s: float | None = None  # finished per second over the window (rate())
    requests_aborted: float | None = None
    requests_failed: float | None = None
    finish_reasons: dict[str, float] | None = None
    requests_by_model: dict[str, float] | None = None  # Triton: successes in the window per model
    prefix_cache_hit_rate: float | None = None
    preemptions: float | None = None  # in the window
    preemptions_per_min: float | None = None  # rate() of the preemption counter, per minute
    preemptions_since_start: bool = False  # one scrape so far: the count is the engine's lifetime
    preemptions_per_request: float | None = None  # mean over requests finished in the window
    waiting_by_reason: dict[str, float] | None = None  # vLLM: capacity | deferred
    admission_rejections: dict[str, float] | None = None  # in the window, by reason
    prompt_tokens_by_source: dict[str, float] | None = (
        None  # in the window: compute | cache hit | …
    )
    pd_queues: dict[str, float] | None = None  # prefill/decode disaggregation queues
    kv_evictable_tokens: float | None = None
    context_tokens_max: float | None = None  # llama.cpp: the largest batch of tokens seen
    request_tokens: RequestTokens | None = None
    speculative: SpecDecode | None = None
    kv_offload: KvOffload | None = None
    lmcache_hit_rate: float | None = None  # LMCache: hit / requested tokens over the window
    flops_per_gpu_per_s: float | None = None  # vLLM --enable-mfu-metrics
    lora: LoraState | None = None
    memory: EngineMemory | None = None
    ranks: list[EngineRank] | None = None  # two or more DP ranks / workers
    imbalance: str | None = None  # the rank carrying more than its share, named
    slots: list[LlamaSlot] | None = None
    restarted_at: datetime | None = None
    # back from an outage for under 10 s: its conditions wait for fresh data (derive), and why
    not_judged: str | None = None
    capacity: CapacityReport | None = None  # how much more it takes before an SLO breaks
    # seconds of the window the console has watched this engine (less than the window: every
    # windowed figure stands for this span, rated over it)
    covered_s: float | None = None
    series: dict[str, str] = Field(default_factory=dict)  # signal -> exposed series used
    unavailable: dict[str, str] = Field(default_factory=dict)


class Alert(Record):
    key: str
    rule: str = ""
    severity: Severity
    subject: str
    message: str
    since: datetime  # when the condition began (raised after the rule's `for` duration)
    state: Literal["active", "cleared"] = "active"
    cleared_at: datetime | None = None


class Concern(Record):
    """One entry of the node's verdict: an active alert, a condition that holds but whose hold
    has not elapsed (pending, counted as at least a warning), or a finding."""

    severity: Severity
    source: Literal["alert", "pending", "finding"]
    subject: str
    message: str
    rule: str = ""
    since: datetime | None = None  # when the condition began (alerts and pending ones)
    knob: str | None = None  # what to turn (a finding's), said on its own under the Alerts title


class Headroom(Record):
    """One live headroom of a service against its planned budget."""

    name: str  # memory | kv | queue | power | thermal | engine
    value: float | None = None  # live headroom, in ``unit``
    budget: float | None = None  # what the plan allows, in ``unit``
    unit: str = ""
    state: State = "unknown"
    detail: str = ""
    # when the live figure's rising trend uses it all up (KV full, the queue past the TTFT SLO,
    # power at its limit); absent without such a trend
    exhausted_in_s: float | None = None


class _Report(Record):
    """A derived report: the JSON holds the fields that were set (an absent key means "not
    applicable here", a null means "could not be computed", as in ``unavailable``)."""

    @model_serializer(mode="wrap")
    def _given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        given = self.model_fields_set
        return {k: v for k, v in handler(self).items() if k in given}


class TargetReport(_Report):
    """One latency SLO of a service over its window."""

    target_s: float
    requests: float | None = None  # observations in the window (tokens when ``counts`` says so)
    observed_s: float | None = None  # the SLO's percentile, from the summed bucket increases
    observed_lower_bound_only: bool = False  # the rank fell in +Inf
    observed_bucket_s: tuple[float, float] | None = None  # the bucket holding it
    observed_wide: bool | None = None  # that bucket spans more than 1.5x: marked '±'
    headroom_s: float | None = None
    met: bool | None = None
    attainment: float | None = None  # share within the limit
    attainment_exact: bool | None = None  # False: interpolated between bucket bounds
    # interpolated: the share at the highest edge at or below the limit, and that edge (what
    # `inferdeck rules --slo` reads in Prometheus), shown beside it
    attainment_at_edge: float | None = None
    edge_s: float | None = None
    since_start: bool | None = None
    covered_s: float | None = None  # the console has watched less than the window: this much
    approx: bool | None = None  # no histogram of this figure (TGI TTFT: a sum of quantiles)
    counts: str | None = None  # "tokens" for a per-token TPOT histogram
    note: str | None = None


class CompletionReport(_Report):
    target: float
    observed: float | None = None  # completed OK / completed (aborts excluded)
    requests: float = 0.0
    aborted: float | None = None
    met: bool = False


class RangeReport(_Report):
    """A quantity known only between bounds (the good share, goodput)."""

    low: float
    high: float
    approx: bool | None = None  # an attainment behind it was interpolated
    unknown: list[str] | None = None  # SLOs without an attainment: the low bound is 0
    note: str | None = None


class BurnWindow(_Report):
    bad_share: float | None = None
    requests: float = 0.0
    burn: float | None = None
    covered_s: float | None = None  # seconds of the window the console has watched
    # enough of the window watched (slo.BURN_READY_S) and enough requests to alert on
    ready: bool | None = None
    objective: str | None = None  # the worst-burning objective: completion, ttft_s, tpot_s, e2e_s


class BurnReport(_Report):
    error_budget: float
    period_days: float
    windows: dict[str, BurnWindow]  # the service: its worst objective per window
    # per objective (completion, and each latency SLO against 1 - its percentile), per window
    objectives: dict[str, dict[str, BurnWindow]] = Field(default_factory=dict)
    budgets: dict[str, float] = Field(default_factory=dict)  # each objective's budget share
    # a whole period's error budget is spent in this long at the longest ready window's burn
    budget_spent_in_s: float | None = None
    budget_window: str | None = None  # that window


class SloReport(_Report):
    """SLO compliance of one service over its evaluation window."""

    window: str
    covered_s: float | None = None  # the console has watched less than the window: this much
    percentile: str
    targets: dict[str, TargetReport] = Field(default_factory=dict)  # "ttft_s", "tpot_s", "e2e_s"
    unavailable: dict[str, str] = Field(default_factory=dict)
    completion: CompletionReport | None = None
    good_share: RangeReport | None = None
    output_tokens_per_s: float | None = None
    goodput_tokens_per_s: RangeReport | None = None
    burn: BurnReport | None = None


class CapacityReport(_Report):
    """How much more an engine can take before an SLO breaks (console/figures/capacity.py; the model
    in docs/capacity.md). Rates are finished requests per second."""

    requests_per_s: float | None = None  # the rate at the first SLO breach
    low: float | None = None  # the range, from the fit's standard errors
    high: float | None = None
    at_least: bool | None = None  # past 1.5x the highest load seen: only a lower bound
    current_per_s: float | None = None  # the recent finished rate
    room_per_s: float | None = None  # requests_per_s - current_per_s
    binding: str | None = None  # the SLO that breaks first: "tpot" or "ttft"
    limit: str | None = None  # what gets there: "tpot", "kv" (pool full), "batch"
    next_limit: str | None = None  # the bound after it, and its rate
    next_per_s: float | None = None
    queue_from: str | None = None  # the bound past which arrivals queue: "kv" or "batch"
    batch_limit: float | None = None  # the batch cap the model used, and what stated it
    batch_from: str | None = None  # "the plan", "its command line", "the engine's own figure"...
    running_at_limit: float | None = None  # running sequences at the binding bound
    seen_max_running: float | None = None  # the highest load of the window's fit
    itl_base_s: float | None = None  # the fit: ITL = base + per_seq x running
    itl_per_seq_s: float | None = None
    # the load points the fit was made on: (mean running sequences, mean ITL s), oldest first
    observed: list[tuple[float, float]] | None = None
    kv_full_in_s: float | None = None  # KV use's robust trend reaches full in this long
    # requests waiting at which queueing alone breaks the TTFT SLO (the wait it leaves after the
    # unqueued TTFT p95, x the finished rate), and when the waiting count's trend reaches it
    queue_limit: float | None = None
    ttft_unqueued_p95_s: float | None = None  # TTFT's p95 over stretches where nothing waited
    queue_full_in_s: float | None = None
    saturation: float | None = None  # the worst of p90 latency / its SLO (llm-d's index)
    saturation_slo: str | None = None  # the SLO it is: "ttft" or "tpot"
    # the bucket that p90 lies in, over the SLO, where it spans more than 1.5x (marked '±'): a
    # 0.94 read inside TPOT's 25-50 ms bucket against a 50 ms SLO may be anything from 0.5 to 1
    saturation_bucket: tuple[float, float] | None = None
    # requests behind that p90: under 20 (a check's first seconds) it is shown, marked, but
    # raises no alert or finding
    saturation_requests: float | None = None
    saturation_note: str | None = None  # why there is no index (too few requests watched)
    saturating: bool | None = None  # concurrency and TTFT both rising (GuideLLM's slope test)
    cant_tell: str | None = None  # why there is no estimate
    note: str | None = None
    # the last estimates scored on the minute of load after each (capacity.Backtest): how many,
    # how many held, and how many the load reached (the rest held without being put to the test)
    backtest_scored: int | None = None
    backtest_held: int | None = None
    backtest_tested: int | None = None


class EnergyReport(_Report):
    power_w: float | None = None
    basis: str | None = None  # "GPU only", "GPU boards + host figure", "wall meter" (x PUE)
    usd_per_kwh: float | None = None
    usd_per_h: float | None = None


class PriceRange(_Report):
    low: float | None = None
    high: float | None = None


class CostReport(_Report):
    """Cost meters of one service: its share of the node, energy, and per-token prices."""

    device_share: float
    usd_per_h: float
    energy: EnergyReport | None = None
    occupancy: float | None = None  # share of the window with requests running
    usd_per_m_output_tokens: float | None = None
    usd_per_m_compliant_tokens: PriceRange | None = None  # from the goodput bounds
    joules_per_output_token: float | None = None
    wh_per_1000_requests: float | None = None


class GpuCost(_Report):
    gpu: int
    usd_per_h: float
    energy_usd_per_h: float | None = None
    energy_basis: str | None = None


class NodeCost(_Report):
    usd_per_h: float
    horizon_h: int | float
    energy: EnergyReport
    total_usd_per_h: float
    per_gpu: list[GpuCost] = Field(default_factory=list)


MemoryPart = Literal["weights", "kv", "runtime", "total"]


class MemoryLine(Record):
    """One line of a service's memory: what the plan set aside beside what the engine holds."""

    name: MemoryPart
    planned_bytes: float | None = None
    engine_bytes: float | None = None
    drift_bytes: float | None = None  # engine - planned
    tolerance_bytes: float = 0.0  # a drift within this is agreement (the plan's margin, or 1 %)
    source: str = ""  # how the engine's figure was found, or why there is none


class ServiceStatus(Record):
    """A planned service: its fit on paper and its headroom now."""

    name: str
    engine: str
    device: str  # as planned ("1:2g.48gb@0")
    device_id: str | None = None  # as found on the node ("1/0"); None when not found
    model: str
    required_bytes: float
    tokens_per_sequence: int | None = None  # the plan's context per sequence
    concurrent_sequences: int | None = None  # and its concurrency
    capacity_bytes: float | None = None
    planned_headroom_bytes: float | None = None
    fits: bool | None = None
    engine_up: bool | None = None
    down_since: datetime | None = None
    last_recovery_s: float | None = None  # how long the engine took to come back last time
    headroom: list[Headroom] = Field(default_factory=list)
    memory: list[MemoryLine] = Field(default_factory=list)  # plan against the engine's own figures
    slo: SloReport | None = None
    cost: CostReport | None = None
    capacity: CapacityReport | None = None  # its replicas' room to the first SLO breach, summed
    unavailable: dict[str, str] = Field(default_factory=dict)


class Limits(Record):
    """The plan's thresholds the screens colour by, so a cell turns as its alert would."""

    kv_usage_critical: float = 0.90  # KV use at which the KV alert fires (the plan's alerts)


TIMELINE_SCHEMA = "inferdeck.timeline/1"
Scope = Literal["gpu", "mig", "engine", "service", "node"]


class Event(Record):
    """One entry of the incident timeline (console/figures/timeline.py): a point (an edge: a restart, an
    XID) or a range (a state: an engine down, KV at its limit), with the figures that show it.
    Repeats within a short gap are folded into one entry and counted."""

    kind: str  # "engine-down", "restart", "queue", "kv-full", "preemptions", "xid", "alert"...
    subject: str  # the engine, service, "GPU 0", "GPU 1 MIG 2g.48gb@0" or the host
    scope: Scope
    severity: Severity
    start: datetime
    end: datetime | None = None  # a range's end, or a folded point's last; None while open
    range: bool = False
    ongoing: bool = False  # a range still open at the timeline's last frame
    text: str
    evidence: dict[str, float | str] = Field(default_factory=dict)
    count: int = 1  # occurrences folded into this entry
    first_sign: bool = False  # the earliest event of the chain that led to the first page


class Timeline(Record):
    """What happened, in order, since ``since``: the events kept (oldest first), how many older
    ones were dropped past the cap and how many repeats were folded into counted entries."""

    schema_: str = Field(TIMELINE_SCHEMA, alias="schema")
    since: datetime
    events: list[Event] = Field(default_factory=list)
    dropped: int = 0
    folded: int = 0


class Frame(Record):
    schema_: str = Field(SCHEMA, alias="schema")
    taken_at: datetime
    host: str
    inferdeck_version: str
    window_s: float
    # seconds of the window the console has watched (less than window_s in its first window)
    window_covered_s: float | None = None
    gpu_source: GpuSource
    gpus: list[Gpu] = Field(default_factory=list)
    engines: list[Engine] = Field(default_factory=list)
    services: list[ServiceStatus] = Field(default_factory=list)
    cost: NodeCost | None = None  # node cost meters (hourly, energy, per-GPU split)
    alerts: list[Alert] = Field(default_factory=list)  # active first, then recently cleared
    # the one verdict every surface reads (console.figures.verdict): worst first, and the node's status
    verdict: list[Concern] = Field(default_factory=list)
    status: State = "unknown"
    limits: Limits = Field(default_factory=Limits)
    timeline: Timeline | None = None  # what happened since the console started, in order

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(by_alias=True, indent=indent)
