"""Composition: the command line's sources, targets and recorder.

Settings from the config file and the flags, the engines to watch (configured, given with
``--engine``, discovered), the GPU reader, the poller and the recorder; a headless sample. The
commands (``console/commands/``) and ``inferdeck mig`` build on these; nothing here draws.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from console.engines import kinds
from console.figures.keyseries import KeySeries
from console.figures.windowed import parse_window
from console.frame import Frame
from console.paths import mig_audit_log, recordings_dir
from console.read.live import LiveSource
from console.read.nvml import NvmlReader
from console.read.poller import EngineTarget, KubeletTarget, Poller
from console.read.scraper import (
    UrlError,
    check_url,
    query_secrets,
    split_query_secrets,
    without_credentials,
)
from console.settings import (
    ConfigError,
    ConfigWatch,
    Settings,
    config_path,
    demo_settings,
    load_settings,
    token_headers,
)

if TYPE_CHECKING:
    from console.read.recording import Recorder
    from console.sim.demo import DemoNode


class UsageError(Exception):
    """A mistake in how inferdeck was called; the message is the one sentence shown."""


class NoAnswer(Exception):
    """Nothing could be read: exit 3 with one sentence."""


def parse_engine(spec: str) -> EngineTarget:
    """``[KIND=]URL`` -> EngineTarget (kind None means: detect from the page)."""
    kind = None
    url = spec
    if "=" in spec.split("://", 1)[0]:
        kind, url = spec.split("=", 1)
        if kind not in kinds():
            raise UsageError(
                f"--engine {spec!r}: unknown engine kind {kind!r}; use one of {', '.join(kinds())}."
            )
    url, auth = without_credentials(url)
    try:
        check_url(url)
    except UrlError as exc:
        raise UsageError(f"--engine: {exc}") from None
    shown, fetch = split_query_secrets(url)
    return EngineTarget(url=shown, kind=kind, headers=auth, fetch_url=fetch)


def token_from_file(path: str, option: str) -> str:
    """A bearer token from a file named on the command line; one sentence when it cannot be."""
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot read it ({exc.strerror}).") from None
    if not token:
        raise UsageError(f"{option} {path}: the file is empty.")
    return token


def positive(value: float, flag: str, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(
            f"{flag} must be {'zero or more' if allow_zero else 'more than zero'}, not {value:g}."
        )


DEADLINE_AFTER_WAIT_S = 8.0  # a headless command's default deadline: --wait and this


async def sample(
    source: LiveSource,
    wait_s: float,
    interval_s: float,
    keys: KeySeries | None = None,
    deadline_s: float | None = None,
) -> Frame:
    """Poll for ``wait_s`` seconds (at least once) and return the last Frame. Every poll but the
    last waits at most one interval, as the console's do: a hung engine's answer lands late and
    the healthy ones keep their cadence (and their windows); the last poll waits for every answer
    (each bounded by its engine's timeout) up to ``deadline_s`` from the start, so the Frame judged
    names what each engine said, or that it was still answering. On a terminal the wait counts
    down on stderr (never in a pipe, never into the JSON on stdout)."""
    show = wait_s >= 1 and sys.stderr.isatty()
    try:
        began = time.monotonic()
        deadline = began + wait_s
        whole = began + (deadline_s if deadline_s is not None else wait_s + DEADLINE_AFTER_WAIT_S)
        while True:
            last = time.monotonic() >= deadline - 0.05  # (a sleep may wake a tick early)
            # the last poll waits for every answer, but not past the command's deadline
            source.poller.budget_s = max(0.05, whole - time.monotonic()) if last else interval_s
            started = time.monotonic()
            frame = await source.poll()
            if keys is not None:
                keys.add(frame)
            if last:
                return frame
            if show:
                left = deadline - time.monotonic()
                sys.stderr.write(f"\rsampling: {left:4.0f} s left, {len(frame.engines)} engines ")
                sys.stderr.flush()
            pause = min(interval_s - (time.monotonic() - started), deadline - time.monotonic())
            await asyncio.sleep(max(0.0, pause))
    finally:
        if show:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        await source.aclose()


def settings_from(args: argparse.Namespace, demo: bool = False) -> Settings:
    try:
        settings = (
            demo_settings() if demo and not args.config else load_settings(config_path(args.config))
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.window is not None:
        try:
            parse_window(args.window)
        except (ValueError, KeyError, IndexError):
            raise UsageError(
                f"--window {args.window!r}: use a duration like 1m, 5m, 15m or 1h."
            ) from None
        settings.window = args.window
    if args.interval is not None:
        positive(args.interval, "--interval")
        settings.interval_s = args.interval
    return settings


def build(args: argparse.Namespace, demo: bool) -> tuple[LiveSource, DemoNode | None, Settings]:
    """(the live source, demo node or None, settings) for the chosen engines and GPUs."""
    settings = settings_from(args, demo)
    targets = [parse_engine(s) for s in args.engine] + config_targets(settings)
    node = None
    nvml = None
    if demo:
        from console.sim.demo import start_demo

        node = start_demo(settings)
        targets += node.targets()
        nvml = (
            None
            if args.no_gpu
            else NvmlReader(node.nvml, simulated=True, journal=mig_audit_log(demo=True))
        )
    elif getattr(args, "simulate_gpus", None):
        from console.sim.nvml import DeviceLoad, SimNvml

        sim = SimNvml(load=lambda g, m: DeviceLoad(0.5, 8 * 2**30))
        if args.simulate_gpus == "demo":
            sim.add_gpu("rtx-pro-6000-se")
            sim.add_gpu("rtx-pro-6000-se", mig=[("2g.48gb", 0), ("2g.48gb", 6)])
            sim.add_gpu("rtx-pro-6000-se", mig=[("1g.24gb", s) for s in (0, 3, 6, 9)])
            sim.add_gpu("rtx-pro-6000-se")
        else:
            for _ in range(8):
                sim.add_gpu("h100-80gb", mig=[("1g.10gb", s) for s in range(7)])
        nvml = NvmlReader(sim, simulated=True)
    elif not args.no_gpu:
        nvml = NvmlReader(journal=mig_audit_log())
    if not demo and not targets and settings.discover and not args.no_discover:
        targets = discover_targets(nvml)
    source = LiveSource.reading(targets, nvml, window_s=settings.window_s, plan=settings)
    poller = source.poller
    if settings._file is not None:  # its plan read again when the file changes
        poller.config = ConfigWatch(settings)
    poller.max_series = settings.scrape.max_series
    poller.max_label_chars = settings.scrape.max_label_chars
    k = settings.kubelet
    if k is not None:
        poller.kubelet = KubeletTarget(
            url=k.url,
            token_file=k.token_file,
            token_env=k.token_env,
            ca_file=k.ca_file,
            verify_tls=k.verify_tls,
        )
    return source, node, settings


def config_targets(settings: Settings) -> list[EngineTarget]:
    """The config's engines, with their credentials as headers."""
    return [
        EngineTarget(
            url=e.url,
            kind=e.kind,
            name=e.name,
            timeout_s=e.timeout_s,
            headers=token_headers(e),
            verify_tls=e.verify_tls,
            interval_s=e.interval_s,
            device=e.device,
            model=e.model,
            top_models=e.top_models,
            api_url=e.api_url,
            fetch_url=e.url_fetch,
        )
        for e in settings.engines
    ]


def discover_targets(nvml: NvmlReader | None) -> list[EngineTarget]:
    """Local engines from GPU processes, every process's command line, and default ports."""
    from console.read.discovery import discover

    devices: dict[int, str] = {}
    if nvml is not None:
        _, gpus = nvml.read()
        for g in gpus:
            for p in g.processes:
                devices[p.pid] = str(g.index)
            for d in g.mig.devices if g.mig else []:
                for p in d.processes:
                    devices[p.pid] = f"{g.index}/{d.index}"
    found = asyncio.run(discover(gpu_pids=list(devices)))
    return [
        EngineTarget(
            url=f.url,
            kind=f.kind,
            device=devices.get(f.pid) if f.pid else None,
            max_running=f.max_running,
        )
        for f in found
    ]


def open_recorder(
    out: str | None,
    source: LiveSource,
    settings: Settings,
    retention: float | None = None,
    flag: str = "--out",
) -> Recorder:
    """A recorder with its file already open: a path that cannot be written, or an existing file
    that is no recording, is one sentence now rather than a traceback at the first poll."""
    from console.read.recording import Recorder, RecordingError

    path = Path(out).expanduser() if out else recordings_dir()
    header = {
        "window_s": settings.window_s,
        "plan": settings.model_dump(mode="json", exclude={"engines"}),
    }
    rec = Recorder(path, source.deriver.host, header, retention, secrets=secrets_of(source.poller))
    try:
        rec.write_header(time.time())
    except RecordingError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot write a recording there ({exc.strerror})."
        ) from None
    return rec


def secrets_of(poller: Poller) -> list[str]:
    """Configured tokens, so they can be masked verbatim wherever they might appear."""
    out = []
    for st in poller.engines:
        for value in (st.target.headers or {}).values():
            out.append(value.removeprefix("Bearer ").strip())
        out += query_secrets(st.target.fetch_url)
    return out


def writable_dir(out: str, flag: str) -> Path:
    """A folder to write into, checked before any sampling: one sentence when it cannot be."""
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{flag} {out}: that is a file, not a folder; give a folder (it is created if missing)."
        )
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(
            f"{flag} {out}: {probe} is not writable by this user; pick another folder."
        )
    return path
