"""The fleet at scale: a real Prometheus scraping N simulated nodes (a DCGM exporter and a vLLM
engine each, all served from one helper process) every 15 s, with `inferdeck rules --fleet`
loaded; how long one fleet refresh takes and how many queries it sends, reading the recording
rules and with the raw queries, beside a one-query baseline measured in the same run.

    python bench/fleet_scale.py [N]        (default 200; needs Debian's prometheus)
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from console.fleet.prom import PromClient  # noqa: E402
from console.fleet.source import FleetSource  # noqa: E402


def serve(n: int) -> None:
    """Helper process: N nodes, printing "node dcgm_port engine_port" per line."""
    from console.sim.dcgm import start_dcgm
    from console.sim.engine import TrafficSpec, start_engine
    from console.sim.nvml import DeviceLoad, SimNvml

    for i in range(n):
        sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30))
        sim.add_gpu("h100-80gb", mig=[("3g.40gb", 0), ("3g.40gb", 4)])
        node = f"node-{i:03d}"
        dcgm = start_dcgm(sim, node)
        eng = start_engine("vllm", TrafficSpec(seed=i, rate_rps=1.0, warmup_s=30))
        print(node, dcgm.port, eng.server.port, flush=True)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(
    url: str, rounds: int, records: bool = True
) -> tuple[list[float], list[float], int, int]:
    source = FleetSource(PromClient(url), window_s=60)
    if not records:  # never look for the recording rules: every figure from the raw series
        source._records_for, source._records_at = "60s", float("inf")
    client = PromClient(url)
    fleet, base = [], []
    nodes = 0
    try:
        for _ in range(rounds):
            t = time.perf_counter()
            await client.query("up")
            base.append(time.perf_counter() - t)
            t = time.perf_counter()
            state = await source.poll()
            fleet.append(time.perf_counter() - t)
            nodes = len(state.nodes)
            await asyncio.sleep(1.0)
    finally:
        await source.aclose()
        await client.aclose()
    return fleet, base, nodes, source.queries_per_refresh


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "serve" else 200
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
        return 0
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("needs prometheus (apt-get install prometheus)")
        return 1
    helper = subprocess.Popen(
        [sys.executable, __file__, "serve", str(n)], stdout=subprocess.PIPE, text=True
    )
    assert helper.stdout is not None
    targets = []
    for line in helper.stdout:
        if line.strip() == "ready":
            break
        node, dcgm, eng = line.split()
        targets.append((node, dcgm, eng))
    tmp = Path(tempfile.mkdtemp())
    dcgm_t = "\n".join(
        f"      - targets: ['127.0.0.1:{d}']\n        labels: {{node: {node}}}"
        for node, d, _ in targets
    )
    eng_t = "\n".join(
        f"      - targets: ['127.0.0.1:{e}']\n        labels: {{node: {node}}}"
        for node, _, e in targets
    )
    import yaml

    from console.fleet.promql import fleet_rule_groups

    (tmp / "fleet.rules.yml").write_text(yaml.safe_dump(fleet_rule_groups(60.0)))
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n"
        f"rule_files: ['{tmp / 'fleet.rules.yml'}']\nscrape_configs:\n"
        f"  - job_name: dcgm\n    static_configs:\n{dcgm_t}\n"
        f"  - job_name: engines\n    static_configs:\n{eng_t}\n"
    )
    port = free_port()
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(60):
            try:
                if httpx.get(url + "/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        print(f"{n} nodes ({2 * n} targets) scraped every 15 s; waiting 40 s for two rounds")
        time.sleep(40)
        for records in (True, False):
            fleet, base, nodes, queries = asyncio.run(measure(url, 5, records))
            med, worst = statistics.median(fleet), max(fleet)
            how = "reading `rules --fleet` records" if records else "raw queries"
            print(f"{how}: nodes in the fleet view: {nodes}; queries per refresh: {queries}")
            print(
                f"  fleet refresh: median {med * 1000:.0f} ms, max {worst * 1000:.0f} ms "
                f"(target < 2000 ms); one 'up' query: median "
                f"{statistics.median(base) * 1000:.1f} ms — ratio "
                f"{med / statistics.median(base):.0f}x"
            )
    finally:
        prom.kill()
        helper.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
