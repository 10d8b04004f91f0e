"""The scenario matrix: whole situations at the real 1 s cadence, and the verdict every surface
must show by a stated time — the dashboard (its alerts pane and header, in a pilot), `check`
(exit code and first line), the exporter (`inferdeck_status`) and snapshot.md.

Each scenario drives simulated engines (the traffic model behind `inferdeck simulate`, its pages
in vLLM's exposition format) and a simulated NVML on a clock the test moves; everything between —
parsing, extraction, windows, headroom, SLOs, burn, alerts, findings, the verdict — is production
code. Seed SLOs: p95 TTFT 1,000 ms and p95 TPOT 50 ms for 8B, 99.5 % completion.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest

from console.engines import extract, needed_families, profiles
from console.figures.derive import Deriver
from console.figures.findings import findings
from console.figures.plan import Plan
from console.figures.verdict import EXIT
from console.frame import Frame, GpuSource
from console.out.checkplugin import check_lines
from console.out.exporter import frame_metrics
from console.out.snapshot import to_markdown
from console.promtext import parse
from console.read.nvml import NvmlReader
from console.sample import EngineSample, Sample
from console.sim.engine import page_for
from console.sim.nvml import DeviceLoad, SimNvml
from console.sim.traffic import TrafficModel, TrafficSpec
from console.units import eta_text
from tests.conftest import ROOT
from tests.waits import until

VLLM = profiles()["vllm"]
FIXTURES = ROOT / "tests" / "fixtures" / "metrics"
T0 = 1_900_000_000.0
STEADY = TrafficSpec(rate_rps=2.0, prompt_tokens=400, output_tokens=120, error_share=0.0,
                     abort_share=0.0, seed=11)  # fmt: skip


def _plan(names: list[str]) -> Plan:
    return Plan.model_validate(
        {
            "node": {"name": "node", "gpus": 1, "gpu_model": "h100-80gb"},
            "services": [
                {
                    "name": n,
                    "device": f"0:3g.40gb@{4 * i}" if len(names) > 1 else "0",
                    "model": "llama-3.1-8b",
                    "weight_bits": 16,
                    "tokens_per_sequence": 4096,
                    "concurrent_sequences": 4,
                    "slo": {"ttft_s": 1.0, "tpot_s": 0.050, "completion": 0.995},
                }
                for i, n in enumerate(names)
            ],
        }
    )


@dataclass
class Node:
    """Engines (traffic models) and a GPU on a clock the test moves, polled at 1 s."""

    specs: dict[str, TrafficSpec]
    mig: bool = False
    t: float = T0
    down: set[str] = field(default_factory=set)
    # engine -> specs of its DP ranks (engine="0", "1", ...): one vLLM server, several engines
    ranks: dict[str, list[TrafficSpec]] = field(default_factory=dict)
    power_limit_w: float | None = None  # a GPU capped below what its load draws
    kind: str = "vllm"  # the engines' kind: the simulator's page for it, read by its profile

    def __post_init__(self) -> None:
        def clock() -> float:
            return self.t

        self.models = {n: TrafficModel(replace(s), clock=clock) for n, s in self.specs.items()}
        self.rank_models = {
            n: [TrafficModel(replace(s), clock=clock) for s in specs]
            for n, specs in self.ranks.items()
        }
        names = list(self.specs)
        self.plan = _plan(names)
        sim = SimNvml(load=self._load, clock=clock)
        if self.mig:
            sim.add_gpu("h100-80gb", mig=[("3g.40gb", 4 * i) for i in range(len(names))])
        else:
            sim.add_gpu("h100-80gb")
        if self.power_limit_w is not None:
            sim.gpus[0].enforced_limit_w = self.power_limit_w  # nvidia-smi -pl
        self.nvml = NvmlReader(sim, simulated=True)
        self.deriver = Deriver(self.plan, 60.0, "node")
        self.frame: Frame | None = None

    def _load(self, gpu: int, mig: int | None) -> DeviceLoad:
        models = list(self.models.values())
        m = models[mig] if mig is not None and mig < len(models) else models[0]
        busy = min(1.0, len(m.running) / max(1, m.spec.max_num_seqs))
        return DeviceLoad(0.2 + 0.7 * busy, 12 * 2**30)

    def poll(self) -> Frame:
        self.t += 1.0
        engines = []
        for name, m in self.models.items():
            url = f"http://127.0.0.1:1/{name}/metrics"
            if name in self.down:
                engines.append(
                    EngineSample(
                        label=name,
                        url=url,
                        t=self.t,
                        up=False,
                        kind=self.kind,
                        error=f"connection refused at {url}",
                    )  # fmt: skip
                )
                continue
            m.advance()
            text = page_for(self.kind, m)
            for r, rank in enumerate(self.rank_models.get(name, [])[1:], start=1):
                rank.advance()
                text += page_for("vllm", rank).replace('engine="0"', f'engine="{r}"')
            page = parse(text, keep=needed_families().__contains__)
            engines.append(
                EngineSample(
                    label=name,
                    url=url,
                    t=self.t,
                    up=True,
                    kind=self.kind,
                    extract=extract(page, profiles()[self.kind], self.t),
                )  # fmt: skip
            )
        source, gpus = self.nvml.read()
        self.frame = self.deriver.frame(Sample(t=self.t, source=source, gpus=gpus, engines=engines))
        return self.frame

    def run(self, seconds: int) -> list[Frame]:
        return [self.poll() for _ in range(seconds)]


def surfaces(frame: Frame, plan: Plan) -> dict[str, object]:
    """What each surface says of the node, read from the surface itself."""
    lines = check_lines(frame, plan)
    metrics = frame_metrics(frame, plan, "t")
    status_line = next(x for x in metrics.splitlines() if x.startswith("inferdeck_status "))
    md = to_markdown(frame)
    verdict_md = next(x for x in md.splitlines() if x.startswith("## Verdict: "))
    return {
        "check_code": EXIT[frame.status],
        "check_first": lines[0],
        "exporter": int(float(status_line.split()[1])),
        "snapshot": verdict_md.removeprefix("## Verdict: "),
        "status": frame.status,
        "exporter_page": metrics,  # (the pages as rendered, for tests that read more of them)
        "snapshot_md": md,
    }


# what a sentence may state of its engine, and the figure of the same poll it must equal
SAID = (
    (r"([\d,]+) requests? waiting for the KV cache", lambda e: e.requests_waiting_kv, 1.0),
    (r"([\d,]+) requests? waiting for over", lambda e: e.requests_waiting, 1.0),
    (r"\(([\d,]+) waiting\)", lambda e: e.requests_waiting, 1.0),
    (r"use ([\d.]+)% now", lambda e: e.kv_cache_usage, 100.0),
    (r"peak ([\d.]+)% in the window", lambda e: _peak(e), 100.0),
    (r"KV cache ([\d.]+)% full in the window", lambda e: _peak(e), 100.0),
    (r"with ([\d,]+) preemptions?", lambda e: e.preemptions, 1.0),
)


def _peak(e: object) -> float | None:
    now, peak = getattr(e, "kv_cache_usage", None), getattr(e, "kv_cache_usage_peak", None)
    return None if now is None else max(now, peak or 0.0)


def figures_agree(frame: Frame) -> None:
    """No sentence contradicts the frame it is shown in: every count of waiting requests, KV
    share and preemptions an alert, a pending condition or a verdict line states of an engine is
    that poll's figure (an alert still clearing is dated 'until …:', so it is not read as now's)."""
    engines = {e.name: e for e in frame.engines}
    by_service = {s.name: engines.get(s.engine) for s in frame.services}
    said = [(a.subject, a.message) for a in frame.alerts if a.state == "active"]
    said += [(c.subject, c.message) for c in frame.verdict]
    for subject, text in said:
        e = engines.get(subject) or by_service.get(subject)
        if e is None or text.startswith("until "):
            continue
        for pattern, figure, scale in SAID:
            for m in re.finditer(pattern, text):
                value = figure(e)
                assert value is not None, (text, "states a figure the frame does not hold")
                stated = float(m.group(1).replace(",", ""))
                assert stated == pytest.approx(round(value * scale), abs=0.5), (text, value)


def agree(frame: Frame, plan: Plan, status: str) -> dict[str, object]:
    figures_agree(frame)
    s = surfaces(frame, plan)
    code = EXIT[status]
    assert s["status"] == status, frame.verdict
    assert s["check_code"] == code and s["exporter"] == code
    assert str(s["check_first"]).startswith(f"INFERDECK {status.upper()} - ")
    assert s["snapshot"] == status.upper()
    return s


@pytest.mark.slow
def test_healthy_steady_load_is_ok_on_every_surface_from_the_first_poll():
    """No false alarm at any poll: the first minute (partial windows) included."""
    node = Node({"chat": STEADY})
    for frame in node.run(400):
        agree(frame, node.plan, "ok")
    e = node.frame.engines[0]
    assert e.generation_tokens_per_s and e.generation_tokens_per_s > 100


def test_saturation_is_critical_within_seconds_and_stays_so():
    """Queue growing, KV full, preemptions: CRITICAL within 30 s of the overload (the KV finding at
    once, the KV alert after its 15 s hold), on every surface."""
    node = Node({"chat": replace(STEADY, rate_rps=6.0, max_num_seqs=64, kv_capacity_tokens=20_000,
                                 prompt_tokens=900, output_tokens=400)})  # fmt: skip
    frames = node.run(90)
    first = next(i for i, f in enumerate(frames) if f.status == "critical")
    assert first < 30, [f.status for f in frames[:40]]
    for f in frames[first + 15 :]:
        agree(f, node.plan, "critical")
    rules = {v.rule for v in node.frame.verdict if v.severity == "critical"}
    assert "kv" in rules or "finding" in rules


@pytest.mark.slow
def test_a_latency_miss_with_no_errors_pages_through_the_burn():
    """Prefill too slow for a 1 s TTFT, no engine error, no queue: TTFT p95 ~1.5 s. The TTFT
    objective burns at 20x (every request late); once the 5m and 1h windows hold 5 minutes, fast burn is CRITICAL."""
    slow = replace(STEADY, rate_rps=0.4, prompt_tokens=900, prefill_tok_s=250.0)
    node = Node({"chat": slow})
    frames = node.run(330)
    burn = node.frame.services[0].slo.burn
    assert burn.windows["5m"].objective == "ttft_s"
    assert burn.windows["5m"].burn == pytest.approx(20.0, rel=0.05)
    assert all(f.status != "critical" for f in frames[:290])  # 5 minutes first: no page on less
    agree(node.frame, node.plan, "critical")
    assert any(v.rule == "burn" and v.source == "alert" for v in node.frame.verdict)


@pytest.mark.slow
def test_an_error_burst_burns_the_budget():
    """A fifth of requests failing: completion burns at 40x; CRITICAL once 5 minutes are held."""
    node = Node({"chat": replace(STEADY, error_share=0.2)})
    node.run(310)
    agree(node.frame, node.plan, "critical")
    burn = node.frame.services[0].slo.burn.windows["5m"]
    assert burn.objective == "completion" and burn.burn > 14.4


@pytest.mark.slow
def test_an_engine_killed_and_back():
    """Down: CRITICAL at the next poll (engine_down holds 0 s). Back: OK again, its outage told."""
    node = Node({"chat": STEADY})
    node.run(120)
    node.down.add("chat")
    agree(node.poll(), node.plan, "critical")
    node.run(30)
    agree(node.frame, node.plan, "critical")
    node.down.clear()
    node.models["chat"].restart()
    frames = node.run(40)
    agree(frames[-1], node.plan, "ok")
    assert node.frame.services[0].last_recovery_s is not None


def test_a_saturated_engine_killed_and_back_speaks_only_through_engine_down_until_fresh():
    """Down: its KV and queue alerts leave at once, cleared with why (Alertmanager's inhibition,
    done at the source); only 'engine down' speaks for it, on every surface. Back: nothing but its
    recovery for 10 s, then the overload that is still there is judged on fresh data again."""
    over = replace(STEADY, rate_rps=6.0, max_num_seqs=64, kv_capacity_tokens=20_000,
                   prompt_tokens=900, output_tokens=400)  # fmt: skip
    node = Node({"chat": over})
    node.run(60)
    assert {a.rule for a in node.frame.alerts if a.state == "active"} - {"engine_down"}
    node.down.add("chat")
    for i in range(30):
        f = node.poll()
        agree(f, node.plan, "critical")
        assert {a.rule for a in f.alerts if a.state == "active"} == {"engine_down"}, (i, f.alerts)
        assert {c.rule for c in f.verdict} == {"engine_down"}, (i, f.verdict)
        metrics = frame_metrics(f, node.plan, "t")
        active = [x for x in metrics.splitlines() if x.startswith("inferdeck_alerts_active{")]
        assert active and all('rule="engine_down"' in x for x in active), active
    inhibited = [a for a in node.frame.alerts if a.state == "cleared"]
    assert inhibited and all("(inhibited: engine chat down since" in a.message for a in inhibited)
    node.down.clear()
    node.models["chat"].restart()
    back = node.run(40)
    for i, f in enumerate(back[:9]):  # within 10 s of its return: only its recovery is said
        said = [(c.rule, c.severity) for c in f.verdict if c.subject == "chat"]
        assert set(said) <= {("engine_down", "info")}, (i, f.verdict)
        assert not [a for a in f.alerts if a.state == "active" and a.rule != "engine_down"]
        agree(f, node.plan, "ok")
        # nor to Prometheus: the KV and queue severities its rules read are absent (not judged)
        metrics = frame_metrics(f, node.plan, "t")
        judged = [x for x in metrics.splitlines() if x.startswith("inferdeck_headroom_severity{")]
        assert not [x for x in judged if 'rule="kv"' in x or 'rule="queue"' in x], (i, judged)
        kv = next(h for h in f.services[0].headroom if h.name == "kv")
        assert kv.state == "unknown" and kv.detail.startswith("not judged: engine chat back at")
    assert back[-1].status == "critical"  # still overloaded: said again, on fresh data
    agree(back[-1], node.plan, "critical")


def test_an_overload_that_drains_never_shows_a_sentence_that_contradicts_its_figures():
    """The load drops after an overload: the queue empties while its alert holds through its
    clear hysteresis. Before, that alert read 'N requests waiting for over 60 s' beside a queue of
    0; now a raised alert that no longer holds is dated ('until HH:MM:SSZ: …, clears at …') and
    every sentence of every poll states that poll's figures."""
    over = replace(STEADY, rate_rps=6.0, max_num_seqs=64, kv_capacity_tokens=20_000,
                   prompt_tokens=900, output_tokens=400)  # fmt: skip
    node = Node({"chat": over})
    for f in node.run(90):
        figures_agree(f)
    assert any(a.rule == "queue" and a.state == "active" for a in node.frame.alerts)
    node.models["chat"].spec.rate_rps = 0.2
    dated = 0
    for f in node.run(240):
        figures_agree(f)
        for a in f.alerts:
            if a.state == "active" and a.message.startswith("until "):
                dated += 1
                assert "(no longer holds; clears at " in a.message
        surfaces(f, node.plan)  # every surface renders what it says
    assert dated > 0  # the drain was seen through the clear hysteresis
    # drained: the queue and KV alerts cleared (the SLO burn it caused rightly stays)
    assert not [a for a in node.frame.alerts if a.state == "active" and a.rule in ("kv", "queue")]


def test_an_slo_missed_from_the_first_minute_is_a_warning_from_the_first_poll_that_shows_it():
    """6 % of requests failing against a 99.5 % completion target: a WARNING on every surface from
    the first poll with 100 requests behind it (missed by more than one), five minutes before the
    burn windows are covered (they page later); with fewer requests, nothing yet."""
    node = Node({"chat": replace(STEADY, rate_rps=10.0, error_share=0.06)})
    for f in node.run(120):
        c = f.services[0].slo.completion
        if c.observed is None or c.requests < 100 or (c.target - c.observed) * c.requests < 1:
            # too few requests, or one failure fewer would meet it: nothing said yet
            assert not [v for v in f.verdict if "SLO missed" in v.message]
            continue
        s = agree(f, node.plan, "warning")
        assert "SLO missed: completion" in str(s["check_first"])
        assert f"over {c.requests:,.0f} requests in " in str(s["check_first"])
        assert "burn not yet judged" in str(s["check_first"])
    assert any("SLO missed: completion" in v.message for v in node.frame.verdict)


def test_the_console_opened_mid_load_reads_the_rate_at_once_and_raises_nothing():
    """The engine served for an hour before the console's first scrape."""
    node = Node({"chat": replace(STEADY, warmup_s=3600.0)})
    frames = node.run(5)
    steady = 2.0 * 120  # arrivals x output tokens
    truth = node.models["chat"].generation_tokens  # since the engine began
    assert truth > 50 * steady  # it ran long before the console looked
    rates = [f.engines[0].generation_tokens_per_s for f in frames[1:]]
    assert all(r is not None and 0.5 * steady < r < 2 * steady for r in rates), rates
    for f in frames:
        agree(f, node.plan, "ok")


def test_one_mig_slice_overloaded_while_its_neighbours_idle():
    """Only the hot slice's engine and service are named; the verdict is CRITICAL for the node and
    the idle neighbours stay out of it."""
    hot = replace(STEADY, rate_rps=6.0, kv_capacity_tokens=20_000, prompt_tokens=900,
                  output_tokens=400)  # fmt: skip
    node = Node({"hot": hot, "calm": replace(STEADY, rate_rps=0.5)}, mig=True)
    node.run(60)
    agree(node.frame, node.plan, "critical")
    subjects = {v.subject for v in node.frame.verdict if v.severity == "critical"}
    assert subjects and all("calm" not in s for s in subjects), subjects


def test_check_gives_the_same_code_on_twenty_consecutive_polls_in_one_state():
    node = Node({"chat": replace(STEADY, rate_rps=6.0, kv_capacity_tokens=20_000,
                                 prompt_tokens=900, output_tokens=400)})  # fmt: skip
    node.run(60)
    codes = {EXIT[f.status] for f in node.run(20)}
    assert codes == {2}


def test_one_dp_rank_hot_is_named_and_warns():
    """Two DP engines behind one vLLM server, one taking most of the load: the imbalance is
    pending at once and a WARNING alert after its 30 s hold, naming the hot rank."""
    hot = replace(STEADY, rate_rps=6.0, kv_capacity_tokens=60_000, prompt_tokens=900,
                  output_tokens=400, seed=3)  # fmt: skip
    cold = replace(STEADY, rate_rps=0.2, seed=4)
    node = Node({"chat": hot}, ranks={"chat": [hot, cold]})
    frames = node.run(60)
    e = node.frame.engines[0]
    assert e.ranks is not None and len(e.ranks) == 2
    assert e.imbalance and "engine=0" in e.imbalance
    assert any(f.status == "warning" for f in frames[:20])
    concerns = [v for v in node.frame.verdict if v.rule == "imbalance"]
    assert concerns and concerns[0].source == "alert" and "engine=0" in concerns[0].message
    assert node.frame.status in ("warning", "critical")
    agree(node.frame, node.plan, node.frame.status)


def test_a_power_cap_clock_event_warns_on_every_surface():
    """The GPU's enforced limit below what its load draws: the power-cap clock event is a
    finding (WARNING) at once, named for the GPU."""
    node = Node({"chat": STEADY}, power_limit_w=200.0)
    node.run(5)
    agree(node.frame, node.plan, "warning")
    assert any(v.subject == "GPU 0" and "power cap" in v.message for v in node.frame.verdict)


def _kv_eta_said(frame: Frame, pages: dict[str, object]) -> dict[str, object]:
    """The time to a full KV pool as each surface says it of engine chat: the frame's estimate,
    the exporter's gauge, snapshot.md's capacity row (``pages``: the surfaces as ``agree`` read
    them), the service's KV headroom and the conditions that speak of it."""
    cap = frame.engines[0].capacity if frame.engines[0].up else None
    gauge = [
        float(x.split()[-1])
        for x in str(pages["exporter_page"]).splitlines()
        if x.startswith('inferdeck_kv_full_in_seconds{engine="chat"}')
    ]
    md = str(pages["snapshot_md"]).partition("## Capacity to SLO breach")[2].split("\n## ")[0]
    row = next((x for x in md.splitlines() if x.startswith("| chat |")), None)
    kv = next((h for h in frame.services[0].headroom if h.name == "kv"), None)
    return {
        "estimate": cap.kv_full_in_s if cap is not None else None,
        "exporter": gauge[0] if gauge else None,
        "snapshot": row.split(" | ")[2] if row else None,
        "headroom": kv.exhausted_in_s if kv is not None else None,
        "warned": [
            c.message
            for c in frame.verdict
            if c.subject in ("chat", frame.services[0].name)
            and ("KV cache full" in c.message)
            and not c.message.startswith("until ")
        ],
    }


# requests 2,000 tokens long (~43 s each) toward a 4M-token pool: it takes minutes to fill
LONG = TrafficSpec(itl_base_s=0.018, itl_per_seq_s=0.000005, max_num_seqs=100_000,
                   kv_capacity_tokens=4_000_000, prompt_tokens=300, output_tokens=2000,
                   rate_rps=10.0, error_share=0.0, abort_share=0.0, seed=7)  # fmt: skip


def _warmed(spec: TrafficSpec, seconds: int = 600) -> Node:
    """A node whose engine has run ``seconds`` of steady load before the console looks (the
    engine's own clock moves; nothing is polled)."""
    node = Node({"chat": spec})
    for _ in range(seconds):
        node.t += 1.0
        node.models["chat"].advance()
    return node


def _kv_eta_agrees(f: Frame, plan: Plan, s: int) -> dict[str, object]:
    """The verdict agrees on every surface, and each surface states the estimate's time to a
    full pool or none (the service's KV headroom too; no condition speaks of one unsaid); an
    engine just back is not judged: its forecasts wait, on every surface, and snapshot.md says
    why."""
    got = _kv_eta_said(f, agree(f, plan, f.status))
    eta, back = got["estimate"], f.engines[0].not_judged
    assert got["exporter"] == (eta if back is None else None), (s, got)
    if f.engines[0].up and f.engines[0].capacity is not None:
        text = "no rising trend" if eta is None else eta_text(eta, "")
        assert got["snapshot"] == (text if back is None else f"not judged: {back}"), (s, got)
    if got["headroom"] is not None:
        assert got["headroom"] == eta, (s, got)
    if eta is None:
        assert got["warned"] == [], (s, got)
    return got


def _ramped(
    node: Node, seconds: int, down: range, restart: bool
) -> Iterator[tuple[int, Frame, dict[str, object]]]:
    """Polls at 1 s while the engine's arrivals ramp 0.3 % a second, each poll checked on
    every surface (``_kv_eta_agrees``); the engine answers nothing over ``down`` and comes back
    at its end restarted (its pool empty) or not (a hang: its pool held)."""
    for s in range(seconds):
        node.models["chat"].spec.rate_rps = 10.0 * (1 + 0.003 * s)
        if s == down.start:
            node.down.add("chat")
        if s == down.stop:
            node.down.clear()
            if restart:
                node.models["chat"].restart()
        f = node.poll()
        yield s, f, _kv_eta_agrees(f, node.plan, s)


@pytest.mark.slow
def test_an_engine_restarted_mid_ramp_forecasts_nothing_until_refilled_on_every_surface():
    """An engine up and steady for ten minutes before the console looks (requests 2,000 tokens
    long toward a 4M-token pool: it takes minutes to refill), then arrivals ramping 0.3 % a
    second; down for 5 s at t = 400 and back with an empty pool. Before: KV full in ~6-8 min,
    warned on every surface (the exhaustion alert and the finding). Down: CRITICAL, no
    forecast. Back: the refill is no trend of the load, so for five minutes no surface says the
    pool fills (before the restart fix its refill read "full in ~2 min"); later the forecast is
    back and, while more than a minute is left, leaves at least a third of the time there was.
    At every poll the verdict agrees on every surface and each surface states the estimate's
    figure or none (an engine just back: none, and why)."""
    node = _warmed(LONG)
    said: list[tuple[int, float | None]] = []
    for s, f, got in _ramped(node, 1500, down=range(400, 405), restart=True):
        eta = got["estimate"]
        if 340 <= s < 400:  # warned on every surface: each states the estimate (above)
            assert eta is not None and eta < 900 and got["headroom"] == eta, (s, got)
            assert len(got["warned"]) == 2 and f.status == "warning", (s, got)
        if 400 <= s < 405:
            assert f.status == "critical" and eta is None, (s, got)
        said.append((s, eta))
        if node.models["chat"].kv_used_tokens() >= 0.99 * LONG.kv_capacity_tokens:
            break
    full = said[-1][0]
    assert 800 < full < 950, full
    assert all(eta is None for s, eta in said if 400 <= s < 705), said
    assert any(eta is not None for s, eta in said if 705 <= s < full - 60), said
    assert all(eta is None or eta >= (full - s) / 3 for s, eta in said if 405 <= s < full - 60), (
        said
    )


@pytest.mark.slow
def test_an_engine_hung_mid_ramp_is_forecast_again_as_soon_as_it_is_judged():
    """The ramp of the restart scenario, but the engine hangs for 20 s at t = 350 (answers
    nothing) and comes back without restarting: its pool held. Down: CRITICAL, no forecast.
    Back: not judged for 10 s (no surface forecasts), then the forecast goes on at once where
    it left off (its readings are the same process's: nothing to refill), on every surface."""
    node = _warmed(LONG)
    said: dict[int, float | None] = {}
    for s, f, got in _ramped(node, 400, down=range(350, 370), restart=False):
        eta = said[s] = got["estimate"]
        back = f.engines[0].not_judged
        if 330 <= s < 350 or s >= 380:
            assert eta is not None and got["headroom"] == eta, (s, got)
            assert len(got["warned"]) == 2 and f.status == "warning", (s, got)
        if 350 <= s < 370:
            assert f.status == "critical" and eta is None, (s, got)
        if 370 <= s < 380:
            assert back is not None and got["warned"] == [] and got["exporter"] is None, (s, got)
    before, after = said[349], said[380]
    assert before is not None and after is not None
    assert after == pytest.approx(before - 31, rel=0.25), (before, after)


@pytest.mark.slow
def test_an_engine_started_with_the_console_fills_its_pool_without_a_warning():
    """Steady arrivals on an engine the console sees from its start: its pool fills from empty
    for about four minutes (requests live ~43 s) and settles at ~22 %. The fill is no trend of
    the load: at every poll every surface is OK and none says the pool fills (read as a trend,
    it was "KV cache full in ~7 min", WARNING, for two minutes)."""
    node = Node({"chat": LONG})
    for s in range(600):
        f = node.poll()
        got = _kv_eta_said(f, agree(f, node.plan, "ok"))
        assert got["estimate"] is got["exporter"] is got["headroom"] is None, (s, got)
        assert got["warned"] == [] and got["snapshot"] in (None, "no rising trend"), (s, got)
    assert 0.15 < f.engines[0].kv_cache_usage < 0.3


async def test_the_dashboard_shows_the_verdict():
    """The pilot: the alerts pane names the critical finding or alert, and the header says
    CRITICAL, on a frame of the saturation scenario."""
    from screens.app import InferdeckApp
    from tests.frames import StaticSource

    node = Node({"chat": replace(STEADY, rate_rps=6.0, kv_capacity_tokens=20_000,
                                 prompt_tokens=900, output_tokens=400)})  # fmt: skip
    node.run(60)
    app = InferdeckApp(StaticSource(node.frame))
    async with app.run_test(size=(100, 30)) as pilot:
        pane = app.query_one("#alerts")
        await until(pilot, lambda: "CRITICAL" in str(pane.border_title))
        assert "CRITICAL" in str(pane.border_title)
        lines = str(app.query_one("#alert-lines").render())
        assert "CRIT" in lines and "chat" in lines
        assert "CRITICAL" in str(app.query_one("#status").render())


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
def test_a_wall_clock_step_leaves_windows_and_holds_alone_and_is_stated(tmp_path, step_s):
    """The wall clock steps back an hour mid-run (NTP, a VM resumed): the poller's times keep
    counting on the steady clock, an engine down is raised after its 10 s hold as if nothing
    happened, coverage never goes back, and the step is said, on the screen and in the
    recording (a replay states it as the console did)."""
    import asyncio
    import socket

    from console.figures.derive import Deriver
    from console.read.live import LiveSource
    from console.read.poller import EngineTarget, SteadyClock
    from console.read.recording import Recorder, read

    with socket.socket() as s:  # a port nothing listens on: the engine is down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    steady, jump = [100.0], [0.0]
    clock = SteadyClock(wall=lambda: T0 + steady[0] + jump[0], steady=lambda: steady[0])
    plan = Plan.model_validate({"alerts": {"engine_down": {"for_s": 10}}})
    live = LiveSource.reading(
        [EngineTarget(url=f"http://127.0.0.1:{port}/metrics", name="chat")],
        None,
        plan=plan,
        clock=clock,
    )
    live.recorder = Recorder(tmp_path / "rec.jsonl.gz", "n", {"window_s": 60.0})
    hold = 10
    frames = []

    async def run() -> None:
        for i in range(int(hold) + 8):
            if i == 4:
                jump[0] = step_s
            frames.append(await live.poll())
            steady[0] += 1.0
        await live.aclose()

    asyncio.run(run())
    times = [f.taken_at.timestamp() for f in frames]
    assert all(b - a == pytest.approx(1.0) for a, b in zip(times, times[1:], strict=False))
    covered = [f.window_covered_s for f in frames]
    assert covered == sorted(covered) and min(covered) >= 0
    raised = next(
        i
        for i, f in enumerate(frames)
        if any(a.rule == "engine_down" and a.state == "active" for a in f.alerts)
    )
    assert raised == pytest.approx(hold, abs=1), raised
    said = [c.message for c in frames[-1].verdict if c.rule == "clock"]
    assert said and said[0].startswith(f"the wall clock stepped {step_s:+,.0f} s")
    assert not [c for c in frames[2].verdict if c.rule == "clock"]
    _, samples = read(tmp_path / "rec.jsonl.gz")
    assert [s.wall_offset_s for s in samples] == [0.0] * 4 + [step_s] * (len(frames) - 4)
    replayed = Deriver(plan=plan).frame(samples[-1])
    assert [c.message for c in replayed.verdict if c.rule == "clock"] == said
    # the timeline runs on the steady clock too: in order, the outage from the first poll, the
    # step one entry, and the recording's timeline lines give it back whole
    from console.figures.timeline import Replayed
    from console.read.recording import Recording

    tl = frames[-1].timeline
    starts = [e.start for e in tl.events]
    assert starts == sorted(starts) and min(starts) >= frames[0].taken_at
    assert next(e for e in tl.events if e.kind == "engine-down").start == frames[0].taken_at
    assert len([e for e in tl.events if "wall clock stepped" in e.text]) == 1
    rec = Recording(tmp_path / "rec.jsonl.gz")
    rec.done.wait()
    assert Replayed(rec.timeline_log).at(rec.times[-1]) == tl


def _vllm_overload_page(running: float, kv: float, capacity: float, deferred: float = 0.0) -> str:
    """vLLM 0.32's own page (captured live), its queue and KV gauges set as one overloaded
    engine's scrape shows them."""
    text = (FIXTURES / "vllm-live.prom").read_text(encoding="utf-8")
    text = re.sub(r'num_gpu_blocks="\d+"', 'num_gpu_blocks="20"', text)  # 20 blocks of 16 tokens
    for series, value in (
        ("vllm:num_requests_running", running),
        ("vllm:num_requests_waiting", capacity + deferred),
        ("vllm:kv_cache_usage_perc", kv),
    ):
        text = re.sub(
            rf"^({re.escape(series)}\{{[^}}]*\}}) .*$", rf"\g<1> {value}", text, flags=re.M
        )
    for reason, value in (("capacity", capacity), ("deferred", deferred)):
        text = re.sub(
            rf'^(vllm:num_requests_waiting_by_reason\{{[^}}]*reason="{reason}"\}}) .*$',
            rf"\g<1> {value}",
            text,
            flags=re.M,
        )
    return text


def _scripted(plan: Plan, pages: list[str], t0: float = T0) -> list[Frame]:
    deriver = Deriver(plan, 60.0, "node")
    frames = []
    for i, text in enumerate(pages):
        t = t0 + i
        page = parse(text, keep=needed_families().__contains__)
        sample = EngineSample(label="chat", url="http://127.0.0.1:1/metrics", t=t, up=True,
                              kind="vllm", extract=extract(page, VLLM, t))  # fmt: skip
        frames.append(deriver.frame(Sample(t=t, source=GpuSource(kind="none"), gpus=[],
                                           engines=[sample])))  # fmt: skip
    return frames


def test_a_tgi_engine_out_of_token_budget_is_critical_by_its_kv_on_every_surface():
    """TGI exports no KV use: its router admits requests while the running batch's token budget
    fits its total. The same overload as above on TGI's page: its KV (the budget's share) is
    read at every poll, and the KV rule is among the critical ones on every surface within 30 s
    (before, a TGI engine had no KV reading, headroom or alert at all)."""
    node = Node({"chat": replace(STEADY, rate_rps=6.0, max_num_seqs=64, kv_capacity_tokens=20_000,
                                 prompt_tokens=900, output_tokens=400)}, kind="tgi")  # fmt: skip
    frames = node.run(90)
    assert all(f.engines[0].kv_cache_usage is not None for f in frames[1:])
    first = next(i for i, f in enumerate(frames) if f.status == "critical")
    assert first < 30, [f.status for f in frames[:40]]
    for f in frames[first + 15 :]:
        agree(f, node.plan, "critical")
        metrics = frame_metrics(f, node.plan, "t")
        assert 'inferdeck_headroom_severity{service="chat",rule="kv"} 2.0\n' in metrics
    assert "kv" in {v.rule for v in node.frame.verdict if v.severity == "critical"}


@pytest.mark.slow
def test_kv_capacity_saturation_with_a_swinging_gauge_is_critical_from_the_first_poll_and_holds():
    """A real vLLM in overload (20 KV blocks): one long request fits at a time, so the KV gauge
    swings 0 <-> 74 % as it comes and goes while 7 requests wait for capacity. Never 90 % full and
    no preemption, yet the engine says what it waits for: CRITICAL on every surface from the first
    poll, held without a flap (the exporter's KV severity 2 at every poll, the KV alert raised once
    and never cleared), and no knob offering more sequences at once."""
    plan = _plan(["chat"])
    pages = [
        _vllm_overload_page(
            running=1 if i % 2 == 0 else 0, kv=0.74 if i % 2 == 0 else 0.0, capacity=7, deferred=1
        )  # fmt: skip
        for i in range(90)
    ]
    raised = []
    for i, f in enumerate(_scripted(plan, pages)):
        s = agree(f, plan, "critical")
        assert f.engines[0].requests_waiting_kv == 7, (i, f.engines[0])  # 'deferred' is not KV
        assert "7 requests waiting for the KV cache" in str(s["check_first"]), (i, s)
        metrics = frame_metrics(f, plan, "t")
        assert 'inferdeck_headroom_severity{service="chat",rule="kv"} 2.0\n' in metrics, i
        said = " ".join(
            [c.message for c in f.verdict] + [x.knob for x in findings(f)] + check_lines(f, plan)
        )
        assert "--max-num-seqs" not in said and "has room" not in said, (i, said)
        kv = [a for a in f.alerts if a.rule == "kv"]
        if i >= 15:  # the KV rule's 15 s hold
            assert [a.state for a in kv] == ["active"], (i, kv)
            raised.append(kv[0].since)
    assert len(set(raised)) == 1  # one alert, raised once: no flap


def test_requests_waiting_for_a_batch_slot_are_not_kv_saturation():
    """The same queue with the KV cache at 30 % and 48 sequences running: they wait for a batch
    slot (--max-num-seqs), not for KV; the KV condition stays quiet and the queue warns."""
    plan = _plan(["chat"])
    frames = _scripted(plan, [_vllm_overload_page(running=48, kv=0.3, capacity=7)] * 70)
    for f in frames:
        assert f.engines[0].requests_waiting_kv == 0
        kv = next(h for h in f.services[0].headroom if h.name == "kv")
        assert kv.state != "critical", kv
    assert "requests waiting" in " ".join(a.message for a in frames[-1].alerts if a.rule == "queue")
