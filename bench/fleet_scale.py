"""The fleet at scale: N simulated nodes (a DCGM exporter and a vLLM engine each, all served from
one helper process) scraped every 15 s by a real Prometheus, then by a real VictoriaMetrics with
vmalert evaluating the same `inferdeck rules --fleet`; how long one fleet refresh takes and how
many queries it sends on each backend, reading the recording rules and with the raw queries,
beside a one-query baseline measured in the same run, and how many nodes show a blank figure.

    python bench/fleet_scale.py [N] [--backend prometheus|victoriametrics|both]
                                      (default 200, both; needs Debian's prometheus,
                                       victoria-metrics and vmalert)

Each node's engine page is one simulated vLLM's page (its traffic simulated for two minutes),
every counter and histogram then advancing at one of 100 paces: the series and labels of a real
engine page at each node, without thousands of traffic simulations or HTTP threads on two cores.
Target (issue "fleet"): 2,000 nodes with recording rules, a refresh in <= 2 s median with <= 40
queries on both backends; without them, no blank figure.
"""

from __future__ import annotations

import argparse
import asyncio
import re
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


def template_page() -> tuple[list[tuple[str, float | None]], list[str]]:
    """One simulated vLLM's page after two minutes of traffic, as (line head, value or None for a
    line kept as is), and the families that grow."""
    from console.sim.engine import TrafficSpec, page_for, start_engine

    clock = {"t": 1000.0}
    eng = start_engine("vllm", TrafficSpec(seed=3, rate_rps=4.0), clock=lambda: clock["t"])
    for _ in range(120):
        clock["t"] += 1.0
        eng.model.advance()
    text = page_for("vllm", eng.model)
    eng.stop()
    grows = [m.group(1) for m in re.finditer(r"^# TYPE (\S+) (?:counter|histogram)$", text, re.M)]
    lines: list[tuple[str, float | None]] = []
    for line in text.splitlines():
        name = re.match(r"^[a-zA-Z_:][\w:]*", line)
        base = name.group(0) if name else ""
        grown = any(base == g or base.startswith(g + "_") for g in grows)
        if line.startswith("#") or not grown:
            lines.append((line, None))
        else:
            head, value = line.rsplit(" ", 1)
            lines.append((head, float(value)))
    return lines, grows


PACES = 100  # engine pages advance at this many paces (nodes share one by their number)


def serve(n: int) -> None:
    """Helper process: N nodes, printing "node dcgm_port engine_port" per line. One asyncio loop
    serves every port (a page is bytes made at most once a second per pace, so thousands of
    scrapes a minute cost the helper little and leave the CPU to the backend being measured)."""
    from console.sim.dcgm import dcgm_page
    from console.sim.nvml import DeviceLoad, SimNvml

    lines, _ = template_page()
    began = time.monotonic()
    pages: dict[int, tuple[float, bytes]] = {}

    def engine_page(pace: int) -> bytes:
        now = time.monotonic()
        made = pages.get(pace)
        if made is None or now - made[0] >= 1.0:
            k = 1.0 + (0.002 + 0.00001 * pace) * (now - began)
            text = "\n".join(h if v is None else f"{h} {v * k!r}" for h, v in lines) + "\n"
            made = pages[pace] = (now, text.encode())
        return made[1]

    def handler(body):  # type: ignore[no-untyped-def]
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:  # keep-alive, as Prometheus scrapes
                    await reader.readuntil(b"\r\n\r\n")
                    data = body()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                pass
            finally:
                writer.close()

        return handle

    async def main() -> None:
        sim = SimNvml(load=lambda g, m: DeviceLoad(0.6, 20 * 2**30))
        sim.add_gpu("h100-80gb", mig=[("3g.40gb", 0), ("3g.40gb", 4)])
        for i in range(n):
            node = f"node-{i:04d}"
            dcgm = dcgm_page(sim, node).encode()  # gauges: the same page each scrape
            ports = []
            for body in (lambda d=dcgm: d, lambda p=i % PACES: engine_page(p)):
                server = await asyncio.start_server(handler(body), "127.0.0.1", 0)
                ports.append(server.sockets[0].getsockname()[1])
            print(node, *ports, flush=True)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def measure(
    url: str, rounds: int, records: bool = True
) -> tuple[list[float], list[float], int, int, int, list[str]]:
    """(refresh times, baseline times, nodes, queries a refresh, nodes with a blank figure, what
    the last refresh said about its backend)."""
    source = FleetSource(PromClient(url), window_s=60)
    if not records:  # never look for the recording rules: every figure from the raw series
        source._records_for, source._records_at = "60s", float("inf")
    client = PromClient(url)
    fleet, base = [], []
    nodes = blank = 0
    said: list[str] = []
    try:
        for _ in range(rounds):
            t = time.perf_counter()
            await client.query("up")
            base.append(time.perf_counter() - t)
            t = time.perf_counter()
            state = await source.poll()
            fleet.append(time.perf_counter() - t)
            nodes = len(state.nodes)
            blank = sum(
                1
                for f in state.nodes.values()
                if not f.engines
                or any(
                    e.generation_tokens_per_s is None or e.ttft_s is None or not e.up
                    for e in f.engines
                )
            )
            said = [*state.errors.values(), *state.warnings]
            await asyncio.sleep(1.0)
    finally:
        await source.aclose()
        await client.aclose()
    return fleet, base, nodes, source.queries_per_refresh, blank, said


def report(backend: str, url: str) -> None:
    for records in (True, False):
        fleet, base, nodes, queries, blank, said = asyncio.run(measure(url, 5, records))
        med, worst = statistics.median(fleet), max(fleet)
        how = "reading `rules --fleet` records" if records else "raw queries"
        print(f"{backend}, {how}: nodes in the fleet view: {nodes}; queries per refresh: "
              f"{queries}; nodes with a blank figure: {blank}")  # fmt: skip
        print(
            f"  fleet refresh: median {med * 1000:.0f} ms, max {worst * 1000:.0f} ms "
            f"(target <= 2000 ms); one 'up' query: median "
            f"{statistics.median(base) * 1000:.1f} ms — ratio "
            f"{med / statistics.median(base):.0f}x"
        )
        for line in said[:3]:
            print(f"  said: {line}")


def wait_ready(url: str, path: str) -> None:
    for _ in range(120):
        try:
            if httpx.get(url + path, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} never became ready")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nodes", type=int, nargs="?", default=200)
    ap.add_argument("--backend", choices=("prometheus", "victoriametrics", "both"), default="both")
    args = ap.parse_args()
    n = args.nodes
    tools = {"prometheus": ["prometheus"], "victoriametrics": ["victoria-metrics", "vmalert"]}
    wanted = ["prometheus", "victoriametrics"] if args.backend == "both" else [args.backend]
    found = {t: shutil.which(t) for b in wanted for t in tools[b]}
    if not all(found.values()):
        print("needs " + ", ".join(t for t, p in found.items() if p is None) + " (apt-get install)")
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

    rules = tmp / "fleet.rules.yml"
    rules.write_text(yaml.safe_dump(fleet_rule_groups(60.0)))
    scrape = (
        f"scrape_configs:\n  - job_name: dcgm\n    static_configs:\n{dcgm_t}\n"
        f"  - job_name: engines\n    static_configs:\n{eng_t}\n"
    )
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n"
        f"rule_files: ['{rules}']\n" + scrape
    )
    (tmp / "vm.yml").write_text("global:\n  scrape_interval: 15s\n" + scrape)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    print(f"{n} nodes ({2 * n} targets) scraped every 15 s")
    try:
        for backend in wanted:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            if backend == "prometheus":
                procs = [subprocess.Popen([
                    found["prometheus"], f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'prom'}", f"--web.listen-address=127.0.0.1:{port}",
                ], **quiet)]  # fmt: skip
                name = "Prometheus"
                wait_ready(url, "/-/ready")
            else:
                alert_port = free_port()
                procs = [
                    subprocess.Popen([
                        found["victoria-metrics"], f"-promscrape.config={tmp / 'vm.yml'}",
                        f"-storageDataPath={tmp / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
                        f"-vmalert.proxyURL=http://127.0.0.1:{alert_port}",
                    ], **quiet),
                    subprocess.Popen([
                        found["vmalert"], f"-rule={rules}", f"-datasource.url={url}",
                        f"-remoteWrite.url={url}", f"-httpListenAddr=127.0.0.1:{alert_port}",
                        "-evaluationInterval=15s", f"-notifier.url=http://127.0.0.1:{free_port()}",
                    ], **quiet),
                ]  # fmt: skip
                name = "VictoriaMetrics (vmalert for the records)"
                wait_ready(url, "/health")
            # the window (60 s) and the records' first whole evaluations; VictoriaMetrics hides
            # its newest 30 s from queries (-search.latencyOffset), vmalert's records included
            settle = 75 if backend == "prometheus" else 120
            try:
                print(f"{name}: waiting {settle} s for the windows and the records to fill")
                time.sleep(settle)
                report(name, url)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
    finally:
        helper.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
