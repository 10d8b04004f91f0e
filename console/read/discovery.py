"""Zero-config discovery of local engines: engine command lines (GPU processes first, then every
process) give kind and port; a probe of the default ports finds the rest."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from console.cmdline import classify
from console.engines import detect_kind, metrics_paths, needed_families, profiles
from console.promtext import parse
from console.read.http1 import Http1
from console.read.scraper import scrape

if TYPE_CHECKING:
    import httpx

DEFAULT_PORTS = (8000, 30000, 3000, 8002, 8080)


@dataclass(frozen=True, slots=True)
class Found:
    kind: str
    url: str
    pid: int | None = None
    how: str = ""  # "cmdline" or "port probe"
    # the batch cap its command line sets (the profile's max_seqs flag, e.g. --max-num-seqs)
    max_running: int | None = None


def flag_value(argv: list[str], flag: str) -> int | None:
    """An integer flag's value from a command line (``--flag 64`` or ``--flag=64``), or None."""
    for i, arg in enumerate(argv):
        text = arg[len(flag) + 1 :] if arg.startswith(flag + "=") else None
        if arg == flag and i + 1 < len(argv):
            text = argv[i + 1]
        if text is not None:
            try:
                return int(text)
            except ValueError:
                return None
    return None


def read_cmdline(pid: int, proc: Path = Path("/proc")) -> list[str] | None:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def all_pids(proc: Path = Path("/proc")) -> list[int]:
    try:
        return sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
    except OSError:
        return []


def from_processes(pids: Iterable[int], proc: Path = Path("/proc")) -> list[Found]:
    found: dict[str, Found] = {}
    for pid in pids:
        argv = read_cmdline(pid, proc)
        hit = classify(argv) if argv else None
        if hit is None:
            continue
        kind, port = hit
        prof = profiles()[kind]
        spec = prof.discover
        url = f"http://127.0.0.1:{port}{spec.path if spec else '/metrics'}"
        flag = prof.knobs.max_seqs
        cap = flag_value(argv, flag) if argv and flag.startswith("--") else None
        found.setdefault(url, Found(kind, url, pid, "cmdline", cap))
    return list(found.values())


async def probe_ports(
    ports: Iterable[int], timeout_s: float = 0.5, skip: set[str] | None = None
) -> list[Found]:
    """GET /metrics (and the other paths engines serve Prometheus text at, e.g. trtllm-serve's
    /prometheus/metrics) on 127.0.0.1:PORT for each port; keep those that serve a known engine."""
    urls = [f"http://127.0.0.1:{p}{path}" for p in ports for path in metrics_paths()]
    urls = [u for u in urls if not skip or u not in skip]
    http = Http1()
    made: list[httpx.AsyncClient] = []

    def client() -> httpx.AsyncClient:  # a compressed answer or a redirect: httpx reads it
        import httpx

        if not made:
            made.append(httpx.AsyncClient())
        return made[0]

    try:
        results = await asyncio.gather(*(scrape(client, u, timeout_s, lean=http) for u in urls))
    finally:
        await http.aclose()
        for c in made:
            await c.aclose()
    out: dict[str, Found] = {}  # one engine per port: the first path that serves it
    for res in results:
        if res.text is None:
            continue
        kind = detect_kind(parse(res.text, keep=needed_families().__contains__))
        port = res.url.split("://", 1)[-1].split("/", 1)[0]
        if kind and port not in out:
            out[port] = Found(kind, res.url, None, "port probe")
    return list(out.values())


async def discover(
    gpu_pids: Iterable[int] = (), ports: Sequence[int] = DEFAULT_PORTS, proc: Path = Path("/proc")
) -> list[Found]:
    """Engines on this node: GPU processes' command lines, every process's, then port probes."""
    gpu_pids = list(gpu_pids)
    found = {f.url: f for f in from_processes(gpu_pids, proc)}
    for f in from_processes(all_pids(proc), proc):
        found.setdefault(f.url, f)
    for f in await probe_ports(ports, skip=set(found)):
        found.setdefault(f.url, f)
    return list(found.values())
