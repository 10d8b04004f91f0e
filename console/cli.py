"""Command line: ``inferdeck [demo|snapshot|simulate]``. User errors exit 2 with one sentence."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from console import __version__
from console.engines import kinds
from console.enginestats import parse_window
from console.frame import Frame
from console.keyseries import KeySeries
from console.nvml import NvmlReader
from console.paths import mig_audit_log, recordings_dir, snapshots_dir
from console.poller import EngineTarget, KubeletTarget, Poller
from console.scraper import (
    UrlError,
    check_url,
    query_secrets,
    split_query_secrets,
    without_credentials,
)
from console.settings import (
    ConfigError,
    Settings,
    config_path,
    demo_settings,
    load_settings,
    token_headers,
)
from console.sim.formats import FORMATS
from console.sim.traffic import PROFILES
from console.units import seconds

if TYPE_CHECKING:
    from console.fleet.source import FleetSource
    from console.fleet.state import FleetState
    from console.plan import Plan
    from console.recording import Recorder
    from console.sim.demo import DemoNode


class UsageError(Exception):
    """A mistake in how inferdeck was called; the message is the one sentence shown."""


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


def _without_defaults(parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(add_help=False)
    for action in parent._actions:
        mine = copy.copy(action)
        mine.default = argparse.SUPPRESS
        out._add_action(mine)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="inferdeck",
        description="Terminal operations console for GPU inference nodes.",
    )
    p.add_argument("--version", action="version", version=f"inferdeck {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="[KIND=]URL",
        help="an engine's /metrics URL (repeatable); KIND is detected when omitted",
    )
    common.add_argument(
        "--config",
        metavar="FILE",
        help="config file (default: $INFERDECK_CONFIG, "
        "~/.config/inferdeck/config.yaml, /etc/inferdeck/config.yaml)",
    )
    common.add_argument("--no-gpu", action="store_true", help="do not read NVML")
    common.add_argument("--no-discover", action="store_true", help="do not look for local engines")
    common.add_argument(
        "--simulate-gpus",
        choices=("demo", "big"),
        default=None,
        help="read a simulated NVML node instead of the driver (benchmarks): the demo's 4 GPUs, "
        "or 8 H100s with 7 MIG devices each",
    )
    common.add_argument(
        "--interval", type=float, default=None, help="seconds between polls (default 1)"
    )
    common.add_argument(
        "--window",
        default=None,
        metavar="DURATION",
        help="window for rates and percentiles: 1m (default), 5m, 15m, ...",
    )
    tui = argparse.ArgumentParser(add_help=False)
    tui.add_argument(
        "--record",
        nargs="?",
        const="",
        default=None,
        metavar="DIR|FILE",
        help="record every poll while the console runs (default dir: $XDG_STATE_HOME/inferdeck/recordings)",
    )
    tui.add_argument(
        "--read-only", action="store_true", help="hide every action that changes the node"
    )
    tui.add_argument(
        "--no-mouse", action="store_true", help="leave the mouse to the terminal (native selection)"
    )
    tui.add_argument(
        "--prometheus", metavar="URL", help="the fleet view: read every node from this Prometheus"
    )
    # top level runs the TUI too
    for action in common._actions + tui._actions:
        if action.dest != "help":
            p._add_action(action)
    # a command's copies hold no defaults: options given before the command keep their values
    # (argparse would reset them to the command's defaults)
    common, tui = _without_defaults(common), _without_defaults(tui)
    sub = p.add_subparsers(dest="command")
    sub.add_parser("demo", parents=[common, tui], help="the console on a simulated node")
    snap = sub.add_parser(
        "snapshot", parents=[common], help="sample headless, then print one Frame"
    )
    snap.add_argument("--demo", action="store_true", help="read the simulated demo node")
    snap.add_argument(
        "--prometheus", metavar="URL", help="every node of the fleet from this Prometheus instead"
    )
    snap.add_argument(
        "--wait", type=float, default=3.0, help="seconds to sample before printing (default 3)"
    )
    snap.add_argument("--format", choices=("json", "md"), default="json")
    snap.add_argument(
        "--out", metavar="DIR", help="write a bundle (snapshot.md + frame.json) under DIR instead"
    )
    snap.add_argument(
        "--note", default="", help="a one-line note (incident id) for the bundle's name and header"
    )
    rec = sub.add_parser(
        "record", parents=[common], help="record every poll, headless, until stopped"
    )
    rec.add_argument("--demo", action="store_true", help="record the simulated demo node")
    rec.add_argument(
        "--out",
        metavar="DIR|FILE",
        help="a directory (one file per run and day) or one .idrec.gz file",
    )
    rec.add_argument(
        "--retention",
        type=float,
        default=None,
        metavar="HOURS",
        help="delete recording files older than this (directories only)",
    )
    rec.add_argument(
        "--duration", type=float, default=None, metavar="SECONDS", help="stop after this long"
    )
    ex = sub.add_parser(
        "export",
        parents=[common],
        help="serve inferdeck's figures (headroom, SLO, burn, cost, alerts) at /metrics for Prometheus",
    )
    ex.add_argument("--demo", action="store_true", help="export the simulated demo node")
    ex.add_argument(
        "--listen",
        default="127.0.0.1:9464",
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:9464; another only when given)",
    )
    ex.add_argument("--token-file", metavar="FILE", help="require this bearer token")
    ex.add_argument(
        "--insecure",
        action="store_true",
        help="serve a non-loopback address without a token (anyone who reaches it reads it)",
    )
    ex.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate")
    ex.add_argument("--tls-key", metavar="FILE", help="... and this key")
    ex.add_argument(
        "--duration", type=float, default=None, metavar="SECONDS", help="stop after this long"
    )
    rules = sub.add_parser(
        "rules", help="Prometheus alerting rules over `inferdeck export`'s series"
    )
    rules.add_argument("--config", metavar="FILE", help="config file (the plan's for durations)")
    rules.add_argument("--demo", action="store_true", help="the rules for the demo node's plan")
    rules.add_argument(
        "--alertmanager", action="store_true", help="print an Alertmanager routing example instead"
    )
    mig = sub.add_parser("mig", help="show, plan and change MIG layouts (root)")
    migsub = mig.add_subparsers(dest="mig_command", required=True)
    mig_common = argparse.ArgumentParser(add_help=False)
    mig_common.add_argument("--demo", action="store_true", help="act on the simulated demo node")
    migsub.add_parser("show", parents=[mig_common], help="every GPU's MIG mode and layout")
    lay = migsub.add_parser("layouts", parents=[mig_common], help="the valid layouts of a GPU")
    lay.add_argument("gpu", type=int)
    app_ = migsub.add_parser(
        "apply", parents=[mig_common], help="change a GPU's layout (or disable/enable MIG)"
    )
    app_.add_argument("gpu", type=int)
    app_.add_argument(
        "layout", help="e.g. 2g.48gb@0,1g.24gb@6,1g.24gb@9 or 2g.48gb+1g.24gb*2, disable, enable"
    )
    app_.add_argument(
        "--dry-run", action="store_true", help="show the plan and the nvidia-smi commands only"
    )
    app_.add_argument("--yes", action="store_true", help="do not ask to type the GPU index")
    app_.add_argument(
        "--force", action="store_true", help="go ahead despite plan warnings (never over processes)"
    )
    exp = migsub.add_parser(
        "export", parents=[mig_common], help="the node's layout as a mig-parted config"
    )
    exp.add_argument("--format", choices=("mig-parted",), default="mig-parted")
    exp.add_argument("--out", metavar="FILE", help="write there instead of stdout")
    exp.add_argument("--config-label", default="current")
    imp = migsub.add_parser("import", parents=[mig_common], help="apply a mig-parted config label")
    imp.add_argument("file")
    imp.add_argument("--config-label", required=True)
    imp.add_argument("--dry-run", action="store_true")
    imp.add_argument("--yes", action="store_true")
    rep = sub.add_parser("replay", help="open a recording in the console, read-only")
    rep.add_argument("path", metavar="FILE|DIR")
    plan = sub.add_parser("plan", help="check that the plan fits, before anything runs")
    plan.add_argument("--config", metavar="FILE", help="config file with the plan")
    plan.add_argument("--demo", action="store_true", help="the demo node's plan")
    plan.add_argument("--format", choices=("text", "json"), default="text")
    check = sub.add_parser(
        "check",
        parents=[common],
        help="the node's verdict as a Nagios plugin: first line and exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN",
    )
    check.add_argument("--demo", action="store_true", help="check the simulated demo node")
    check.add_argument(
        "--prometheus", metavar="URL", help="check every node of the fleet from this Prometheus"
    )
    check.add_argument(
        "--wait",
        type=float,
        default=2.0,
        help="seconds to sample (default 2: three polls, so windows hold steps, not lifetimes)",
    )
    sim = sub.add_parser("simulate", help="serve a simulated engine's /metrics until interrupted")
    sim.add_argument("--engine", dest="sim_kind", choices=sorted(FORMATS), default="vllm")
    sim.add_argument("--port", type=int, default=0)
    sim.add_argument("--profile", choices=PROFILES, default="steady")
    sim.add_argument("--rate", type=float, default=4.0, help="mean requests per second")
    sch = sub.add_parser(
        "schema", help="print the JSON Schema of the config file or of a Frame (snapshot JSON)"
    )
    sch.add_argument("schema_kind", choices=("config", "frame"), metavar="config|frame")
    sub.add_parser(
        "example-config",
        help="print the commented example config (inferdeck example-config > config.yaml)",
    )
    _one_option_everywhere(p)
    return p


def _one_option_everywhere(p: argparse.ArgumentParser) -> None:
    """An option that stands both before the command and in it (``--config``, ``--prometheus``,
    ...) is one option: the command's copy holds no default, so a value given before the command is
    kept (argparse would reset it to the command's default)."""
    top = {a.dest for a in p._actions}

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    for a in child._actions:
                        if a.dest in top and a.option_strings and a.dest != "help":
                            a.default = argparse.SUPPRESS
                    walk(child)

    walk(p)


def _positive(value: float, flag: str, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(
            f"{flag} must be {'zero or more' if allow_zero else 'more than zero'}, not {value:g}."
        )


async def sample(
    poller: Poller, wait_s: float, interval_s: float, keys: KeySeries | None = None
) -> Frame:
    """Poll for ``wait_s`` seconds (at least once) and return the last Frame. On a terminal the
    wait counts down on stderr (never in a pipe, never into the JSON on stdout)."""
    show = wait_s >= 1 and sys.stderr.isatty()
    try:
        deadline = time.monotonic() + wait_s
        frame = await poller.poll()
        if keys is not None:
            keys.add(frame)
        while time.monotonic() < deadline:
            if show:
                left = deadline - time.monotonic()
                sys.stderr.write(f"\rsampling: {left:4.0f} s left, {len(frame.engines)} engines ")
                sys.stderr.flush()
            await asyncio.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
            frame = await poller.poll()
            if keys is not None:
                keys.add(frame)
        return frame
    finally:
        if show:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        await poller.aclose()


def _settings(args: argparse.Namespace, demo: bool = False) -> Settings:
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
        _positive(args.interval, "--interval")
        settings.interval_s = args.interval
    return settings


def _build(args: argparse.Namespace, demo: bool) -> tuple[Poller, DemoNode | None, Settings]:
    """(poller, demo node or None, settings) for the chosen source."""
    settings = _settings(args, demo)
    targets = [parse_engine(s) for s in args.engine] + config_targets(settings)
    node = None
    nvml = None
    if demo:
        from console.sim.demo import start_demo

        node = start_demo(settings)
        targets += node.targets()
        nvml = None if args.no_gpu else NvmlReader(node.nvml, simulated=True)
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
        nvml = NvmlReader()
    if not demo and not targets and settings.discover and not args.no_discover:
        targets = discover_targets(nvml)
    poller = Poller(targets, nvml, window_s=settings.window_s, plan=settings)
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
    return poller, node, settings


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
    from console.discovery import discover

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
        EngineTarget(url=f.url, kind=f.kind, device=devices.get(f.pid) if f.pid else None)
        for f in found
    ]


def _recorder(
    out: str | None,
    poller: Poller,
    settings: Settings,
    retention: float | None = None,
    flag: str = "--out",
) -> Recorder:
    """A recorder with its file already open: a path that cannot be written, or an existing file
    that is no recording, is one sentence now rather than a traceback at the first poll."""
    from console.recording import Recorder, RecordingError

    path = Path(out).expanduser() if out else recordings_dir()
    header = {
        "window_s": settings.window_s,
        "plan": settings.model_dump(mode="json", exclude={"engines"}),
    }
    rec = Recorder(path, poller.deriver.host, header, retention, secrets=_secrets(poller))
    try:
        rec.write_header(time.time())
    except RecordingError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot write a recording there ({exc.strerror})."
        ) from None
    return rec


def _secrets(poller: Poller) -> list[str]:
    """Configured tokens, so they can be masked verbatim wherever they might appear."""
    out = []
    for st in poller.engines:
        for value in (st.target.headers or {}).values():
            out.append(value.removeprefix("Bearer ").strip())
        out += query_secrets(st.target.fetch_url)
    return out


def _fleet_source(args: argparse.Namespace) -> tuple[FleetSource, Settings, str]:
    """The fleet's source (Prometheus client, node plans, cost) and the URL shown for it."""
    from console.fleet.prom import PromClient
    from console.fleet.source import FleetSource

    settings = _settings(args)
    prom = settings.prometheus
    url, auth = without_credentials(args.prometheus or (prom.url if prom else None) or "")
    try:
        check_url(url)
    except UrlError as exc:
        raise UsageError(f"--prometheus: {exc}") from None
    headers = auth
    verify = True
    if prom is not None:
        headers = token_headers(prom) or auth
        verify = prom.verify_tls
    client = PromClient(url.rstrip("/").removesuffix("/metrics"), headers=headers, verify=verify)
    plans: dict[str, Plan] = {}
    for node, path in settings.node_plans.items():
        try:
            plans[node] = load_settings(Path(path).expanduser())
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    if settings.services and settings.node.name:
        plans.setdefault(settings.node.name, settings)
    source = FleetSource(client, window_s=settings.window_s, plans=plans, cost=settings.cost)
    return source, settings, url


def _run_fleet(args: argparse.Namespace) -> int:
    from screens.fleet import FleetApp

    source, settings, _ = _fleet_source(args)
    FleetApp(source, interval_s=max(settings.interval_s, 5.0)).run(mouse=not args.no_mouse)
    return 0


def _fleet_headless(args: argparse.Namespace, wait: float) -> tuple[FleetState, str]:
    """Poll Prometheus for ``wait`` seconds (at least once); every node's frame. Prometheus not
    answering at all is one sentence and exit 3."""
    source, settings, url = _fleet_source(args)
    # a headless look raises what holds at once: capping each `for` at the wait made the code
    # depend on how many milliseconds the sampling fell short (the nodes' own exports hold theirs)
    source.max_for_s = 0.0

    async def run() -> FleetState:
        try:
            end = time.monotonic() + wait
            state = await source.poll()
            while time.monotonic() < end:
                await asyncio.sleep(min(settings.interval_s, max(0.0, end - time.monotonic())))
                state = await source.poll()
            return state
        finally:
            await source.aclose()

    state = asyncio.run(run())
    if state.last_ok is None:
        why = "; ".join(f"{k}: {v}" for k, v in list(state.errors.items())[:2])
        raise NoAnswer(f"INFERDECK UNKNOWN - Prometheus at {url} did not answer ({why}).")
    return state, url


class NoAnswer(Exception):
    """Nothing could be read: exit 3 with one sentence."""


def _fleet_snapshot(args: argparse.Namespace) -> int:
    from console.fleet.state import node_row

    state, url = _fleet_headless(args, args.wait)
    nodes = []
    for name, f in sorted(state.nodes.items()):
        row = node_row(name, f, state.summary.get(name))
        row["active_alerts"] = [
            {"severity": a.severity, "subject": a.subject, "message": a.message}
            for a in f.alerts
            if a.state == "active"
        ]
        # every figure the fleet screen draws: the GPUs and their MIG instances, and the exporter
        row["gpu_exporter"] = f.gpu_source.note
        row["gpu_figures"] = [
            g.model_dump(mode="json", exclude={"processes", "unavailable"}) for g in f.gpus
        ]
        nodes.append(row)
    taken = datetime.fromtimestamp(state.taken_at, tz=UTC).isoformat()
    if args.format == "json":
        doc = {
            "schema": "inferdeck.fleet/1",
            "prometheus": url,
            "taken_at": taken,
            "nodes": nodes,
            "errors": state.errors,
        }
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return 0
    lines = [f"# inferdeck fleet — {url}", "", f"- taken at: {taken}", ""]
    lines += [
        "| node | GPUs | MIG | engines | worst | TTFT p95 | TTFT≤target | tok/s | $/M good | alerts |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in nodes:
        share = r["ttft_within_target"]
        cost = r["usd_per_m_compliant_tokens_at_least"]
        lines.append(
            f"| {r['node']} | {r['gpus']} | {r['mig']} | {r['engines']} | {r['worst']} | "
            f"{seconds(r['ttft'])} | {'n/a' if share is None else f'{share * 100:.1f}%'} | "
            f"{r['tps']:,.0f} | {'n/a' if cost is None else f'≥${cost:,.2f}'} | {r['alerts']} |"
        )
    for r in nodes:
        for a in r["active_alerts"]:
            lines.append(f"- {r['node']}: {a['severity'].upper()} {a['subject']}: {a['message']}")
    for q, why in state.errors.items():
        lines.append(f"- query {q} failed: {why}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _fleet_check(args: argparse.Namespace) -> int:
    """Exit by the worst node: 0 ok, 1 warning, 2 critical (3: Prometheus did not answer)."""
    from console.alerts import SEVERITY_ORDER, worst

    state, url = _fleet_headless(args, args.wait)
    if not state.nodes:
        print(f"INFERDECK UNKNOWN - {url}: Prometheus holds no inferdeck-readable node")
        return 3
    details, levels = [], []
    for name, f in sorted(state.nodes.items()):
        active = [a for a in f.alerts if a.state == "active"]
        active.sort(key=lambda a: SEVERITY_ORDER[a.severity])
        details += [
            (a.severity, f"{a.severity.upper()} {name} {a.subject}: {a.message}") for a in active
        ]
        levels.append(worst(active))
    level = "critical" if "critical" in levels else "warning" if "warning" in levels else None
    details.sort(key=lambda d: SEVERITY_ORDER[d[0]])
    if level is None:
        print(f"INFERDECK OK - {url}: {len(state.nodes)} nodes, no active alerts")
    else:
        head = details[0][1].split(" ", 1)[1].replace("|", "/")
        more = f" (+{len(details) - 1} more)" if len(details) > 1 else ""
        print(f"INFERDECK {level.upper()} - {head}{more}")
    for _, line in details:
        print(line)
    return {"critical": 2, "warning": 1}.get(level or "", 0)


def _run_tui(args: argparse.Namespace, demo: bool) -> int:
    if getattr(args, "prometheus", None) or (not demo and _settings(args).prometheus is not None):
        return _run_fleet(args)
    poller, node, settings = _build(args, demo)
    from screens.app import InferdeckApp

    if args.record is not None:
        poller.recorder = _recorder(args.record, poller, settings, flag="--record")
    try:
        mig = None
        if poller.nvml is not None:  # read-only: the menu shows layouts, every apply refused
            from console.mig.manager import MigManager

            lib = poller.nvml.lib or (poller.nvml.read() and poller.nvml.lib)
            snapdir = snapshots_dir(settings.snapshot_dir, demo)
            mig = (
                MigManager(
                    lib,
                    audit_path=mig_audit_log(demo),
                    simulated=demo,
                    snapshot=lambda when: _mig_snapshot(poller, snapdir, when, demo),
                )
                if lib
                else None
            )
        poller.budget_s = max(
            0.2, settings.interval_s * 0.8
        )  # a hung engine never holds the screen
        app = InferdeckApp(
            poller,
            interval_s=settings.interval_s,
            title="inferdeck demo" if demo else "inferdeck",
            read_only=args.read_only,
            snapshot_dir=snapshots_dir(settings.snapshot_dir),
            secrets=_secrets(poller),
            mig=mig,
        )
        app.run(mouse=not args.no_mouse)
    finally:
        if node is not None:
            node.stop()
    return app.return_code or 0  # a crash inside the app is 1, never 0


def _mig_snapshot(poller: Poller, root: Path, when: str, simulated: bool = False) -> Path | None:
    """The automatic bundle before and after a MIG change: the last frame, with the GPUs read
    afresh after the change."""
    from console.bundle import write_bundle

    frame = poller.last_frame
    if frame is None:
        return None
    if when == "after" and poller.nvml is not None:
        source, gpus = poller.nvml.read()
        frame = frame.model_copy(
            update={"gpus": gpus, "gpu_source": source, "taken_at": datetime.now(tz=UTC)}
        )
    return write_bundle(
        root, frame, f"mig {when}" + (" simulated" if simulated else ""), secrets=_secrets(poller)
    )


def _record(args: argparse.Namespace) -> int:
    import signal

    if args.retention is not None:
        _positive(args.retention, "--retention")
    if args.out and not args.out.endswith(".gz"):
        _writable_dir(args.out, "--out")
    poller, node, settings = _build(args, args.demo)
    try:
        poller.recorder = rec = _recorder(args.out, poller, settings, args.retention)
    except UsageError:
        if node is not None:
            node.stop()
        raise
    stop = {"now": False}

    def halt(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, halt)

    show = sys.stderr.isatty()  # progress on a terminal only (never into a pipe or a log)

    async def loop() -> None:
        begun = time.monotonic()
        end = begun + args.duration if args.duration else None
        try:
            while not stop["now"] and (end is None or time.monotonic() < end):
                started = time.monotonic()
                await poller.poll()
                if show:
                    sys.stderr.write(f"\r{record_progress(rec, time.monotonic() - begun)}\033[K")
                    sys.stderr.flush()
                await asyncio.sleep(max(0.0, settings.interval_s - (time.monotonic() - started)))
        finally:
            if show:
                sys.stderr.write("\r\033[K")
            await poller.aclose()

    print(
        f"recording to {rec.out} every {settings.interval_s:g} s (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    try:
        asyncio.run(loop())
    finally:
        if node is not None:
            node.stop()
    print(f"recorded {rec.frames} frames to {rec.path}", file=sys.stderr)
    return 0


def record_progress(rec: Recorder, elapsed_s: float) -> str:
    """One status line while recording: frames, file size, time, file."""
    try:
        size = rec.path.stat().st_size if rec.path is not None else 0
    except OSError:
        size = 0
    minutes, seconds = divmod(int(elapsed_s), 60)
    amount = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"
    return f"recording: {rec.frames:,} frames, {amount}, {minutes}:{seconds:02d} → {rec.path}"


def _rules(args: argparse.Namespace) -> int:
    from console.exporter import ALERTMANAGER_EXAMPLE, alert_rules

    settings = _settings(args, args.demo)
    sys.stdout.write(ALERTMANAGER_EXAMPLE if args.alertmanager else alert_rules(settings))
    return 0


def _example_config() -> int:
    from importlib import resources

    sys.stdout.write(resources.files("config").joinpath("example.yaml").read_text("utf-8"))
    return 0


def _export(args: argparse.Namespace) -> int:
    """Poll like the console, headless, and serve the newest frame's figures at /metrics. A scrape
    never waits for a poll: it gets the last page (a hung engine only ages it)."""
    import signal
    import ssl

    from console.exporter import frame_metrics
    from console.exportserver import ListenError, is_loopback, parse_listen, serve

    try:
        host, port = parse_listen(args.listen)
    except ListenError as exc:
        raise UsageError(str(exc)) from None
    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(
                f"--token-file {args.token_file}: cannot read it ({exc.strerror})."
            ) from None
        if not token:
            raise UsageError(f"--token-file {args.token_file}: the file is empty.")
    if token is None and not is_loopback(host) and not args.insecure:
        raise UsageError(
            f"--listen {args.listen}: serving beyond this machine without a token; give "
            "--token-file FILE, or --insecure to serve anyone who can reach it."
        )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together: give both, or neither.")
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--tls-cert/--tls-key: cannot load them ({exc}).") from None
    poller, node, settings = _build(args, args.demo)
    page = {"text": "# no frame yet\n"}
    try:
        server = serve((host, port), lambda: page["text"], token, ctx)
    except OSError as exc:
        if node is not None:
            node.stop()
        raise UsageError(f"--listen {args.listen}: cannot listen there ({exc.strerror}).") from None
    stop = {"now": False}

    def halt(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, halt)
    poller.budget_s = settings.interval_s  # a hung engine never holds the page back

    async def loop() -> None:
        end = time.monotonic() + args.duration if args.duration else None
        try:
            while not stop["now"] and (end is None or time.monotonic() < end):
                started = time.monotonic()
                frame = await poller.poll()
                page["text"] = frame_metrics(frame, settings, __version__)
                await asyncio.sleep(max(0.0, settings.interval_s - (time.monotonic() - started)))
        finally:
            await poller.aclose()

    scheme = "https" if args.tls_cert else "http"
    print(
        f"serving {scheme}://{args.listen}/metrics, polling every {settings.interval_s:g} s "
        "(Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    try:
        asyncio.run(loop())
    finally:
        server.shutdown()
        if node is not None:
            node.stop()
    return 0


def _replay(args: argparse.Namespace) -> int:
    from console.recording import RecordingError, read
    from console.replay import ReplaySource
    from screens.app import InferdeckApp

    try:
        header, samples = read(Path(args.path).expanduser())
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{args.path}: cannot read it ({exc.strerror}).") from None
    if not samples:
        raise UsageError(f"{args.path}: the recording holds a header but no frames yet.")
    for note in header.get("truncated", []):
        print(f"inferdeck: {note}.", file=sys.stderr)
    source = ReplaySource(header, samples)
    source.origin = str(Path(args.path).expanduser())  # a bundle saved in the replay names it
    InferdeckApp(
        source,
        interval_s=0.25,
        title=f"inferdeck replay {header.get('host', '')}",
        read_only=True,
        replay=source,
    ).run()
    return 0


def _writable_dir(out: str, flag: str) -> Path:
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


def _one_line(note: str) -> str:
    if "\n" in note or "\r" in note:
        raise UsageError("--note must be one line (it names the bundle and heads snapshot.md).")
    return note.strip()


def _snapshot(args: argparse.Namespace) -> int:
    _positive(args.wait, "--wait", allow_zero=True)
    if args.prometheus:
        return _fleet_snapshot(args)
    note = _one_line(args.note)
    out = _writable_dir(args.out, "--out") if args.out else None
    poller, node, settings = _build(args, args.demo)
    keys = KeySeries()
    try:
        frame = asyncio.run(sample(poller, args.wait, settings.interval_s, keys))
    finally:
        if node is not None:
            node.stop()
    if out is not None:
        from console.bundle import write_bundle

        try:
            path = write_bundle(out, frame, note, keys.export(), secrets=_secrets(poller))
        except OSError as exc:
            raise UsageError(
                f"--out {args.out}: cannot write the bundle there ({exc.strerror})."
            ) from None
        print(path)
        return 0
    if args.format == "md":
        from console.snapshot import to_markdown

        sys.stdout.write(to_markdown(frame))
    else:
        sys.stdout.write(frame.to_json() + "\n")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from console.planreport import plan_fits, plan_json, plan_text

    args.window = args.interval = None
    settings = _settings(args, args.demo)
    if not settings.services:
        raise UsageError(
            "the config has no services to plan; add a services: list "
            "(`inferdeck example-config` prints an example with every key)."
        )
    sys.stdout.write(plan_json(settings) if args.format == "json" else plan_text(settings))
    verdict = plan_fits(settings)
    if verdict is None:  # a deploy gate must not pass on "?"
        print(
            "inferdeck: fit cannot be decided: a device's capacity is unknown (name the node's "
            "gpu_model in the config, or run where NVML reads the GPUs); exit 3",
            file=sys.stderr,
        )
        return 3
    return 1 if verdict is False else 0


def _check(args: argparse.Namespace) -> int:
    """A Nagios plugin: the first line is the node's verdict with performance data, the details
    follow; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. The verdict is the console's: alerts,
    findings, and conditions that hold but whose hold has not elapsed (pending, a warning), so the
    same state gives the same code however long the check sampled."""
    from console.checkplugin import check_lines
    from console.verdict import EXIT

    _positive(args.wait, "--wait", allow_zero=True)
    if args.prometheus:
        return _fleet_check(args)
    poller, node, settings = _build(args, args.demo)
    try:
        frame = asyncio.run(sample(poller, args.wait, settings.interval_s))
    finally:
        if node is not None:
            node.stop()
    print("\n".join(check_lines(frame, settings)))
    return EXIT[frame.status]


def _simulate(args: argparse.Namespace) -> int:
    from console.sim.engine import TrafficSpec, start_engine

    try:
        eng = start_engine(
            args.sim_kind, TrafficSpec(rate_rps=args.rate, profile=args.profile), port=args.port
        )
    except OSError as exc:
        raise UsageError(
            f"cannot listen on 127.0.0.1:{args.port} ({exc.strerror}); pick another --port."
        ) from None
    print(
        f"simulated {args.sim_kind} ({args.profile}) serving {eng.url}  (Ctrl-C stops)", flush=True
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        eng.server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        demo = args.command == "demo" or getattr(args, "demo", False)
        if demo and getattr(args, "prometheus", None):
            raise UsageError(
                "--demo and --prometheus cannot go together: the demo is one simulated node, "
                "Prometheus the fleet; drop one of them."
            )
        if args.command == "example-config":
            return _example_config()
        if args.command == "schema":
            from console.schemas import print_schema

            return print_schema(args.schema_kind)
        if args.command == "snapshot":
            return _snapshot(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "record":
            return _record(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "mig":
            from console.mig.cli import run_mig

            return run_mig(args)
        if args.command == "check":
            return _check(args)
        if args.command == "export":
            return _export(args)
        if args.command == "rules":
            return _rules(args)
        return _run_tui(args, demo=args.command == "demo")
    except UsageError as exc:
        print(f"inferdeck: {exc}", file=sys.stderr)
        return 2
    except NoAnswer as exc:
        print(str(exc))
        return 3
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
