"""`inferdeck dashboards`: every panel query of every generated dashboard run against a real
Prometheus scraping a simulated engine of each kind (NIM: its written page, its counters growing),
two DCGM exporters (4.8 and 4.9 names) and `inferdeck export --demo`; each returns a finite value,
and a name planted wrong is caught by the same check."""

from __future__ import annotations

import copy
import json
import math
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from console.out.dashboards import WINDOW, dashboards
from console.sim.dcgm import start_dcgm
from console.sim.engine import METRICS_PATHS, MetricsServer, TrafficSpec, start_engine
from console.sim.formats import FORMATS
from console.sim.nvml import DeviceLoad, SimNvml
from tests.conftest import ROOT, fixture_text
from tests.test_fleet import PROMETHEUS, _start_prometheus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FORMATS_SORTED = sorted(FORMATS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def growing(page: str, since: float):
    """A written page whose counters and histograms grow 1 % a second (gauges as written)."""
    grows: set[str] = set()
    for line in page.splitlines():
        m = re.match(r"# TYPE (\S+) (counter|histogram)", line)
        if m:
            grows.add(m.group(1))

    def now() -> str:
        k = 1 + 0.01 * (time.monotonic() - since)
        out = []
        for line in page.splitlines():
            m = re.match(r"^([a-zA-Z_:][\w:]*?)(_bucket|_count|_sum|_total)?(\{.*\})? (\S+)$", line)
            if (
                m
                and not line.startswith("#")
                and (m.group(1) in grows or m.group(1) + (m.group(2) or "") in grows)
            ):
                line = line.rsplit(" ", 1)[0] + f" {float(m.group(4)) * k!r}"
            out.append(line)
        return "\n".join(out) + "\n"

    return now


def empty_panels(docs: dict, url: str, window: str = "15s") -> list[str]:
    """Every dashboard/panel/target whose query returns no finite value now."""
    missing = []
    with httpx.Client(base_url=url, timeout=10) as client:
        for name, doc in docs.items():
            for panel in doc["panels"]:
                for t in panel["targets"]:
                    expr = t["expr"].replace(WINDOW, window)
                    res = client.get("/api/v1/query", params={"query": expr}).json()
                    assert res["status"] == "success", (name, panel["title"], res)
                    values = [float(r["value"][1]) for r in res["data"]["result"]]
                    if not any(math.isfinite(v) for v in values):
                        missing.append(f"{name}: {panel['title']} [{t['refId']}]")
    return missing


def test_every_panel_of_every_dashboard_returns_data_and_a_wrong_name_is_caught(tmp_path: Path):
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    servers = []
    targets = []
    for i, kind in enumerate(FORMATS_SORTED):
        eng = start_engine(kind, TrafficSpec(rate_rps=3.0, output_tokens=200, seed=i, warmup_s=60))
        servers.append(eng.server)
        path = METRICS_PATHS[kind][0] if kind in METRICS_PATHS else "/metrics"
        targets.append((eng.server.port, "node-a", kind, path))
    # NIM: its written page (the names NVIDIA's page lists that it holds), growing, and the rest of
    # NIM's vLLM-derived names from a simulated vLLM with its prefix dropped
    written = growing(fixture_text("nim-written.prom"), time.monotonic())
    vllm = start_engine("vllm", TrafficSpec(rate_rps=3.0, output_tokens=200, seed=99, warmup_s=60))
    servers.append(vllm.server)

    def nim_page() -> str:
        page = written()
        have = set(re.findall(r"^# TYPE (\S+)", page, re.M))
        more = httpx.get(f"http://127.0.0.1:{vllm.server.port}/metrics").text
        keep, out = False, []
        for line in more.replace("vllm:", "").splitlines():
            if line.startswith("# HELP"):
                keep = line.split()[2] not in have
            if keep:
                out.append(line)
        return page + "\n".join(out) + "\n"

    nim = MetricsServer(nim_page).start()
    servers.append(nim)
    targets.append((nim.port, "node-a", "nim", "/metrics"))
    for node, generation in (("node-a", "4.8"), ("node-b", "4.9")):
        sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30))
        sim.add_gpu("h100-80gb", mig=None)
        sim.add_gpu("h100-80gb", mig=[("3g.40gb", 4), ("2g.20gb", 0)])
        dcgm = start_dcgm(sim, node, generation=generation)
        servers.append(dcgm)
        targets.append((dcgm.port, node, f"dcgm-{generation}", "/metrics"))
    export_port = _free_port()
    export = subprocess.Popen(
        [sys.executable, "-m", "console", "export", "--demo", "--duration", "90",
         "--listen", f"127.0.0.1:{export_port}"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    targets.append((export_port, "node-a", "inferdeck", "/metrics"))
    # an SLO on the vLLM engine, its records from `inferdeck rules --slo` loaded in Prometheus
    vllm_url = f"http://127.0.0.1:{servers[FORMATS_SORTED.index('vllm')].port}/metrics"
    cfg = tmp_path / "node.yaml"
    cfg.write_text(
        f"node: {{name: node-a}}\nengines:\n  - {{name: chat, url: '{vllm_url}', kind: vllm}}\n"
        "services:\n  - {name: chat, engine: chat, device: '0', model: llama-3.1-8b,"
        " weight_bits: 16, tokens_per_sequence: 4096, concurrent_sequences: 4,"
        " slo: {ttft_s: 1.0, completion: 0.99}}\n"
    )
    rules = subprocess.run(
        [sys.executable, "-m", "console", "rules", "--slo", "--config", str(cfg)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert rules.returncode == 0 and "record:" in rules.stdout, rules.stderr
    (tmp_path / "slo.yaml").write_text(rules.stdout)
    jobs = "".join(
        f"  - job_name: {what}\n    metrics_path: {path}\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{port}']\n        labels: {{node: {node}}}\n"
        for port, node, what, path in targets
    )
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{tmp_path / 'slo.yaml'}']\nscrape_configs:\n{jobs}"
    )
    prom, url = _start_prometheus(tmp_path, config)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:  # every target scraped, with 15 s of samples
            try:
                up = httpx.get(url + "/api/v1/query", params={"query": "up"}, timeout=2).json()
                ups = [float(r["value"][1]) for r in up["data"]["result"]]
                if len(ups) == len(targets) and all(v == 1 for v in ups):
                    break
            except (httpx.HTTPError, ValueError):  # not ready yet
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"not every target up: {up}")
        time.sleep(16)
        deadline = time.time() + 45  # the SLO records' group runs every 30 s
        while time.time() < deadline:
            q = {"query": "inferdeck:slo_error_budget:remaining"}
            if httpx.get(url + "/api/v1/query", params=q).json()["data"]["result"]:
                break
            time.sleep(1)
        docs = dashboards()
        assert len(docs) == 3 + len(FORMATS) + 1  # node, SLO, fleet; each simulated kind; NIM
        assert empty_panels(docs, url) == []
        assert sum(len(d["panels"]) for d in docs.values()) > 80
        # both DCGM generations answer the fleet's GPU panels, in one unit
        fleet = docs["inferdeck-fleet.json"]
        memory = next(p for p in fleet["panels"] if p["title"] == "GPU memory used")
        res = httpx.get(url + "/api/v1/query", params={"query": memory["targets"][0]["expr"]})
        by_node: dict[str, list[float]] = {}
        for r in res.json()["data"]["result"]:
            by_node.setdefault(r["metric"]["node"], []).append(float(r["value"][1]))
        assert sorted(by_node) == ["node-a", "node-b"]
        assert sorted(by_node["node-a"]) == pytest.approx(sorted(by_node["node-b"]), rel=0.01)
        # a name planted wrong in one panel is caught; in one of SGLang's two forms it is not
        planted = copy.deepcopy(docs["inferdeck-engine-vllm.json"])
        target = planted["panels"][0]["targets"][0]
        assert "vllm:num_requests_running" in target["expr"]
        target["expr"] = target["expr"].replace("num_requests_running", "num_requests_runing")
        assert empty_panels({"planted": planted}, url) == ["planted: Requests running [A]"]
        # the files `--out` writes are the same dashboards
        out = subprocess.run(
            [sys.executable, "-m", "console", "dashboards", "--out", str(tmp_path / "d")],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        for name, doc in docs.items():
            assert json.loads((tmp_path / "d" / name).read_text()) == doc
    finally:
        prom.kill()
        export.kill()
        for s in servers:
            s.stop()


def test_the_perses_dashboards_hold_the_grafana_ones_panels_and_queries_and_parse_as_perses():
    """`--format perses`: the same panels, titles, queries and legends as the Grafana dashboards
    (whose queries the test above runs against a real Prometheus), each document read back by the
    perses package's own records (unknown fields refused), every grid item naming a panel."""
    perses = pytest.importorskip("perses.model.dashboard")
    grafana, docs = dashboards("grafana"), dashboards("perses")
    assert sorted(docs) == sorted(grafana)
    for name, doc in docs.items():
        perses.Dashboard.model_validate(doc)
        spec = doc["spec"]
        want = [(p["title"], [(t["expr"], t["legendFormat"]) for t in p["targets"]])
                for p in grafana[name]["panels"]]  # fmt: skip
        got = []
        for item in spec["layouts"][0]["spec"]["items"]:
            panel = spec["panels"][item["content"]["$ref"].removeprefix("#/spec/panels/")]["spec"]
            queries = [q["spec"]["plugin"]["spec"] for q in panel["queries"]]
            assert all(q["spec"]["plugin"]["kind"] == "PrometheusTimeSeriesQuery"
                       for q in panel["queries"])  # fmt: skip
            got.append((panel["display"]["name"],
                        [(q["query"], q["seriesNameFormat"]) for q in queries]))  # fmt: skip
        assert got == want, name
        assert doc["metadata"]["name"] == grafana[name]["uid"]
        assert spec["display"]["name"] == grafana[name]["title"]
    units = {p["spec"]["plugin"]["spec"]["yAxis"]["format"]["unit"]
             for d in docs.values() for p in d["spec"]["panels"].values()}  # fmt: skip
    assert {"seconds", "percent-decimal", "bytes"} <= units


def test_dashboards_format_perses_on_the_command_line(tmp_path: Path):
    pytest.importorskip("perses")
    out = subprocess.run([sys.executable, "-m", "console", "dashboards", "--format", "perses",
                          "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(dashboards("grafana"))
    doc = json.loads((tmp_path / "inferdeck-fleet.json").read_text())
    assert doc["kind"] == "Dashboard" and doc["metadata"]["project"] == "inferdeck"
