"""The fleet view against a real Prometheus (Debian's package) scraping three simulated nodes,
each a simulated DCGM exporter and simulated engines; figures compared with scraping directly."""

import asyncio
import io
import json
import shutil
import socket
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from console.fleet.prom import PromClient, PromError
from console.fleet.promql import signal_query
from console.fleet.source import FleetSource
from console.read.live import LiveSource
from console.read.poller import EngineTarget
from console.sim.dcgm import start_dcgm
from console.sim.engine import TrafficSpec, start_engine
from console.sim.nvml import DeviceLoad, SimNvml
from tests.test_jsondocs import valid
from tests.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_colon_and_underscore_names_are_both_queried():
    q = signal_query("requests_running", "gauge", "60s")
    assert "vllm:num_requests_running" in q and "vllm_num_requests_running" in q and " or " in q
    assert 'nv_trt_llm_request_metrics{request_type="active"}' in q
    q95 = signal_query("ttft", "q0.95", "60s")
    assert (
        "histogram_quantile(0.95, sum by (instance, job, node, le) (rate(vllm:time_to_first_token_seconds_bucket[60s])))"
        in q95
    )
    assert "nv_inference_first_response_histogram_ms_bucket[60s]))) * 0.001" in q95


started = {"t": 0.0}


def settle(seconds: float) -> None:
    """Let Prometheus gather this many seconds of scrapes (alone, a test could start too early)."""
    time.sleep(max(0.0, started["t"] + seconds - time.time()))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    nodes = []
    layouts = {
        "node-a": [
            ("h100-80gb", None),
            ("h100-80gb", [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2)]),
        ],
        "node-b": [("rtx-pro-6000-se", [("2g.48gb", 0), ("1g.24gb", 6), ("1g.24gb", 9)])],
        "node-c": [("l40s", None), ("l40s", None)],
    }
    kinds = {
        "node-a": ["vllm", "vllm", "sglang"],
        "node-b": ["vllm", "sglang"],
        "node-c": ["vllm", "vllm"],
    }
    servers = []
    scrape = []
    for n, (node, gpus) in enumerate(layouts.items()):
        sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30))
        for model, mig in gpus:
            sim.add_gpu(model, mig=mig)
        dcgm = start_dcgm(sim, node)
        servers.append(dcgm)
        engines = [
            start_engine(
                k, TrafficSpec(rate_rps=2.0, output_tokens=600, seed=10 * n + i, warmup_s=60)
            )
            for i, k in enumerate(kinds[node])
        ]
        servers += [e.server for e in engines]
        nodes.append((node, dcgm, engines))
        scrape.append(
            f"      - targets: ['127.0.0.1:{dcgm.port}']\n        labels: {{node: {node}}}"
        )
    eng_targets = "\n".join(
        f"      - targets: ['127.0.0.1:{e.server.port}']\n        labels: {{node: {node}}}"
        for node, _, engines in nodes
        for e in engines
    )
    dcgm_targets = "\n".join(scrape)
    cfg = tmp_path_factory.mktemp("prom") / "prometheus.yml"
    cfg.write_text(
        textwrap.dedent("""\
        global:
          scrape_interval: 1s
          evaluation_interval: 1s
        scrape_configs:
          - job_name: dcgm
            static_configs:
        {dcgm}
          - job_name: engines
            static_configs:
        {engines}
        """).format(
            dcgm=textwrap.indent(dcgm_targets, "  "), engines=textwrap.indent(eng_targets, "  ")
        )
    )
    port = free_port()
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={cfg.parent / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    if not wait_ready(url):
        prom.kill()
        pytest.fail(f"{PROMETHEUS} did not become ready")
    started["t"] = time.time()
    yield url, nodes, prom
    prom.kill()
    for s in servers:
        s.stop()


def test_fleet_shows_three_nodes_with_the_direct_figures(fleet):
    url, nodes, _ = fleet
    targets = [
        EngineTarget(url=e.url, name=f"127.0.0.1:{e.server.port}")
        for _, _, engines in nodes
        for e in engines
    ]

    async def go():
        direct = LiveSource.reading(targets, None, window_s=15)
        source = FleetSource(PromClient(url), window_s=15)
        try:
            for _ in range(18):  # ~18 s: Prometheus fills its 15 s windows; the poller its own
                frame = await direct.poll()
                await asyncio.sleep(1.0)
            frame = await direct.poll()
            state = await source.poll()
        finally:
            await direct.aclose()
            await source.aclose()
        return frame, state

    frame, state = asyncio.run(go())
    assert sorted(state.nodes) == ["node-a", "node-b", "node-c"], state.errors
    assert state.errors == {}
    a = state.nodes["node-a"]
    assert (
        len(a.gpus) == 2
        and a.gpus[1].mig
        and [d.profile for d in a.gpus[1].mig.devices] == ["3g.40gb", "2g.20gb", "1g.10gb"]
        or sorted(d.profile for d in a.gpus[1].mig.devices) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    )
    assert a.gpus[0].utilization_gpu_pct == 60.0 and a.gpus[1].utilization_gpu_pct is None
    # a MIG board's memory: DCGM exports its instances' only; the total is the board's (the
    # catalogue's H100 80GB), not the instances' sum, and the used figure is theirs
    from console.gpucatalog import catalog

    h100 = catalog()["h100-80gb"]
    assert a.gpus[1].name == h100.name
    assert a.gpus[1].memory_total_bytes == h100.memory_total_mib * 2**20
    used = sum(d.memory_used_bytes or 0 for d in a.gpus[1].mig.devices)
    assert a.gpus[1].memory_used_bytes == pytest.approx(used, abs=2**20 * 3)
    assert a.gpus[1].memory_total_bytes > sum(
        d.memory_total_bytes or 0 for d in a.gpus[1].mig.devices
    )
    assert (
        len(state.nodes["node-b"].gpus[0].mig.devices) == 3 and len(state.nodes["node-c"].gpus) == 2
    )
    direct = {e.name: e for e in frame.engines}
    seen = 0
    for node, _, engines in nodes:
        fleet_engines = {e.name: e for e in state.nodes[node].engines}
        assert len(fleet_engines) == len(engines)
        for name, fe in fleet_engines.items():
            de = direct[name]
            assert fe.up and fe.kind == de.kind
            # gauges: Prometheus' last scrape and the direct poll are up to a second apart
            assert abs(fe.requests_running - de.requests_running) <= max(
                5, 0.2 * de.requests_running
            ), name
            assert fe.requests_waiting == de.requests_waiting == 0
            assert abs(fe.kv_cache_usage - de.kv_cache_usage) <= 0.05, name
            p_f, p_d = fe.ttft_s.p95, de.ttft_s.p95
            assert p_f is not None and p_d is not None
            bounds = sorted(
                {
                    0.0,
                    *[
                        b
                        for b in (
                            0.001,
                            0.005,
                            0.01,
                            0.02,
                            0.04,
                            0.06,
                            0.08,
                            0.1,
                            0.25,
                            0.5,
                            0.75,
                            1.0,
                            2.5,
                            5.0,
                            0.2,
                            0.4,
                            0.6,
                            0.8,
                            2.0,
                            4.0,
                        )
                    ],
                }
            )
            within_pct = abs(p_f - p_d) <= 0.05 * p_d
            same_or_next_bucket = sum(1 for b in bounds if min(p_f, p_d) < b < max(p_f, p_d)) <= 1
            assert within_pct or same_or_next_bucket, (name, p_f, p_d)
            # TPOT p95 and completion, both held in Prometheus: shown, close to the direct figures
            assert fe.tpot_s is not None and de.tpot_s is not None, name
            assert fe.tpot_s.p95 == pytest.approx(de.tpot_s.p95, rel=0.25), name
            assert de.success_rate is not None and fe.success_rate is not None, name
            assert abs(fe.success_rate - de.success_rate) <= 0.02, name
            seen += 1
    assert seen == 7
    for node in ("node-a", "node-b", "node-c"):  # the SLO column: share of TTFT within 1 s
        share = state.summary[node].ttft_within_target
        assert share is not None and 0.5 < share <= 1.0


def test_a_fleet_past_the_series_cap_keeps_its_worst_and_reads_only_the_labels_it_uses(
    fleet, monkeypatch
):
    """A query answering more series than the client keeps used to be cut after the first
    MAX_SERIES in Prometheus' order (or, past the byte cap, not read at all), and every DCGM
    series came whole with the exporter's pod, device and PCI labels. Now each per-target figure
    asks the server for its k worst (topk, or bottomk where low is worse), the fleet's target
    count is asked too and a cut is said, and DCGM answers carry only the labels read."""
    import console.fleet.source as fleet_source
    from console.fleet.promql import DCGM_LABELS

    url, _, _ = fleet
    settle(18)
    at = time.time() - 2  # both reads of the same instant
    answers: list[list] = []

    async def go(cap: int):
        monkeypatch.setattr(fleet_source, "MAX_SERIES", cap)
        client = PromClient(url)
        query = client.query

        async def keep(q, when=None):
            rows = await query(q, when)
            if "DCGM_FI_DEV_FB_USED" in q and "last_over_time" not in q:
                answers.append(rows)
            return rows

        client.query = keep
        source = FleetSource(client, window_s=15)
        source.at = at
        try:
            return await source.poll()
        finally:
            await source.aclose()

    whole, cut = asyncio.run(go(10_000)), asyncio.run(go(2))
    assert not any("targets" in w for w in whole.warnings), whole.warnings
    assert any("the fleet has 10 targets" in w and "2 worst" in w for w in cut.warnings), (
        cut.warnings
    )

    def figures(state, attr):
        return {
            e.name: getattr(e, attr)
            for f in state.nodes.values()
            for e in f.engines
            if getattr(e, attr) is not None
        }

    assert sum(len(f.engines) for f in cut.nodes.values()) == 7  # every engine keeps its row
    for attr, highest in (("kv_cache_usage", True), ("success_rate", False)):
        every, kept = figures(whole, attr), figures(cut, attr)
        assert len(every) == 7 and len(kept) == 2, (attr, every, kept)
        ranked = sorted(every.values(), reverse=highest)
        assert sorted(kept.values(), reverse=highest) == ranked[:2], (attr, every, kept)
    allowed = {x.strip() for x in DCGM_LABELS.split(",")}
    assert answers and all(set(labels) <= allowed for rows in answers for labels, _ in rows)


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )


def test_headless_fleet_snapshot_and_check(fleet, tmp_path):
    from console.fleet.state import node_row

    url, nodes, _ = fleet
    settle(20)
    out = _cli("snapshot", "--prometheus", url, "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    valid(doc, "fleet-snapshot")

    async def screen_rows():
        source = FleetSource(PromClient(url), window_s=60)
        try:
            st = await source.poll()
        finally:
            await source.aclose()
        return {n: node_row(n, f, st.summary.get(n)) for n, f in st.nodes.items()}

    rows = asyncio.run(screen_rows())  # what the fleet screen shows now
    assert [r["node"] for r in doc["nodes"]] == ["node-a", "node-b", "node-c"]
    for r in doc["nodes"]:
        mine = rows[r["node"]]
        for key in ("gpus", "mig", "engines", "worst", "alerts"):
            assert r[key] == mine[key], (r["node"], key)
        assert r["ttft"] == pytest.approx(mine["ttft"], rel=0.25)
        assert r["tps"] == pytest.approx(mine["tps"], rel=0.25)
    assert [(r["gpus"], r["mig"], r["engines"]) for r in doc["nodes"]] == [
        (2, 3, "3/3"),
        (1, 3, "2/2"),
        (2, 0, "2/2"),
    ]
    md = _cli("snapshot", "--prometheus", url, "--format", "md")
    assert md.returncode == 0 and "| node-b | 1 | 3 | 2/2 |" in md.stdout
    ok = _cli("check", "--prometheus", url)
    assert ok.returncode == 0 and ok.stdout.startswith("INFERDECK OK - ") and "3 nodes" in ok.stdout
    ok_json = json.loads(_cli("check", "--prometheus", url, "--format", "json").stdout)
    valid(ok_json, "fleet-check")
    assert ok_json["status"] == "ok" and ok_json["exit_code"] == 0 and ok_json["nodes"] == 3
    assert ok_json["first_line"] == ok.stdout.splitlines()[0]
    # node-b's plan pins a service to a MIG device it does not have: critical, exit 2
    node_b_engine = f"127.0.0.1:{nodes[1][2][0].server.port}"
    plan = tmp_path / "node-b.yaml"
    plan.write_text(
        textwrap.dedent(f"""\
        node: {{name: node-b}}
        services:
          - {{name: svc, engine: "{node_b_engine}", device: "0:2g.48gb@6", model: llama-3.1-8b,
              weight_bits: 16, tokens_per_sequence: 4096, concurrent_sequences: 4}}
        """)
    )
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(f"discover: false\nnode_plans: {{node-b: {plan}}}\n")
    bad = _cli("check", "--prometheus", url, "--config", str(cfg))
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "CRITICAL node-b svc: planned device 0:2g.48gb@6 is not on this node" in bad.stdout
    bad_json = _cli("check", "--prometheus", url, "--config", str(cfg), "--format", "json")
    doc = json.loads(bad_json.stdout)
    valid(doc, "fleet-check")
    assert bad_json.returncode == doc["exit_code"] == 2 and doc["status"] == "critical"
    # the same first line (the alert's since is each run's own)
    assert doc["first_line"].split(", since")[0] == bad.stdout.splitlines()[0].split(", since")[0]
    assert {"severity": "critical", "node": "node-b", "subject": "svc"}.items() <= (
        doc["details"][0].items()
    )
    assert len(doc["details"]) == len(bad.stdout.splitlines()) - 1 - len(doc["notes"])
    gone = _cli("check", "--prometheus", "http://127.0.0.1:9")
    assert gone.returncode == 3 and gone.stdout.startswith("INFERDECK UNKNOWN - Prometheus at")
    gone_json = _cli("check", "--prometheus", "http://127.0.0.1:9", "--format", "json")
    doc = json.loads(gone_json.stdout)
    valid(doc, "fleet-check")
    assert gone_json.returncode == doc["exit_code"] == 3 and doc["status"] == "unknown"
    assert doc["first_line"] == gone.stdout.strip()
    assert "Traceback" not in gone.stderr


def test_prometheus_down_keeps_the_last_figures_with_their_age(fleet):
    from console.fleet.state import fleet_timeline

    url, nodes, prom = fleet
    settle(18)

    async def go():
        source = FleetSource(PromClient(url, timeout_s=1.0), window_s=15)
        first = await source.poll()
        nodes_before = dict(first.nodes)
        ok_at = first.last_ok
        prom.send_signal(19)  # SIGSTOP: Prometheus hangs (slow / down)
        try:
            st = await source.poll()
            second = (dict(st.errors), dict(st.nodes), st.last_ok, fleet_timeline(st))
        finally:
            prom.send_signal(18)  # SIGCONT
        try:
            back = await source.poll()
        finally:
            await source.aclose()
        return nodes_before, ok_at, second, fleet_timeline(back)

    before, ok_at, (errors, nodes_then, last_ok, said), back = asyncio.run(go())
    assert errors and all("no answer within 1 s" in e for e in errors.values())
    assert nodes_then == before and last_ok == ok_at  # last values stay, their age grows
    # on the fleet's timeline: from the refresh that got no answer to the one that did
    down = [e for e in said.events if e.kind == "backend-down"]
    assert len(down) == 1 and down[0].end is None and down[0].subject.startswith("Prometheus")
    assert down[0].text.startswith("not answering") and url in down[0].text
    assert "no answer within 1 s" in down[0].text
    ended = [e for e in back.events if e.kind == "backend-down"]
    assert len(ended) == 1 and ended[0].end is not None and ended[0].end > ended[0].start


async def test_fleet_screen_rows_sort_filter_and_drill_in(fleet):
    from rich.console import Console
    from textual.widgets import Static

    from screens.fleet import FleetApp, FleetEngineScreen, FleetTimelineScreen, NodeScreen
    from screens.widgets import KeyedTable

    url, nodes, prom = fleet
    settle(18)
    app = FleetApp(FleetSource(PromClient(url, timeout_s=1.0), window_s=15), interval_s=0.5)
    async with app.run_test(size=(120, 36)) as pilot:
        table = app.query_one("#fleet-table", KeyedTable)
        await until(pilot, lambda: table.row_count == 3)
        assert [str(r.value) for r in table.rows] == ["node:node-a", "node:node-b", "node:node-c"]
        assert str(table.get_cell("node:node-a", "engines")) == "3/3"
        assert str(table.get_cell("node:node-b", "mig")) == "3"
        assert str(table.get_cell("node:node-a", "slo")).endswith("%")
        assert "window 15s" in str(app.query_one("#status").render())
        await pilot.press("question_mark")  # the fleet's own keys
        await until(pilot, lambda: app.screen is not app.screen_stack[0])
        assert "every query 5 minutes back" in app.screen.text
        await pilot.press("escape")
        await pilot.resize_terminal(80, 24)  # the optional columns go first, said so
        await until(pilot, lambda: "3 columns hidden" in str(app.query_one("#status").render()))
        assert [str(k.value) for k in table.columns][-1] == "alerts"
        await pilot.resize_terminal(120, 36)
        await until(pilot, lambda: "hidden" not in str(app.query_one("#status").render()))
        await pilot.press("o")  # sort by alerts, then ttft
        assert app.sort == "alerts"
        await pilot.press("slash", *"node-c")
        await until(pilot, lambda: [str(r.value) for r in table.rows] == ["node:node-c"])
        await pilot.press("escape")
        await until(pilot, lambda: table.row_count == 3)
        table.focus()
        table.move_cursor(row=[str(r.value) for r in table.rows].index("node:node-b"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, NodeScreen))
        await until(pilot, lambda: app.screen.query_one("#engine-table", KeyedTable).row_count == 2)
        engines = app.screen.query_one("#engine-table", KeyedTable)
        assert engines.row_count == 2
        assert "inferdeck mig show" in str(app.screen.query_one("#node-note").render())
        engines.focus()  # enter on an engine row opens what Prometheus holds of it
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, FleetEngineScreen))
        await until(
            pilot, lambda: "TTFT p50" in str(app.screen.query_one("#fleet-engine").render())
        )
        shown = str(app.screen.query_one("#fleet-engine").render())
        assert "on node-b" in shown and "tok/s over 15s" in shown and "TTFT p50" in shown
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, NodeScreen))
        prom.send_signal(19)
        try:
            await pilot.press("escape")
            # the poll in flight waits its 1 s timeout, the next fails with it: said within
            # seconds (the deadline only bounds a loaded machine)
            deadline = time.time() + 15
            while "last good answer" not in str(app.query_one("#status").render()):
                assert time.time() < deadline, str(app.query_one("#status").render())
                await pilot.pause()
            assert "no answer within 1 s" in str(app.query_one("#fleet-errors").render())
            assert table.row_count == 3  # the last values stay
            await pilot.press("t")  # the fleet's timeline says so, and follows the refreshes
            while not isinstance(app.screen, FleetTimelineScreen):
                assert time.time() < deadline + 15, app.screen
                await pilot.pause()
            out = Console(width=160, record=True, file=io.StringIO())
            out.print(app.screen.query_one("#timeline-body", Static).content)
            body = out.export_text()
            assert "Timeline since" in body and "not answering" in body, body
            await pilot.press("t")
            assert not isinstance(app.screen, FleetTimelineScreen)
        finally:
            prom.send_signal(18)


def test_scrubbing_history_and_a_node_plan(fleet):
    from console.figures.plan import Node, Plan, Service

    url, nodes, _ = fleet
    settle(25)
    node_b_engine = f"127.0.0.1:{nodes[1][2][0].server.port}"
    # a plan for node-b whose service is pinned to a MIG device that does not exist there
    plan = Plan(
        node=Node(name="node-b"),
        services=[
            Service(
                name="svc",
                engine=node_b_engine,
                device="0:2g.48gb@6",
                model="llama-3.1-8b",
                weight_bits=16,
                tokens_per_sequence=4096,
                concurrent_sequences=4,
            )
        ],
    )

    async def go():
        from console.figures.cost import CostSpec

        source = FleetSource(
            PromClient(url),
            window_s=15,
            plans={"node-b": plan},
            cost=CostSpec(system_cost_usd=48_000),
        )
        try:
            live = await source.poll()
            live_taken = live.taken_at
            trends = dict(live.trends)
            source.at = time.time() - 8
            past = await source.poll()
            return live_taken, trends, past
        finally:
            await source.aclose()

    live_taken, trends, past = asyncio.run(go())
    assert abs(past.taken_at - (live_taken - 8)) < 2  # evaluated 8 s earlier
    assert sorted(past.nodes) == ["node-a", "node-b", "node-c"]
    assert set(trends) == {"node-a", "node-b", "node-c"} and all(trends.values())
    cost = past.summary["node-a"].usd_per_m_compliant_tokens_at_least
    assert cost is not None and cost > 0
    b = past.nodes["node-b"]
    (svc,) = b.services
    assert svc.engine_up is True and svc.device_id is None
    assert any(a.key == "service-device:svc" and a.severity == "critical" for a in b.alerts)


def test_fleet_alerts_go_through_the_node_s_for_and_clear():
    """A fleet node's plan alerts rise after their rule's `for`, as on the node (not at once)."""
    from datetime import UTC, datetime

    from console.figures.plan import Node, Plan, Service
    from console.frame import Frame, Gpu, GpuSource

    plan = Plan(
        node=Node(name="n"),
        services=[
            Service(
                name="svc",
                device="0:2g.48gb@6",
                model="llama-3.1-8b",
                weight_bits=16,
                tokens_per_sequence=4096,
                concurrent_sequences=4,
            )
        ],
    )
    source = FleetSource(PromClient("http://127.0.0.1:9"), plans={"n": plan})
    frame = Frame(
        taken_at=datetime.fromtimestamp(1000, tz=UTC),
        host="n",
        inferdeck_version="x",
        window_s=60,
        gpu_source=GpuSource(kind="nvml"),
        gpus=[Gpu(index=0, memory_total_bytes=96 * 2**30)],
    )

    def keys(now):
        return {a.key for a in source._plans({"n": frame}, now)["n"].alerts if a.state == "active"}

    assert "service-device:svc" not in keys(1000.0)  # the memory rule's `for` is 15 s
    assert "service-device:svc" in keys(1016.0)
    asyncio.run(source.aclose())


def test_a_down_node_is_critical_and_a_nan_is_na(tmp_path):
    """One node up, one whose engine is gone: `check --prometheus` said `OK … 1 nodes`, exit 0,
    because a down target has no series to be found by. Now up == 0 is a target down: the node
    shows it and the check is CRITICAL. And a NaN in a result is n/a, never a traceback."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    eng = start_engine("vllm", TrafficSpec(rate_rps=2.0, seed=3))
    gone = free_port()
    prom, url = _start_prometheus(
        tmp_path,
        textwrap.dedent(f"""\
        global:
          scrape_interval: 1s
        scrape_configs:
          - job_name: engines
            static_configs:
              - targets: ['127.0.0.1:{eng.server.port}']
                labels: {{node: node-up}}
              - targets: ['127.0.0.1:{gone}']
                labels: {{node: node-down}}
        """),
    )
    try:
        deadline = time.time() + 60
        res = None
        while time.time() < deadline:
            res = _cli("check", "--prometheus", url)
            if res.returncode == 2:
                break
            time.sleep(1)
        assert res is not None and res.returncode == 2, res.stdout + res.stderr if res else ""
        first = res.stdout.splitlines()[0]
        assert first.startswith("INFERDECK CRITICAL - node-down 127.0.0.1:")
        assert "up == 0" in first and "Traceback" not in res.stderr

        # NaN from Prometheus (a quantile over no observations) is n/a, not a crash
        async def nan() -> list:
            client = PromClient(url)
            try:
                return await client.query("0/0")
            finally:
                await client.aclose()

        assert asyncio.run(nan()) == []
    finally:
        prom.kill()
        eng.server.stop()


def test_dcgm_exporter_4_9_names_read_like_4_8(tmp_path):
    """DCGM exporter 4.9 renamed its fields to DCGM 4.7's canonical names in base units (bytes,
    Hz, 0-1 ratios), the Hostname label became hostname, and every series of a MIG GPU carries
    GPU_I_ID: a node on it showed no GPUs. Two nodes with the same GPUs, one exporter of each
    generation, in a real Prometheus: every GPU figure agrees, and each says which answered."""

    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    servers = []
    targets = []
    for node, gen in (("node-old", "4.8"), ("node-new", "4.9"), ("node-4.10", "4.10")):
        sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30), clock=lambda: 1000.0)
        sim.add_gpu("h100-80gb")
        sim.add_gpu("h100-80gb", mig=[("3g.40gb", 4), ("2g.20gb", 0)])
        dcgm = start_dcgm(sim, node, generation=gen)
        servers.append(dcgm)
        targets.append(f"      - targets: ['127.0.0.1:{dcgm.port}']")
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dcgm\n"
        "    static_configs:\n" + "\n".join(targets) + "\n"
    )
    port = free_port()
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        nodes: dict = {}
        deadline = time.time() + 60
        while time.time() < deadline:
            res = _cli("snapshot", "--prometheus", url, "--wait", "0")
            if res.returncode == 0:
                nodes = {n["node"]: n for n in json.loads(res.stdout)["nodes"]}
                # every figure compared below read (a refresh that lands on a node's first scrape
                # reads a series or two before Prometheus has it: null for that refresh)
                if len(nodes) == 3 and all(
                    len(n["gpu_figures"]) == 2
                    and all(
                        g[k] is not None
                        for g in n["gpu_figures"]
                        for k in ("memory_used_bytes", "memory_total_bytes", "power_w")
                    )
                    for n in nodes.values()
                ):
                    break
            time.sleep(1)
        assert set(nodes) == {"node-old", "node-new", "node-4.10"}, nodes
        old, new, newest = nodes["node-old"], nodes["node-new"], nodes["node-4.10"]
        # PCIe throughput: bytes/s under both names (4.10 added _PER_SECOND), shown in MiB/s; the
        # simulated board moves 0.6 x 1,500 MiB/s out and 0.6 x 3,000 in
        for n in (old, new, newest):
            act = n["gpu_figures"][0]["activity"]
            assert act["pcie_tx_mib_s"] == pytest.approx(0.6 * 1500)
            assert act["pcie_rx_mib_s"] == pytest.approx(0.6 * 3000)
        assert "4.9+" in newest["gpu_exporter"]
        assert "4.9+" in new["gpu_exporter"] and "up to 4.8" in old["gpu_exporter"]
        for a, b in zip(old["gpu_figures"], new["gpu_figures"], strict=True):
            for key in ("memory_used_bytes", "memory_total_bytes", "utilization_gpu_pct",
                        "power_w", "temperature_c", "clock_sm_mhz"):  # fmt: skip
                assert a[key] == pytest.approx(b[key], rel=1e-9), key
            assert b["power_w"] is not None and b["temperature_c"] is not None  # MIG GPU too
            assert b["clock_sm_mhz"] is not None
        mig_old, mig_new = old["gpu_figures"][1]["mig"], new["gpu_figures"][1]["mig"]
        profiles = [d["profile"] for d in mig_new["devices"]]
        assert sorted(profiles) == ["2g.20gb", "3g.40gb"]
        assert profiles == [d["profile"] for d in mig_old["devices"]]
        for a, b in zip(mig_old["devices"], mig_new["devices"], strict=True):
            assert a["memory_used_bytes"] == b["memory_used_bytes"]
            assert b["activity"]["graphics_pct"] == pytest.approx(a["activity"]["graphics_pct"])
    finally:
        prom.kill()
        for s in servers:
            s.stop()


def wait_ready(url: str, path: str = "/-/ready", seconds: float = 30) -> bool:
    """Until a server started here answers ``path`` with 200 (False if it never does)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if httpx.get(url + path, timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def _start_prometheus(tmp_path: Path, config: str) -> tuple[subprocess.Popen[bytes], str]:
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(config)
    port = free_port()
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return prom, f"http://127.0.0.1:{port}"


def _partial_proxy(upstream: str):
    """Prometheus behind a front that says it left something out, as Thanos' querier and a
    federation do ("warnings": ["partial response ..."]): the answers are otherwise Prometheus'."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Front(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            resp = httpx.get(upstream + self.path, timeout=10)
            doc = resp.json()
            doc["warnings"] = ["partial response: store 10.0.0.9:10901 unavailable"]
            body = json.dumps(doc).encode()
            self.send_response(resp.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_node_killed_reads_down_with_when_it_was_last_seen_on_every_fleet_surface(tmp_path):
    """The fleet's half of an incident. Two nodes (an engine and a DCGM exporter each) and another
    job's dead target (an accounting PC's windows exporter) in one Prometheus. Before: the dead
    windows exporter made `check --prometheus` CRITICAL, the DCGM exporter counted as an engine
    (`Engines 0/2` once down), and a killed node's rates ran on over its last samples (868 ->
    652 -> 438 tok/s) and then read `Tok/s 0`. Now: the other job's target is mentioned once and
    not counted; a node killed reads `down` with 'last seen N s ago', every figure n/a, never a
    decaying or zero one, at every poll; a partial answer is never a silent OK."""

    from console.fleet.state import fleet_timeline, node_row

    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    sims = {}
    targets: dict[str, tuple[Any, Any]] = {}
    for i, node in enumerate(("node-a", "node-b")):
        sims[node] = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30))
        sims[node].add_gpu("h100-80gb")
        eng = start_engine("vllm", TrafficSpec(rate_rps=3.0, output_tokens=300, seed=40 + i))
        targets[node] = (eng, start_dcgm(sims[node], node))
    dead = free_port()
    job = "\n".join(
        f"      - targets: ['127.0.0.1:{port}']\n        labels: {{node: {node}}}"
        for node, port in ([(n, e.server.port) for n, (e, _) in targets.items()])
    )
    dcgm = "\n".join(
        f"      - targets: ['127.0.0.1:{d.port}']\n        labels: {{node: {n}}}"
        for n, (_, d) in targets.items()
    )
    prom, url = _start_prometheus(
        tmp_path,
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: engines\n    static_configs:\n{job}\n"
        f"  - job_name: dcgm\n    static_configs:\n{dcgm}\n"
        f"  - job_name: windows\n    static_configs:\n      - targets: ['127.0.0.1:{dead}']\n",
    )
    front, partial_url = _partial_proxy(url)
    source = FleetSource(PromClient(url), window_s=30)
    loop = asyncio.new_event_loop()

    def poll():
        st = loop.run_until_complete(source.poll())
        return st, {
            n: node_row(n, f, st.summary.get(n), st.down.get(n)) for n, f in st.nodes.items()
        }

    try:
        deadline = time.time() + 60
        rows: dict[str, Any] = {}
        while time.time() < deadline:
            st, rows = poll()
            if all((rows.get(n) or {}).get("tps") for n in targets) and st.other_down:
                break
            time.sleep(0.5)
        assert [rows[n]["engines"] for n in targets] == ["1/1", "1/1"], rows
        assert st.other_down == [f"windows 127.0.0.1:{dead}"]
        ok = _cli("check", "--prometheus", url)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        lines = ok.stdout.splitlines()
        assert lines[0].startswith("INFERDECK OK - ") and "2 nodes" in lines[0]
        assert lines[1] == (
            "1 other target down in Prometheus (never served an engine or DCGM series; not "
            f"counted): windows 127.0.0.1:{dead}"
        )
        # a partial answer: WARNING, never OK, saying what was left out
        part = _cli("check", "--prometheus", partial_url)
        assert part.returncode == 1, part.stdout + part.stderr
        assert part.stdout.splitlines()[0] == (
            "INFERDECK WARNING - Prometheus answered partially: partial response: store "
            "10.0.0.9:10901 unavailable; nodes it left out are not judged"
        )
        snap = json.loads(_cli("snapshot", "--prometheus", partial_url, "--format", "json").stdout)
        assert snap["warnings"] == ["partial response: store 10.0.0.9:10901 unavailable"]

        # node-b killed: its engine and its DCGM exporter
        killed_at = time.time()
        targets["node-b"][0].server.stop()
        targets["node-b"][1].stop()
        seen = []
        while time.time() < killed_at + 25:
            st, rows = poll()
            b = rows["node-b"]
            # at every poll: a live figure while Prometheus still had it up, then n/a; never 0
            # and never a figure beside a down engine
            assert b["tps"] is None or b["tps"] > 0, b
            eng = st.nodes["node-b"].engines[0]
            assert eng.up or (eng.generation_tokens_per_s is None and eng.ttft_s is None)
            assert rows["node-a"]["engines"] == "1/1" and rows["node-a"]["tps"] > 0
            seen.append(b["worst"])
            if b["worst"] == "down" and time.time() > killed_at + 20:
                break
            time.sleep(1)
        assert seen[-1] == "down", seen
        assert b["engines"] == "0/1" and b["ttft"] is None and b["tps"] is None, b
        age = float(st.down["node-b"].split()[2])
        assert st.down["node-b"] == f"last seen {age:.0f} s ago"
        # Prometheus is asked as it goes down (its record at a 5 s step), so within 6 s
        assert 15 <= age <= time.time() - killed_at + 6, st.down
        assert "DCGM exporter" in st.nodes["node-b"].gpu_source.error
        # a fresh `check` (no memory of node-b) says the same, from Prometheus' own record
        res = _cli("check", "--prometheus", url)
        assert res.returncode == 2, res.stdout + res.stderr
        first = res.stdout.splitlines()[0]
        assert first.startswith("INFERDECK CRITICAL - node-b 127.0.0.1:"), first
        assert "the target is down, last seen " in first and " s ago" in first
        assert "windows" not in first and "other target down" in res.stdout
        md = _cli("snapshot", "--prometheus", url, "--format", "md").stdout
        assert "| node-b | 0 | 0 | 0/1 | down | n/a | n/a | n/a |" in md, md
        assert "- node-b: down, last seen " in md
        # the fleet's timeline: node-b's engine down, from the poll that saw it, still on
        tl = fleet_timeline(st)
        down = [e for e in tl.events if e.kind == "engine-down"]
        assert [e.subject.split("/")[0] for e in down] == ["node-b"] and down[0].end is None
        assert killed_at - 1 <= down[0].start.timestamp() <= killed_at + 25
        assert not [e for e in tl.events if e.subject.startswith("node-a/")]
    finally:
        front.shutdown()
        loop.run_until_complete(source.aclose())
        loop.close()
        prom.kill()
        for eng, d in targets.values():
            eng.server.stop()
            d.stop()


def test_a_nodes_own_findings_reach_the_fleet_row_and_check():
    """An SLO missed from the first minute is a warning finding on the node (no alert carries it
    until the burn is judged): the fleet read only alerts and showed the node `ok`. Now the
    node's exported verdict counts (findings and pending) make its row and `check --prometheus`
    say what `inferdeck check` on the node says."""
    from console.fleet.state import node_row

    source = FleetSource(PromClient("http://127.0.0.1:9"))
    eng = {"instance": "10.0.0.5:8000", "job": "engines", "node": "n1"}
    exp = {"instance": "10.0.0.5:9464", "job": "inferdeck", "node": "n1"}
    got: dict[str, Any] = {
        "up": [({**eng, "__name__": "up"}, 1.0), ({**exp, "__name__": "up"}, 1.0)],
        "kind:vllm": [(eng, 1.0)],
        "generation_tokens_per_s": [(eng, 420.0)],
        "x:concerns": [
            ({**exp, "severity": "warning", "source": "finding"}, 1.0),
            ({**exp, "severity": "info", "source": "finding"}, 2.0),
        ],
    }
    frame = source._frames(got, 1000.0)["n1"]
    row = node_row("n1", frame)
    assert row["worst"] == "warning" and row["tps"] == 420.0 and row["engines"] == "1/1"
    said = [a.message for a in frame.alerts]
    assert said == ["1 warning finding in its own verdict; `inferdeck check` there names it"]
    # the time is when the fleet first saw it, not each refresh's
    later = source._frames(got, 1010.0)["n1"]
    assert [a.since.timestamp() for a in later.alerts] == [1000.0]
    # a node whose alert already says as much gets no second line
    got["x:alert"] = [({**exp, "severity": "warning", "rule": "queue", "subject": "chat"}, 990.0)]
    frame = source._frames(got, 1000.0)["n1"]
    assert [a.rule for a in frame.alerts] == ["queue"]
    asyncio.run(source.aclose())


def test_a_nodes_exported_alerts_read_as_their_rules_sentences_with_one_time():
    """The fleet drew a node's exported alert as `kv alert (headroom 0.0996094 sequences) on the
    node since 12:00:00Z` (a raw float, an internal word, and a second time beside the pane's).
    Now each reads as the console says that headroom, in its unit, with the plan's budget; the
    time is the alert's own (`since`), once."""
    source = FleetSource(PromClient("http://127.0.0.1:9"))
    exp = {"instance": "10.0.0.5:9464", "job": "inferdeck", "node": "n1"}

    def head(unit: str, rule: str, v: float, budget: float | None = None) -> list:
        rows = [({**exp, "__name__": f"inferdeck_headroom_{unit}", "service": "chat",
                  "rule": rule}, v)]  # fmt: skip
        if budget is not None:
            rows.append(({**exp, "__name__": f"inferdeck_headroom_budget_{unit}",
                          "service": "chat", "rule": rule}, budget))  # fmt: skip
        return rows

    got: dict[str, Any] = {
        "up": [({**exp, "__name__": "up"}, 1.0)],
        "x:alerts": [({**exp, "severity": "warning", "rule": "kv"}, 1.0)],
        "x:headroom": head("sequences", "kv", 0.0996094, 2.0)
        + head("requests", "queue", 37.0, 0.0)
        + head("bytes", "memory", 3.5 * 2**30, 8 * 2**30),
        "x:alert": [
            ({**exp, "severity": sev, "rule": rule, "subject": "chat"}, 990.0)
            for sev, rule in (
                ("critical", "kv"),
                ("warning", "queue"),
                ("warning", "memory"),
                ("warning", "power"),
            )
        ],  # fmt: skip
    }
    frame = source._frames(got, 1000.0)["n1"]
    said = {a.rule: a.message for a in frame.alerts}
    assert said == {
        "kv": "KV cache room 0.1 seqs (plan 2.0 seqs), by the node's inferdeck export",
        "queue": "37 requests waiting where the plan allows none, by the node's inferdeck export",
        "memory": "memory headroom 3.5 GiB (plan 8.0 GiB), by the node's inferdeck export",
        "power": "power headroom past its budget (figure not exported), by the node's "
        "inferdeck export",
    }
    assert all(a.since.timestamp() == 990.0 for a in frame.alerts)
    # an alert that is not about a headroom reads as its rule's words
    got["x:alert"] = [({**exp, "severity": "critical", "rule": "engine_down", "subject": "x"}, 9.0)]
    said = [a.message for a in source._frames(got, 1000.0)["n1"].alerts]
    assert said == ["engine down, by the node's inferdeck export"]
    asyncio.run(source.aclose())


def test_a_node_younger_than_the_window_has_its_figures_marked_partial():
    """A node added 20 s ago at a 1m window: Prometheus' rates cover 20 s, said on the node's
    row (°), in its screen's title and in snapshot --prometheus, never as a whole window."""
    from console.fleet.state import node_row
    from console.units import window_text

    source = FleetSource(PromClient("http://127.0.0.1:9"), window_s=60)
    source.scrape_s = 1.0
    old = {"instance": "10.0.0.5:8000", "job": "engines", "node": "old"}
    new = {"instance": "10.0.0.6:8000", "job": "engines", "node": "new"}
    gone = {"instance": "10.0.0.6:8001", "job": "engines", "node": "new"}  # down: not counted
    got: dict[str, Any] = {
        "up": [(old, 1.0), (new, 1.0), (gone, 0.0)],
        "covered": [(old, 60.0), (new, 20.0), (gone, 3.0)],
        "kind:vllm": [(old, 1.0), (new, 1.0)],
        "generation_tokens_per_s": [(old, 420.0), (new, 300.0)],
    }
    frames = source._frames(got, 1000.0)
    assert frames["old"].window_covered_s is None
    assert frames["new"].window_covered_s == 20.0
    assert node_row("new", frames["new"])["window_covered_s"] == 20.0
    assert window_text(60, frames["new"].window_covered_s) == "1m (20s watched)"
    source.scrape_s = None  # the interval unknown: no mark rather than a wrong one
    assert source._frames(got, 1000.0)["new"].window_covered_s is None
    asyncio.run(source.aclose())


def test_the_range_follows_the_scrape_interval(tmp_path):
    """Asked for a window shorter than four scrape intervals (Prometheus' default 1m scrape under
    the fleet's 1m window; here 15 s under 30 s), Prometheus returned no rate: TTFT n/a and tok/s
    drawn as 0. Now the range is four scrape intervals (from the targets API), said in the
    header, and the rate equals the slope of the raw samples (Prometheus' own, read as a range
    vector and computed here)."""

    from console.fleet.state import node_row

    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    eng = start_engine("vllm", TrafficSpec(rate_rps=3.0, output_tokens=300, seed=7))
    prom, url = _start_prometheus(
        tmp_path,
        "global:\n  scrape_interval: 15s\nscrape_configs:\n  - job_name: engines\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{eng.server.port}']\n"
        "        labels: {node: n1}\n",
    )
    source = FleetSource(PromClient(url), window_s=30)
    loop = asyncio.new_event_loop()
    try:
        deadline = time.time() + 90
        st = None
        while time.time() < deadline:
            try:
                st = loop.run_until_complete(source.poll())
            except Exception:  # noqa: BLE001 - Prometheus still starting
                st = None
            node = st.nodes.get("n1") if st else None
            e = node.engines[0] if node is not None and node.engines else None
            if e is not None and e.generation_tokens_per_s and e.ttft_s and e.ttft_s.p95:
                break
            time.sleep(1)
        assert st is not None and e is not None and e.generation_tokens_per_s, st
        assert source.scrape_s == 15.0 and source.window_s == 60.0
        assert st.window_note == (
            "asked 30s: 4 × the 15 s scrape interval, so every rate holds enough samples"
        )
        assert e.ttft_s.window == "60s"
        row = node_row("n1", st.nodes["n1"])
        assert row["tps"] == e.generation_tokens_per_s and row["ttft"] == e.ttft_s.p95

        # the reference: the raw samples' slope over the same range, at the same instant, once
        # the series is older than the range (before, Prometheus divides a part-covered range's
        # increase by the whole range: its stated semantics, not a fleet figure to compare)
        def raw_at(at: float, span: str = "60s") -> list:
            return httpx.get(
                url + "/api/v1/query",
                params={"query": f"vllm:generation_tokens_total[{span}]", "time": at},
                timeout=5,
            ).json()["data"]["result"][0]["values"]

        # a sample before the range too: the counter's start is not inside it
        while len(raw_at(time.time(), "75s")) < 5 and time.time() < deadline + 60:
            time.sleep(2)
        at = time.time()
        raw = raw_at(at)
        assert len(raw) >= 4, raw
        (t0, v0), (t1, v1) = raw[0], raw[-1]
        slope = (float(v1) - float(v0)) / (t1 - t0)
        source.at = at  # the same instant again
        again = loop.run_until_complete(source.poll()).nodes["n1"].engines[0]
        assert again.generation_tokens_per_s == pytest.approx(slope, rel=0.02)
        snap = _cli("snapshot", "--prometheus", url, "--window", "30s", "--format", "json")
        doc = json.loads(snap.stdout)
        assert doc["window_s"] == 60.0 and doc["window_note"].startswith("asked 30s: 4 × the 15 s")
        assert doc["nodes"][0]["tps"] > 0
    finally:
        loop.run_until_complete(source.aclose())
        loop.close()
        prom.kill()
        eng.server.stop()


def _backfilled_prometheus(tmp_path: Path, series: dict[str, Any], rules: str | None = None):
    """A real Prometheus over history written with promtool (`tsdb create-blocks-from
    openmetrics`): the last two hours of a node at a 60 s scrape, as Prometheus' default
    interval leaves them, read at once instead of waited for."""
    from tests.promhist import backfill

    data = tmp_path / "data"
    backfill(data, series)
    config = "global:\n  evaluation_interval: 1s\n"
    if rules is not None:
        (tmp_path / "slo.rules.yml").write_text(rules)
        config += f"rule_files: ['{tmp_path / 'slo.rules.yml'}']\n"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(config)
    port = free_port()
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_ready(url)
    return prom, url


def _imported_victoriametrics(tmp_path: Path, series: dict[str, Any], rules: str):
    """A real VictoriaMetrics over the same history, imported with its own API
    (/api/v1/import/prometheus, samples with their timestamps), and vmalert evaluating the
    rules against it, writing the records back and serving the alerts through
    -vmalert.proxyURL: VictoriaMetrics as the fleet's users run it."""
    vm, vmalert = shutil.which("victoria-metrics"), shutil.which("vmalert")
    port, alert_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(  # its newest 30 s hidden from queries, as shipped
        [vm, f"-storageDataPath={tmp_path / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
         f"-vmalert.proxyURL=http://127.0.0.1:{alert_port}"],
        **quiet,
    )]  # fmt: skip
    wait_ready(url, "/health")
    lines = []
    for name, rows in series.items():
        for labels, samples in rows:
            sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines += [f"{name}{{{sel}}} {v} {int(t * 1000)}" for t, v in samples]
    res = httpx.post(url + "/api/v1/import/prometheus", content="\n".join(lines) + "\n")
    assert res.status_code == 204, res.text
    httpx.get(url + "/internal/force_flush", timeout=10)
    (tmp_path / "slo.rules.yml").write_text(rules)
    procs.append(subprocess.Popen(
        [vmalert, f"-rule={tmp_path / 'slo.rules.yml'}", f"-datasource.url={url}",
         f"-remoteWrite.url={url}", f"-notifier.url=http://127.0.0.1:{free_port()}",
         f"-httpListenAddr=127.0.0.1:{alert_port}", "-evaluationInterval=2s"],
        **quiet,
    ))  # fmt: skip
    return procs, url


@pytest.mark.parametrize(
    "backend,every", [("prometheus", 60), ("victoriametrics", 60), ("victoriametrics", 15)]
)  # (Prometheus at a live 15 s scrape: test_the_range_follows_the_scrape_interval)
def test_a_60s_scrape_and_an_slo_page_read_on_every_fleet_surface(tmp_path, backend, every):
    """Two hours of one node at Prometheus' default 1-minute scrape (backfilled): 100 requests a
    minute, 93 of them over the 1 s TTFT target, 6,000 tokens a minute. Before: a 1m range over a
    1m scrape held one sample, so tok/s read 0 and TTFT n/a, and the fleet ignored Prometheus'
    SLO page, reading the node `ok`. Now: the range is 4m (said), tok/s is exactly 100, TTFT p95
    2.5 s (the +Inf rank's last finite bound), and the page from `inferdeck rules --slo` makes the
    node CRITICAL in the fleet row, `check --prometheus` and `snapshot --prometheus`' SLO section.
    The same history in VictoriaMetrics with vmalert reads the same: its rate() is not
    extrapolated, which on a steady counter gives the same 100 tok/s; its newest 30 s hidden from
    queries and a history that stops, the scrape interval still reads 60 s (it read 67 s: the
    samples counted over the whole 10 minutes, not the span up to the newest). The same two hours
    at a 15 s scrape: a 1m range (no note), the same figures and page."""

    from console.fleet.state import node_row

    if backend == "prometheus" and not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    if backend == "victoriametrics" and not (
        shutil.which("victoria-metrics") and shutil.which("vmalert")
    ):
        pytest.skip("victoria-metrics is not installed (apt-get install victoria-metrics)")
    where = {"instance": "10.0.0.5:8000", "job": "engines", "node": "n1"}
    # two hours up to now. At 15 s VictoriaMetrics is given samples ahead of now too, so the
    # series go on through the test as a live scrape's do (a query at now reads none past now),
    # or a rate over a range past the series' end would read low. At 60 s they stop: the scrape
    # interval counted up to the newest sample, which VictoriaMetrics hides for 30 s, still reads
    # 60 s. (Prometheus' head takes no sample older than a block it holds: its rules could not
    # record over history written ahead.)
    end = time.time() - 5
    ahead = 240 // every if every == 15 else 0
    ts = [end - every * i for i in range(7200 // every, -ahead - 1, -1)]
    per = every / 60  # a scrape's share of a minute
    cum = {"0.5": 3, "1.0": 7, "2.5": 60, "+Inf": 100}  # per minute: 7 of 100 within 1 s
    series = {
        "up": [(where, [(t, 1) for t in ts])],
        "vllm:num_requests_running": [({**where, "model_name": "m"}, [(t, 5) for t in ts])],
        "vllm:generation_tokens_total": [
            ({**where, "model_name": "m"}, [(t, 6000 * per * i) for i, t in enumerate(ts)])
        ],
        "vllm:request_success_total": [
            (
                {**where, "model_name": "m", "finished_reason": "stop"},
                [(t, 100 * per * i) for i, t in enumerate(ts)],
            )
        ],  # fmt: skip
        "vllm:time_to_first_token_seconds_bucket": [
            ({**where, "model_name": "m", "le": le}, [(t, n * per * i) for i, t in enumerate(ts)])
            for le, n in cum.items()
        ],
        "vllm:time_to_first_token_seconds_count": [
            ({**where, "model_name": "m"}, [(t, 100 * per * i) for i, t in enumerate(ts)])
        ],
    }
    cfg = tmp_path / "node.yaml"
    cfg.write_text(
        "node: {name: n1}\nengines:\n  - {name: chat, url: 'http://10.0.0.5:8000/metrics', "
        "kind: vllm}\nservices:\n  - {name: chat, engine: chat, device: '0', model: llama-3.1-8b,"
        " weight_bits: 16, tokens_per_sequence: 4096, concurrent_sequences: 4,"
        " slo: {ttft_s: 1.0, completion: 0.99}}\n"
    )
    rules = _cli("rules", "--slo", "--config", str(cfg))
    assert rules.returncode == 0, rules.stderr
    if backend == "prometheus":
        prom, url = _backfilled_prometheus(tmp_path, series, rules.stdout)
        procs = [prom]
    else:
        procs, url = _imported_victoriametrics(tmp_path, series, rules.stdout)
    source = FleetSource(PromClient(url), window_s=60)
    loop = asyncio.new_event_loop()
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            st = loop.run_until_complete(source.poll())
            row = node_row("n1", st.nodes["n1"]) if "n1" in st.nodes else None
            # the page, and the budget its sentence says (vmalert's records come a poll later)
            if row and row["worst"] == "critical" and any(r.remaining is not None for r in st.slo):
                break
            time.sleep(1)
        assert source.scrape_s == every and source.window_s == max(60, 4 * every), source.scrape_s
        if every == 60:
            assert st.window_note is not None and st.window_note.startswith("asked 1m: 4 × the 60")
        else:
            assert st.window_note is None  # four 15 s scrapes fit the minute asked
        assert row is not None and row["tps"] == pytest.approx(100.0)
        assert row["ttft"] == pytest.approx(2.5) and row["worst"] == "critical", row
        page = [a for a in st.nodes["n1"].alerts if a.rule == "slo_burn"]
        assert page and page[0].severity == "critical" and page[0].subject == "chat"
        ruler = "Prometheus'" if backend == "prometheus" else "vmalert's"  # whose rule it is
        assert f"({ruler} InferdeckSLOBurnPage; left " in page[0].message
        assert "since" not in page[0].message  # the time is the alert's own, shown once
        res = _cli("check", "--prometheus", url)
        assert res.returncode == 2, res.stdout + res.stderr
        first = res.stdout.splitlines()[0]
        assert first.startswith("INFERDECK CRITICAL - n1 chat: ttft error budget burning"), first
        if every == 60:
            assert "window 4m: asked 1m: 4 × the 60 s scrape interval" in res.stdout
        else:
            assert "window" not in res.stdout.split("\n", 1)[1]
        doc = json.loads(_cli("snapshot", "--prometheus", url, "--format", "json").stdout)
        slo = {(r["service"], r["slo"]): r for r in doc["slo"]}
        assert slo[("chat", "ttft")]["node"] == "n1"
        assert slo[("chat", "ttft")]["burn_alert"] == "page"
        assert slo[("chat", "ttft")]["state"] == "firing"
        assert doc["nodes"][0]["worst"] == "critical"
        assert doc["nodes"][0]["tps"] == pytest.approx(100.0)
        md = _cli("snapshot", "--prometheus", url, "--format", "md").stdout
        assert "| chat | ttft | n1 |" in md and "error budget burning: page firing since" in md
    finally:
        loop.run_until_complete(source.aclose())
        loop.close()
        for proc in procs:
            proc.kill()
            proc.wait()


def test_the_client_keeps_to_the_backends_concurrency_retries_a_503_and_names_it():
    """36 queries fired at once exceeded VictoriaMetrics' concurrent-query limit, whose HTTP 503
    read 'did not answer with JSON: is this Prometheus?'. Now at most `concurrency` are in flight,
    a 503 is asked once more after its Retry-After, and one that stays says what it is."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"now": 0, "most": 0, "calls": 0, "busy": True}
    lock = threading.Lock()

    class Backend(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            with lock:
                state["now"] += 1
                state["calls"] += 1
                state["most"] = max(state["most"], state["now"])
                first = state["calls"] == 1
            time.sleep(0.05)
            if first or "always503" in self.path:  # over its limit, as VictoriaMetrics says it
                body, code = b"too many concurrent requests\n", 503
            else:
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": []}}
                ).encode()
                code = 200
            with lock:
                state["now"] -= 1
            self.send_response(code)
            if code == 503:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    async def run():
        client, busy = PromClient(url, concurrency=4), PromClient(url + "/always503")
        try:
            got = await asyncio.gather(*(client.query(f"q{i}") for i in range(36)))
            try:
                await busy.query("x")
            except PromError as exc:
                return got, str(exc)
            return got, None
        finally:
            await client.aclose()
            await busy.aclose()

    try:
        got, why = asyncio.run(run())
    finally:
        server.shutdown()
    assert got == [[]] * 36  # the first one's 503 asked again, and answered
    assert 1 <= state["most"] <= 4, state
    assert why == (
        f"{url}/always503/api/v1/query: the backend is overloaded or starting (HTTP 503: over its "
        "concurrent-query limit? lower prometheus.concurrency) — it said: too many concurrent "
        "requests"
    )


def test_victoriametrics_reads_like_prometheus_and_says_its_rate_and_its_missing_ruler(tmp_path):
    """VictoriaMetrics (Debian's 1.79, scraping itself) with vmalert evaluating `inferdeck rules
    --slo` and writing the records back: every fleet figure present, the backend named and its
    rate() stated as not extrapolated (tok/s equal to its own raw samples' slope); the budgets
    are read, and the alerts API's empty answer (no -vmalert.proxyURL) is said, not read as 'no
    burn'."""
    vm, vmalert = shutil.which("victoria-metrics"), shutil.which("vmalert")
    if not vm or not vmalert:
        pytest.skip(
            "victoria-metrics is not installed (apt-get install victoria-metrics; .ci/run does)"
        )
    sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30))
    sim.add_gpu("h100-80gb")
    eng = start_engine("vllm", TrafficSpec(rate_rps=3.0, output_tokens=300, seed=11))
    dcgm = start_dcgm(sim, "n1")
    (tmp_path / "scrape.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: engines\n    static_configs:\n      - targets: ['127.0.0.1:{eng.server.port}']\n"
        "        labels: {node: n1}\n"
        f"  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{dcgm.port}']\n"
        "        labels: {node: n1}\n"
    )
    cfg = tmp_path / "node.yaml"
    cfg.write_text(
        f"node: {{name: n1}}\nengines:\n  - {{name: chat, url: 'http://127.0.0.1:{eng.server.port}"
        "/metrics', kind: vllm}\nservices:\n  - {name: chat, engine: chat, device: '0', "
        "model: llama-3.1-8b, weight_bits: 16, tokens_per_sequence: 4096, "
        "concurrent_sequences: 4, slo: {ttft_s: 1.0, completion: 0.99}}\n"
    )
    rules = _cli("rules", "--slo", "--config", str(cfg))
    assert rules.returncode == 0, rules.stderr
    (tmp_path / "slo.yml").write_text(rules.stdout)
    port, alert_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [vm, f"-promscrape.config={tmp_path / 'scrape.yml'}",
             f"-storageDataPath={tmp_path / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
             "-search.latencyOffset=0s"],
            **quiet,
        ),
        subprocess.Popen(
            [vmalert, f"-rule={tmp_path / 'slo.yml'}", f"-datasource.url={url}",
             f"-remoteWrite.url={url}", f"-remoteRead.url={url}",
             f"-notifier.url=http://127.0.0.1:{free_port()}",
             f"-httpListenAddr=127.0.0.1:{alert_port}", "-evaluationInterval=1s"],
            **quiet,
        ),
    ]  # fmt: skip
    source = FleetSource(PromClient(url), window_s=60)
    loop = asyncio.new_event_loop()
    try:
        deadline = time.time() + 150
        st, e = None, None
        while time.time() < deadline:
            try:
                st = loop.run_until_complete(source.poll())
            except Exception:  # noqa: BLE001 - still starting
                st = None
            node = st.nodes.get("n1") if st else None
            e = node.engines[0] if node is not None and node.engines else None
            # the figures, the budgets (vmalert's records), and the scrape interval (counted
            # once the targets are a minute old: VictoriaMetrics lists none)
            if e and e.generation_tokens_per_s and e.ttft_s and source.scrape_s:
                if any(r.remaining is not None for r in st.slo):
                    break
            time.sleep(2)
        assert st is not None and e is not None and e.generation_tokens_per_s, st
        assert st.backend == "VictoriaMetrics"
        assert st.rates.startswith("VictoriaMetrics' rate(): not extrapolated")
        from console.fleet.state import node_row

        row = node_row("n1", st.nodes["n1"])
        assert (row["gpus"], row["engines"]) == (1, "1/1") and row["ttft"] is not None
        assert source.scrape_s == 1.0 and source.window_s == 60.0
        # VictoriaMetrics' rate at an instant, against its own raw samples read at that instant
        at = time.time()
        raw = httpx.get(
            url + "/api/v1/query",
            params={"query": "vllm:generation_tokens_total[60s]", "time": at},
            timeout=5,
        ).json()["data"]["result"][0]["values"]
        slope = (float(raw[-1][1]) - float(raw[0][1])) / (raw[-1][0] - raw[0][0])
        source.at = at
        again = loop.run_until_complete(source.poll()).nodes["n1"].engines[0]
        assert again.generation_tokens_per_s == pytest.approx(slope, rel=0.05)
        source.at = None
        st = loop.run_until_complete(source.poll())
        assert st.slo and all(r.node == "n1" for r in st.slo), st.slo
        assert st.slo_note is not None and "answers no alerting rules" in st.slo_note
        assert "-vmalert.proxyURL" in st.slo_note
    finally:
        loop.run_until_complete(source.aclose())
        loop.close()
        for p in procs:
            p.kill()
        eng.server.stop()
        dcgm.stop()


def test_the_fleet_reads_its_recording_rules_when_prometheus_holds_them(tmp_path):
    """`inferdeck rules --fleet` records every windowed figure the fleet shows (promtool accepts
    it); with them loaded the fleet reads the stored series instead of evaluating rates and
    quantiles over every bucket at each refresh, says so, and shows the same figures."""

    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    rules = _cli("rules", "--fleet", "--window", "30s")
    assert rules.returncode == 0, rules.stderr
    (tmp_path / "fleet.rules.yml").write_text(rules.stdout.replace("interval: 15s", "interval: 1s"))
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    checked = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "fleet.rules.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    eng = start_engine("vllm", TrafficSpec(rate_rps=3.0, output_tokens=300, seed=21))
    prom, url = _start_prometheus(
        tmp_path,
        f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{tmp_path / 'fleet.rules.yml'}']\nscrape_configs:\n"
        f"  - job_name: engines\n    static_configs:\n      - targets: ['127.0.0.1:{eng.server.port}']\n"
        "        labels: {node: n1}\n",
    )
    recorded, raw = (
        FleetSource(PromClient(url), window_s=30),
        FleetSource(PromClient(url), window_s=30),
    )
    loop = asyncio.new_event_loop()
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                st = loop.run_until_complete(recorded.poll())
            except Exception:  # noqa: BLE001 - still starting
                st = None
            node = st.nodes.get("n1") if st else None
            e = node.engines[0] if node is not None and node.engines else None
            if e and e.generation_tokens_per_s and e.ttft_s and len(recorded.recorded) >= 10:
                break
            recorded._records_at = 0.0  # look for the records again at once (test only)
            time.sleep(1)
        assert {"generation_tokens_per_s", "ttft:0.95", "success_rate"} <= recorded.recorded
        assert st.recorded == sorted(recorded.recorded)
        raw._records_for = "30s"  # this one never looks for records: the raw queries
        raw._records_at = float("inf")

        # both read at one instant (a second ago): the record then holds its evaluation of at
        # most 1 s before; once the engine's series is older than the window (a younger one's
        # rate climbs by the second as Prometheus divides its increase by the whole window)
        def age() -> float:
            got = httpx.get(
                url + "/api/v1/query",
                params={"query": "count_over_time(vllm:generation_tokens_total[45s])"},
                timeout=5,
            ).json()["data"]["result"]
            return float(got[0]["value"][1]) if got else 0.0

        deadline = time.time() + 90
        while age() < 38 and time.time() < deadline:
            time.sleep(1)
        while True:
            recorded.at = raw.at = time.time() - 1
            kept = loop.run_until_complete(recorded.poll()).nodes["n1"].engines[0]
            direct = loop.run_until_complete(raw.poll()).nodes["n1"].engines[0]
            both = [kept, direct]
            if all(x.generation_tokens_per_s and x.ttft_s for x in both):
                break
            assert time.time() < deadline, both
            time.sleep(1)
        assert raw.recorded == set()
        assert kept.generation_tokens_per_s == pytest.approx(
            direct.generation_tokens_per_s, rel=0.1
        )
        assert kept.ttft_s is not None and direct.ttft_s is not None
        assert kept.ttft_s.p95 == pytest.approx(direct.ttft_s.p95, rel=0.25)
        recorded.at = None
        doc = json.loads(_cli("snapshot", "--prometheus", url, "--window", "30s",
                              "--format", "json").stdout)  # fmt: skip
        assert len(doc["from_recording_rules"]) >= 10 and doc["nodes"][0]["tps"] > 0
    finally:
        for s in (recorded, raw):
            loop.run_until_complete(s.aclose())
        loop.close()
        prom.kill()
        eng.server.stop()


def test_an_engine_down_told_first_by_the_nodes_export_is_one_timeline_entry():
    """A node's export says engine_down a refresh before Prometheus' up turns 0: the fleet's
    timeline had the export's alert as an entry of its own (0 s long, and marked the first
    sign), then the engine-down beside it. Now the alert opens the engine-down entry, which
    goes on once up says so."""
    from console.figures.timeline import EventBook

    source = FleetSource(PromClient("http://127.0.0.1:9"))
    eng = {"instance": "10.0.0.5:8000", "job": "engines", "node": "n1"}
    exp = {"instance": "10.0.0.5:9464", "job": "inferdeck", "node": "n1"}
    told = [({**exp, "severity": "critical", "rule": "engine_down", "subject": eng["instance"]},
             990.0)]  # fmt: skip
    got: dict[str, Any] = {
        "up": [(eng, 1.0), (exp, 1.0)],
        "kind:vllm": [(eng, 1.0)],
        "generation_tokens_per_s": [(eng, 420.0)],
    }
    book = EventBook()
    book.observe(source._frames(got, 1000.0)["n1"])
    got["x:alert"] = told
    book.observe(source._frames(got, 1005.0)["n1"])
    got["up"] = [(eng, 0.0), (exp, 1.0)]
    tl = book.observe(source._frames(got, 1010.0)["n1"])
    assert [(e.kind, e.subject, e.end) for e in tl.events] == [
        ("engine-down", eng["instance"], None)
    ]
    assert tl.events[0].start.timestamp() == 1005.0
    asyncio.run(source.aclose())
