"""One poll cycle: read NVML (in a thread) and scrape every engine (concurrently, each with its
own timeout), keep history, derive, and return an immutable Frame."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from console.engines import detect_kind, extract, metrics_paths, needed_families, profiles
from console.frame import GpuSource
from console.promtext import MAX_LABEL_CHARS, MAX_SERIES, Page, parse
from console.read.http1 import Http1
from console.read.llamaslots import slots_kv, slots_url
from console.read.nvml import NvmlReader
from console.read.scraper import ScrapeResult, fetch_top_models, scrape, without_credentials
from console.read.workload import kubelet_index, name_gpus
from console.safetext import printable
from console.sample import EngineSample, Sample, SlotFigures, SlotsReading
from console.settings import ConfigWatch
from console.triton import api_base

if TYPE_CHECKING:
    import httpx

KUBELET_EVERY_S = 30.0


@dataclass
class KubeletTarget:
    """The kubelet's /pods endpoint: bearer token (from a file read at every fetch, or the
    environment), TLS verified against the system store or ``ca_file``."""

    url: str
    token_file: str | None = None
    token_env: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True
    timeout_s: float = 3.0
    _client: httpx.AsyncClient | None = None

    @property
    def has_token(self) -> bool:
        return bool(self.token_file or self.token_env)

    def token(self) -> str:
        if self.token_env:
            value = os.environ.get(self.token_env, "")
            if not value:
                raise ValueError(f"environment variable {self.token_env} is not set")
            return value
        assert self.token_file is not None
        return Path(self.token_file).expanduser().read_text(encoding="utf-8").strip()

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            verify: bool | ssl.SSLContext = self.verify_tls
            if self.verify_tls and self.ca_file:
                verify = ssl.create_default_context(cafile=self.ca_file)
            self._client = httpx.AsyncClient(verify=verify)
        return self._client


def _has_workload(g: Any) -> bool:
    procs = list(g.processes) + [p for d in (g.mig.devices if g.mig else []) for p in d.processes]
    return any(p.workload is not None for p in procs)


@dataclass
class EngineTarget:
    url: str
    kind: str | None = None  # None: detect from the series on the page
    name: str | None = None
    timeout_s: float = 2.0
    headers: dict[str, str] | None = None
    verify_tls: bool = True
    interval_s: float | None = None  # None: every poll
    device: str | None = None
    model: str | None = None  # for engines whose series carry no model label
    top_models: list[str] | None = None  # Triton: the models clients call (else read from its API)
    api_url: str | None = None  # Triton's HTTP API (default: the metrics host, port 8000)
    max_running: int | None = None  # its batch cap, as its command line set it (discovery)
    # the URL as fetched when its query holds a secret; ``url`` shows it masked
    fetch_url: str | None = field(default=None, repr=False)

    @property
    def fetched(self) -> str:
        return self.fetch_url or self.url

    @property
    def label(self) -> str:
        return self.name or self.url.split("//", 1)[-1].split("/", 1)[0]


@dataclass
class _EngineState:
    target: EngineTarget
    kind: str | None = None
    next_due: float = 0.0
    polled: bool = False
    tops: list[str] | None = None  # Triton's top-level models, read from its API
    tops_next: float = 0.0
    # the URL named no path (http://host:8000): each engine's metrics path is tried until one serves
    # a known engine, and the target keeps the URL that answered
    find_path: bool = False

    def __post_init__(self) -> None:
        self.find_path = urlsplit(self.target.url).path in ("", "/")


def unique_names(targets: list[EngineTarget]) -> list[EngineTarget]:
    """Engines with one name each: two on one host:port (different paths) get their path added, and
    any still alike a number."""
    seen: dict[str, int] = {}
    labels = [t.label for t in targets]
    for t in targets:
        if t.name is None and labels.count(t.label) > 1:
            path = t.url.split("//", 1)[-1].partition("/")[2].rstrip("/")
            t.name = f"{t.label}/{path}" if path and path != "metrics" else t.label
        n = seen.get(t.label, 0)
        seen[t.label] = n + 1
        if n:
            t.name = f"{t.label}#{n + 1}"
    return targets


async def _ready(res: ScrapeResult) -> ScrapeResult:
    return res


class SteadyClock:
    """Wall-clock seconds that never step: the wall time at start plus the time since on the
    boot clock (monotonic, and counting a suspended VM's sleep). Windows, rates and alert holds
    run on it; a step of the wall clock (NTP, a VM resumed with its time set) is measured by
    ``wall_offset``, never followed."""

    def __init__(
        self, wall: Callable[[], float] = time.time, steady: Callable[[], float] | None = None
    ) -> None:
        boot = getattr(time, "CLOCK_BOOTTIME", None)
        self._steady = steady or (
            (lambda: time.clock_gettime(boot)) if boot is not None else time.monotonic
        )
        self._wall = wall
        self._anchor = wall() - self._steady()

    def __call__(self) -> float:
        return self._anchor + self._steady()

    def wall_offset(self) -> float:
        """The wall clock minus this one: 0 until the wall clock steps."""
        return self._wall() - self()


class Poller:
    """Reads every engine and the GPUs each poll into a Sample; nothing derived (``LiveSource``
    derives it, as a replay does its recorded ones)."""

    def __init__(
        self,
        targets: list[EngineTarget],
        nvml: NvmlReader | None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.engines = [_EngineState(t, kind=t.kind) for t in unique_names(targets)]
        self.nvml = nvml
        self.clock = clock or SteadyClock()
        self.waiting: list[str] = []  # sources the last poll stopped waiting for
        self.config: ConfigWatch | None = None  # the config file, read again when it changes
        self._clients: dict[tuple[bool, bytes], httpx.AsyncClient] = {}
        self._tls: dict[bool, ssl.SSLContext] = {}
        self.http = Http1()  # plain-http pages, one kept-alive connection per engine address
        self.max_series = MAX_SERIES  # what one page may hold (config scrape.max_series)
        self.max_label_chars = MAX_LABEL_CHARS
        self.budget_s: float | None = None  # longest a poll waits for slow sources (None: for all)
        self._tasks: dict[int, asyncio.Future[Any]] = {}
        self._nvml_task: asyncio.Future[Any] | None = None
        self._gpu_reading: tuple[GpuSource, list[Any]] = (
            GpuSource(kind="none", error=None)
            if nvml is not None
            else GpuSource(kind="none", note="GPUs are not read: started with --no-gpu."),
            [],
        )
        self.kubelet: KubeletTarget | None = None  # pod names for GPU processes, when configured
        self._kube_next = 0.0
        self._kube_index: dict[str, dict[str, str]] = {}
        self._kube_error: str | None = None

    def forget_mig(self, index: int) -> None:
        """Read GPU ``index``'s MIG layout afresh at the next poll (after a re-layout)."""
        if self.nvml is not None:
            self.nvml.forget_mig(index)

    def _client(self, verify: bool, url: str) -> httpx.AsyncClient:
        """A client (one kept-alive connection) per engine address: httpcore scans every pooled
        connection at each request, so one shared pool costs O(engines²) per poll."""
        import httpx  # only here: plain-http pages are read without it

        key = (verify, httpx.URL(url).netloc)
        client = self._clients.get(key)
        if client is None:
            if verify not in self._tls:  # one TLS context for all (building one takes ~15 ms)
                self._tls[verify] = httpx.create_ssl_context(verify=verify)
            client = self._clients[key] = httpx.AsyncClient(
                follow_redirects=True, verify=self._tls[verify]
            )
        return client

    async def aclose(self) -> None:
        for task in list(self._tasks.values()) + ([self._nvml_task] if self._nvml_task else []):
            task.cancel()
        self._tasks.clear()
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        await self.http.aclose()
        if self.kubelet is not None and self.kubelet._client is not None:
            await self.kubelet._client.aclose()
        if self.nvml is not None:
            await asyncio.to_thread(self.nvml.close)

    async def acquire(self) -> Sample:
        """Scrape every engine and read NVML concurrently. With a ``budget_s`` (the console sets
        one), a poll waits no longer than that: an engine or NVML still answering keeps going in
        the background, its last figures stand meanwhile, and its answer lands in a later poll."""
        now = self.clock()
        for i, state in enumerate(self.engines):
            if i not in self._tasks:
                self._tasks[i] = asyncio.ensure_future(self._poll_engine(state, now))
        if self.nvml is not None and self._nvml_task is None:
            self._nvml_task = asyncio.ensure_future(asyncio.to_thread(self.nvml.read))
        pending = list(self._tasks.values()) + ([self._nvml_task] if self._nvml_task else [])
        if pending:
            await asyncio.wait(pending, timeout=self.budget_s)
        # what this poll stopped waiting for (its budget ran out): named by a headless command
        self.waiting = [
            self.engines[i].target.label for i, task in self._tasks.items() if not task.done()
        ] + (["NVML"] if self._nvml_task is not None and not self._nvml_task.done() else [])
        engines = []
        for i, state in enumerate(self.engines):
            task = self._tasks[i]
            if task.done():
                del self._tasks[i]
                try:
                    engines.append(task.result())
                except Exception as exc:  # noqa: BLE001 - a poll bug shows as this engine's error
                    engines.append(
                        EngineSample(
                            label=state.target.label,
                            url=state.target.url,
                            t=now,
                            up=False,
                            error=f"inferdeck error while polling: {type(exc).__name__}: {exc}",
                        )
                    )
            else:
                engines.append(
                    EngineSample(
                        label=state.target.label,
                        url=state.target.url,
                        t=now,
                        fresh=False,
                        device=state.target.device,
                        model=state.target.model,
                        error="still waiting for its answer",
                    )
                )
        if self._nvml_task is not None and self._nvml_task.done():
            try:
                self._gpu_reading = self._nvml_task.result()
            except Exception as exc:  # noqa: BLE001
                self._gpu_reading = (
                    GpuSource(kind="none", error=f"NVML read failed: {type(exc).__name__}: {exc}"),
                    [],
                )
            self._nvml_task = None
        source, gpus = self._gpu_reading
        if self.kubelet is not None:
            source, gpus = await self._kubelet_names(source, gpus)
        offset = self.clock.wall_offset() if isinstance(self.clock, SteadyClock) else 0.0
        return Sample(
            t=self.clock(),
            source=source,
            gpus=gpus,
            engines=engines,
            wall_offset_s=offset,
            config=self.config.check() if self.config is not None else None,
        )

    async def _kubelet_names(
        self, source: GpuSource, gpus: list[Any]
    ) -> tuple[GpuSource, list[Any]]:
        """Pod and container names for GPU processes from the kubelet's /pods (asked every
        KUBELET_EVERY_S; an unreachable kubelet leaves the cgroup's ids and says why)."""
        k = self.kubelet
        assert k is not None
        now = time.monotonic()
        if now >= self._kube_next and any(_has_workload(g) for g in gpus):
            self._kube_next = now + KUBELET_EVERY_S
            try:
                headers = {"Authorization": f"Bearer {k.token()}"} if k.has_token else {}
                res = await scrape(k.client(), k.url, k.timeout_s, headers=headers)
                if res.text is None:
                    raise ValueError(res.error or "no answer")
                self._kube_index, self._kube_error = kubelet_index(res.text), None
            except (OSError, ValueError) as exc:
                self._kube_error = f"kubelet {without_credentials(k.url)[0]}: {exc}"
        if self._kube_error:
            note = "; ".join(n for n in (source.note, self._kube_error) if n)
            source = source.model_copy(update={"note": note})
        return source, name_gpus(gpus, self._kube_index) if self._kube_index else gpus

    async def _poll_engine(self, state: _EngineState, now: float) -> EngineSample:
        target = state.target
        base: dict[str, Any] = {
            "label": target.label,
            "url": target.url,
            "device": target.device,
            "model": target.model,
            "max_running": target.max_running,
        }
        if state.polled and target.interval_s and now < state.next_due:
            return EngineSample(**base, t=now, fresh=False)
        state.next_due = now + (target.interval_s or 0.0)
        state.polled = True

        def client() -> httpx.AsyncClient:  # made when httpx is needed (HTTPS, slots, Triton)
            return self._client(target.verify_tls, target.url)

        if state.find_path:
            found = await self._find_path(state, client)
            if found.text is None:
                return await asyncio.to_thread(self._engine, state, found, None, base)
            base["url"] = target.url
            page = _ready(found)
        else:
            page = scrape(
                client, target.fetched, target.timeout_s, headers=target.headers, lean=self.http
            )
        if state.kind == "llamacpp":
            res, slots = await asyncio.gather(
                page,
                scrape(client, slots_url(target.fetched), target.timeout_s, headers=target.headers),
            )
        else:
            res, slots = await page, None
        if (
            state.kind == "triton"
            and target.top_models is None
            and state.tops is None
            and now >= state.tops_next
        ):
            state.tops_next = now + 60.0  # the API may be off or elsewhere: ask again in a minute
            state.tops = await fetch_top_models(
                client(), target.api_url or api_base(target.url), target.timeout_s, target.headers
            )
        base["top_models"] = target.top_models or state.tops
        # parsing grows with the page: off the event loop, so one engine's 16 MB page delays
        # only its own figures (the loop keeps polling the others and drawing)
        return await asyncio.to_thread(self._engine, state, res, slots, base)

    async def _find_path(
        self, state: _EngineState, client: Callable[[], httpx.AsyncClient]
    ) -> ScrapeResult:
        """Try every engine's metrics path under a URL that named none; the first that serves a
        known engine becomes the target's URL. None answering: one error naming each path's
        answer (tried again next poll: the engine may not be up yet)."""
        target = state.target
        base = target.url.rstrip("/")

        def at(url: str, path: str) -> str:  # the path put in, the query (if any) kept
            return urlunsplit(urlsplit(url)._replace(path=path))

        paths = metrics_paths()
        results = await asyncio.gather(
            *(
                scrape(
                    client,
                    at(target.fetched, p),
                    target.timeout_s,
                    headers=target.headers,
                    lean=self.http,
                )
                for p in paths
            )
        )
        for p, res in zip(paths, results, strict=True):
            if res.text is not None and detect_kind(await asyncio.to_thread(self._parse, res.text)):
                target.url = at(target.url, p)
                target.fetch_url = at(target.fetch_url, p) if target.fetch_url else None
                state.find_path = False
                return res
        tried = "; ".join(
            f"{p}: {r.error or 'no series of a known engine'}"
            for p, r in zip(paths, results, strict=True)
        )
        return ScrapeResult(
            url=base,
            text=None,
            error=f"{base} names no path and no engine metrics path answered ({tried}); "
            "give the full URL, e.g. http://127.0.0.1:8000/metrics",
            elapsed_s=max(r.elapsed_s for r in results),
            taken_at=max(r.taken_at for r in results),
        )

    def _engine(
        self,
        state: _EngineState,
        res: ScrapeResult,
        slots: ScrapeResult | None,
        base: dict[str, Any],
    ) -> EngineSample:
        target = state.target
        t = self.clock()
        error = res.error
        if res.text is not None:
            page = self._parse(res.text)
            # a page no profile claims is read as the kind the operator named, if any
            found = detect_kind(page) or (target.kind if len(page) else None)
            if page.over_limit is not None:
                error = f"{target.url}: {page.over_limit}"
            elif len(page) == 0 and page.skipped == 0:
                error = f"{target.url} returned no Prometheus samples (is this the engine's /metrics URL?)"
            elif found is None:
                error = f"{target.url} serves no series of a known engine ({', '.join(profiles())})"
            elif target.kind is not None and found != target.kind:
                error = (
                    f"{target.url} serves {found} metrics, not {target.kind}: fix the engine kind"
                )
            else:
                state.kind = found
                ex = extract(page, profiles()[found], t)
                return EngineSample(
                    **base,
                    t=t,
                    scrape_s=res.elapsed_s,
                    moved_to=res.moved_to,
                    up=True,
                    kind=found,
                    extract=ex,
                    slots=self._slots(slots) if slots is not None else None,
                )
        return EngineSample(
            **base,
            t=t,
            scrape_s=res.elapsed_s,
            moved_to=res.moved_to,
            up=False,
            error=printable(error) if error else error,  # a reason phrase is the server's text
            kind=state.kind,
        )

    def _parse(self, text: str) -> Page:
        return parse(
            text,
            keep=needed_families().__contains__,
            max_series=self.max_series,
            max_label_chars=self.max_label_chars,
        )

    @staticmethod
    def _slots(res: ScrapeResult) -> SlotsReading:
        if res.text is None:
            why = res.error or "no answer"
            if "HTTP 501" in why or "HTTP 404" in why:
                why = "llama.cpp /slots is off: start llama-server with --slots to see KV use"
            return SlotsReading(unavailable={"kv_cache_usage": why, "kv_capacity_tokens": why})
        try:
            usage, capacity, rows = slots_kv(res.text)
        except (ValueError, TypeError) as exc:
            return SlotsReading(unavailable={"kv_cache_usage": f"unexpected /slots answer ({exc})"})
        return SlotsReading(
            fields=SlotFigures(kv_cache_usage=usage, kv_capacity_tokens=capacity, slots=rows),
            series={"kv_cache_usage": "GET /slots (prompt + decoded tokens of busy slots / n_ctx)"},
        )
