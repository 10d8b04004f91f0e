"""The fleet commands: the fleet screen, and ``snapshot``/``check`` with ``--prometheus``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from console.compose import NoAnswer, UsageError, settings_from
from console.figures.windowed import window_label
from console.read.scraper import (
    UrlError,
    check_url,
    split_query_secrets,
    without_credentials,
)
from console.settings import (
    ConfigError,
    Settings,
    load_settings,
    token_headers,
)
from console.units import PARTIAL, seconds, when_text

if TYPE_CHECKING:
    from console.figures.plan import Plan
    from console.fleet.source import FleetSource
    from console.fleet.state import FleetState, SloRow
    from console.frame import Severity
    from console.out.jsondocs import FleetCheckDoc


def fleet_source(args: argparse.Namespace) -> tuple[FleetSource, Settings, str]:
    """The fleet's source (Prometheus client, node plans, cost) and the URL shown for it."""
    from console.fleet.prom import PromClient
    from console.fleet.source import FleetSource

    settings = settings_from(args)
    prom = settings.prometheus
    url, auth = without_credentials(args.prometheus or (prom.url if prom else None) or "")
    try:
        check_url(url)
    except UrlError as exc:
        raise UsageError(f"--prometheus: {split_query_secrets(url)[0]}: {exc}") from None
    # the query string (a proxy's ?token=, a tenant's parameter) goes with every API call, after
    # the API path; every surface shows the URL with its secret values masked
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    base = urlunsplit(parts._replace(query="", fragment=""))
    url = split_query_secrets(url)[0]
    headers = dict(auth or {})
    verify, timeout_s, concurrency = True, 10.0, 4
    if prom is not None:
        headers = dict(token_headers(prom) or auth or {})
        verify, timeout_s, concurrency = prom.verify_tls, prom.timeout_s, prom.concurrency
        if prom.tenant:
            headers["X-Scope-OrgID"] = prom.tenant
    client = PromClient(
        base.rstrip("/").removesuffix("/metrics"),
        params=params,
        headers=headers,
        verify=verify,
        timeout_s=timeout_s,
        concurrency=concurrency,
    )
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


def run_fleet(args: argparse.Namespace) -> int:
    from screens.fleet import FleetApp

    source, settings, _ = fleet_source(args)
    FleetApp(source, interval_s=max(settings.interval_s, 5.0)).run(mouse=not args.no_mouse)
    return 0


def fleet_headless(args: argparse.Namespace, wait: float) -> tuple[FleetState, str]:
    """Poll Prometheus for ``wait`` seconds (at least once); every node's frame. Prometheus not
    answering at all is one sentence and exit 3."""
    source, settings, url = fleet_source(args)
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

    timeout_s = settings.prometheus.timeout_s if settings.prometheus else 10.0
    deadline = getattr(args, "deadline", None) or wait + timeout_s + 2.0
    try:
        state = asyncio.run(asyncio.wait_for(run(), deadline))
    except TimeoutError:
        raise NoAnswer(
            f"INFERDECK UNKNOWN - Prometheus at {url} gave no whole answer within the "
            f"{deadline:g} s deadline (--deadline)."
        ) from None
    if state.last_ok is None:
        why = "; ".join(f"{k}: {v}" for k, v in list(state.errors.items())[:2])
        raise NoAnswer(f"INFERDECK UNKNOWN - Prometheus at {url} did not answer ({why}).")
    return state, url


TIMELINE_LINES = 40  # as on a node's snapshot.md: longer timelines folded, said


def fleet_snapshot(args: argparse.Namespace) -> int:
    from console.fleet.state import fleet_timeline
    from console.out.jsondocs import checked

    state, url = fleet_headless(args, args.wait)
    nodes = _node_rows(state)
    taken = datetime.fromtimestamp(state.taken_at, tz=UTC).isoformat()
    tl = fleet_timeline(state)
    if args.format == "json":
        doc = _fleet_doc(state, url, taken, nodes)
        doc["timeline"] = tl.model_dump(mode="json", by_alias=True) if tl else None
        sys.stdout.write(checked("fleet-snapshot", doc, indent=1))
        return 0
    window = window_label(state.window_s) + (f" ({state.window_note})" if state.window_note else "")
    lines = [f"# inferdeck fleet — {url}", "", f"- taken at: {taken}", f"- window: {window}"]
    lines += [f"- backend: {state.backend or 'unknown'}; rates are {state.rates}"]
    if state.recorded:
        lines.append(
            f"- {len(state.recorded)} figures read from recording rules (inferdeck rules --fleet)"
        )
    lines.append("")
    if tl is not None:  # what happened while the snapshot watched, each node's first sign marked
        from console.figures.timeline import lines as timeline_lines

        now = datetime.fromtimestamp(state.taken_at, tz=UTC)
        lines += [f"## Timeline since {tl.since:%H:%M:%S}Z", ""]
        lines += [f"- {x}" for x in timeline_lines(tl, now, TIMELINE_LINES)] + [""]
    lines += _node_table(state, nodes) + _slo_table(state)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _node_rows(state: FleetState) -> list[dict[str, Any]]:
    """A row per node with every figure the fleet screen draws: its line, its active alerts,
    its GPUs and their MIG instances, and its GPU exporter."""
    from console.fleet.state import node_row

    nodes = []
    for name, f in sorted(state.nodes.items()):
        row = node_row(name, f, state.summary.get(name), state.down.get(name))
        row["active_alerts"] = [
            {
                "severity": a.severity,
                "subject": a.subject,
                "message": a.message,
                "since": a.since.isoformat(timespec="seconds"),
            }
            for a in f.alerts
            if a.state == "active"
        ]
        row["gpu_exporter"] = f.gpu_source.note
        row["gpu_figures"] = [
            g.model_dump(mode="json", exclude={"processes", "unavailable"}) for g in f.gpus
        ]
        nodes.append(row)
    return nodes


def _fleet_doc(
    state: FleetState, url: str, taken: str, nodes: list[dict[str, Any]]
) -> dict[str, Any]:
    """The fleet snapshot's JSON document (its timeline added by the caller)."""
    return {
        "schema": "inferdeck.fleet/1",
        "prometheus": url,
        "taken_at": taken,
        "window_s": state.window_s,
        "window_note": state.window_note,
        "backend": state.backend,
        "rates": state.rates,
        "from_recording_rules": state.recorded,
        "nodes": nodes,
        "errors": state.errors,
        "warnings": state.warnings,
        "other_targets_down": state.other_down,
        "slo": [
            {
                "service": r.service,
                "slo": r.slo,
                "node": r.node,
                "budget_left": r.remaining,
                "period": r.period or None,
                "budget_watched_s": r.watched_s,
                "burn_alert": r.alert,
                "state": r.state,
                "since": r.since,
            }
            for r in state.slo
        ],
        "slo_note": state.slo_note,
    }


def _node_table(state: FleetState, nodes: list[dict[str, Any]]) -> list[str]:
    """The nodes' table, then what it cannot hold: partial windows, active alerts, nodes down,
    failed queries, warnings and other jobs' targets down."""
    from console.fleet.state import other_down_line, partial, warnings_line

    lines = [
        "| node | GPUs | MIG | engines | worst | TTFT p95 | TTFT≤target | tok/s | $/M good | alerts |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in nodes:
        share = r["ttft_within_target"]
        cost = r["usd_per_m_compliant_tokens_at_least"]
        lines.append(
            f"| {r['node']} | {r['gpus']} | {r['mig']} | {r['engines']} | {r['worst']} | "
            f"{seconds(r['ttft'])}{partial(r, r['ttft'])} | "
            f"{'n/a' if share is None else f'{share * 100:.1f}%'} | "
            f"{'n/a' if r['tps'] is None else format(r['tps'], ',.0f')}{partial(r, r['tps'])} | "
            f"{'n/a' if cost is None else f'≥${cost:,.2f}'} | {r['alerts']} |"
        )
    for r in nodes:
        if r["window_covered_s"] is not None:
            lines.append(
                f"- {r['node']}: {PARTIAL} its targets are younger than the window: its figures "
                f"cover {r['window_covered_s']:.0f} s of {window_label(state.window_s)}"
            )
    for r in nodes:
        for a in r["active_alerts"]:
            lines.append(f"- {r['node']}: {a['severity'].upper()} {a['subject']}: {a['message']}")
    for r in nodes:
        if r["down"]:
            lines.append(f"- {r['node']}: down, {r['down']}")
    for q, why in state.errors.items():
        lines.append(f"- query {q} failed: {why}")
    lines += [f"- {line}" for line in (warnings_line(state), other_down_line(state)) if line]
    return lines


def _slo_table(state: FleetState) -> list[str]:
    """The SLOs Prometheus' rules compute: budget left and burn alert, each."""
    from console.fleet.state import budget_text

    lines = ["", "## SLO (Prometheus' rules: inferdeck rules --slo)", ""]
    if not state.slo:
        return lines + [f"- {state.slo_note or 'none read'}"]
    lines += ["| service | SLO | node | budget left | burn alert |", "|---|---|---|---|---|"]
    for o in state.slo:
        lines.append(
            f"| {o.service} | {o.slo} | {o.node or 'n/a'} | {budget_text(o)} | "
            f"{slo_line(o) if o.alert else 'none'} |"
        )
    return lines


def slo_line(r: SloRow) -> str:
    """A burn alert in one phrase: 'page firing since 12:03:04Z'."""
    since = datetime.fromtimestamp(r.since, tz=UTC).strftime("%H:%M:%SZ") if r.since else "?"
    return f"error budget burning: {r.alert} {r.state} since {since}"


def fleet_check(args: argparse.Namespace) -> int:
    """Exit by the worst node: 0 ok, 1 warning, 2 critical (3: Prometheus did not answer)."""
    from console.out.jsondocs import FleetCheckDoc, dump

    as_json = getattr(args, "format", "text") == "json"
    try:
        doc, lines = _fleet_verdict(args)
    except NoAnswer as exc:
        if not as_json:
            raise
        url = (args.prometheus or "").rstrip("/")
        doc = FleetCheckDoc(
            prometheus=url, taken_at=None, status="unknown", exit_code=3,
            first_line=str(exc), nodes=0,
        )  # fmt: skip
        lines = []
    if as_json:
        sys.stdout.write(dump(doc))
    else:
        print("\n".join(lines))
    return doc.exit_code


def _fleet_verdict(args: argparse.Namespace) -> tuple[FleetCheckDoc, list[str]]:
    """The fleet check as a record and as the plugin's lines."""
    from console.figures.alerts import SEVERITY_ORDER, worst
    from console.fleet.state import other_down_line, warnings_line
    from console.out.jsondocs import FleetCheckDoc, FleetDetail

    state, url = fleet_headless(args, args.wait)
    taken = datetime.fromtimestamp(state.taken_at, tz=UTC).isoformat() if state.taken_at else None
    if not state.nodes:
        line = f"INFERDECK UNKNOWN - {url}: Prometheus holds no inferdeck-readable node"
        doc = FleetCheckDoc(
            prometheus=url, taken_at=taken, status="unknown", exit_code=3, first_line=line,
            nodes=0,
        )  # fmt: skip
        return doc, [line]
    details: list[tuple[FleetDetail, str]] = []
    levels = []
    for name, f in sorted(state.nodes.items()):
        active = [a for a in f.alerts if a.state == "active"]
        active.sort(key=lambda a: SEVERITY_ORDER[a.severity])
        details += [
            (
                FleetDetail(
                    severity=a.severity, node=name, subject=a.subject, message=a.message,
                    since=a.since.isoformat(timespec="seconds"),
                ),
                f"{a.severity.upper()} {name} {a.subject}: {a.message}, since "
                f"{when_text(a.since.timestamp(), state.taken_at or time.time())}",
            )
            for a in active
        ]  # fmt: skip
        levels.append(worst(active))
    for r in state.slo:  # burning, with no node named by its rules (older rules): still counted
        if r.node is None and r.alert is not None and r.state == "firing":
            sev: Severity = "critical" if r.alert == "page" else "warning"
            since = datetime.fromtimestamp(r.since, tz=UTC).isoformat() if r.since else None
            detail = FleetDetail(
                severity=sev, node=None, subject=f"{r.service} {r.slo}", message=slo_line(r),
                since=since,
            )  # fmt: skip
            details.append((detail, f"{sev.upper()} {r.service} {r.slo}: {slo_line(r)}"))
            levels.append(sev)
    level: Literal["critical", "warning"] | None = (
        "critical" if "critical" in levels else "warning" if "warning" in levels else None
    )
    details.sort(key=lambda d: SEVERITY_ORDER[d[0].severity])
    partial = warnings_line(state)
    notes = []
    told = 0  # the partial answer said under a first line of alerts
    if level is None and partial:
        # a partial answer is never a silent OK: the nodes left out may be the ones down
        level = "warning"
        first = f"INFERDECK WARNING - {partial}"
    elif level is None:
        first = f"INFERDECK OK - {url}: {len(state.nodes)} nodes, no active alerts"
    else:
        head = details[0][1].split(" ", 1)[1].replace("|", "/")
        more = f" (+{len(details) - 1} more)" if len(details) > 1 else ""
        first = f"INFERDECK {level.upper()} - {head}{more}"
        if partial:
            notes.append(partial)
            told = 1
    other = other_down_line(state)
    if other:
        notes.append(other)
    if state.window_note:
        notes.append(f"window {window_label(state.window_s)}: {state.window_note}")
    status = level or "ok"
    code = {"critical": 2, "warning": 1}.get(status, 0)
    doc = FleetCheckDoc(
        prometheus=url, taken_at=taken, status=status, exit_code=code, first_line=first,
        nodes=len(state.nodes), details=[d for d, _ in details], notes=notes,
    )  # fmt: skip
    lines = [first, *notes[:told], *(text for _, text in details), *notes[told:]]
    return doc, lines
