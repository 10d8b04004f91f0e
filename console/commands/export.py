"""``inferdeck export`` (the frame's figures at /metrics) and ``inferdeck rules``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from console import __version__
from console.compose import UsageError, build, secrets_of, settings_from, token_from_file

if TYPE_CHECKING:
    import ssl

    from console.frame import Frame
    from console.out.otlp import OtlpPush
    from console.read.live import LiveSource
    from console.settings import Settings


def export(args: argparse.Namespace) -> int:
    """Poll like the console, headless, and serve the newest frame's figures at /metrics. A scrape
    never waits for a poll: it gets the last page (a hung engine only ages it)."""
    import signal

    from console.out.exportserver import serve

    host, port, token, ctx = _listening(args)
    push = _otlp(args)
    live, node, settings = build(args, args.demo)
    served = _Served(settings, secrets_of(live.poller))
    if push is not None:
        push.secrets = list(served.secrets)
    try:
        server = serve(
            (host, port),
            lambda: served.page,
            token,
            ctx,
            verdict=served.verdict,
            health=served.health,
        )
    except OSError as exc:
        if node is not None:
            node.stop()
        raise UsageError(f"--listen {args.listen}: cannot listen there ({exc.strerror}).") from None
    stop = {"now": False}

    def halt(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, halt)
    live.poller.budget_s = settings.interval_s  # a hung engine never holds the page back
    scheme = "https" if args.tls_cert else "http"
    print(
        f"serving {scheme}://{args.listen}/metrics"
        + (f" and pushing to {push.url}" if push is not None else "")
        + f", polling every {settings.interval_s:g} s (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    try:
        asyncio.run(_polls(live, served, push, args.duration, stop))
    finally:
        server.stop()
        if push is not None:
            push.close()
        if node is not None:
            node.stop()
    return 0


def _listening(
    args: argparse.Namespace,
) -> tuple[str, int, str | None, ssl.SSLContext | None]:
    """Where to listen, the token a scrape must bring and the TLS context, from the flags: never
    beyond this machine without a token unless --insecure says so."""
    import ssl

    from console.out.exportserver import ListenError, is_loopback, parse_listen

    try:
        host, port = parse_listen(args.listen)
    except ListenError as exc:
        raise UsageError(str(exc)) from None
    token = token_from_file(args.token_file, "--token-file") if args.token_file else None
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
    return host, port, token, ctx


def _otlp(args: argparse.Namespace) -> OtlpPush | None:
    """The OTLP push --otlp asks for (its protocol from --otlp-protocol or the SDK's variables),
    or None."""
    if not getattr(args, "otlp", None):
        return None
    from console.out.otlp import PROTOCOLS, OtlpPush

    protocol = args.otlp_protocol
    if protocol is None:  # the SDK's own variables, metrics' first, as documented there
        named = ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        var = next((v for v in named if os.environ.get(v)), None)
        protocol = os.environ[var].strip() if var else "http/protobuf"
        if protocol not in PROTOCOLS:
            raise UsageError(
                f"{var}={protocol}: --otlp pushes {' or '.join(PROTOCOLS)}; set one of them "
                "or give --otlp-protocol."
            )
    if not args.otlp.startswith(("http://", "https://")):
        usual = "4317" if protocol == "grpc" else "4318"
        raise UsageError(
            f"--otlp {args.otlp}: give the receiver's URL, e.g. http://127.0.0.1:{usual} "
            f"(an OpenTelemetry Collector's default for {protocol})."
        )
    try:
        return OtlpPush(args.otlp, __version__, protocol=protocol)
    except RuntimeError as exc:
        raise UsageError(str(exc)) from None


class _Served:
    """What the server answers from: the newest frame's page, the verdict `inferdeck check`
    reads (built when asked, once per frame) and the health a kubelet's probe reads."""

    def __init__(self, settings: Settings, secrets: list[str]) -> None:
        self.settings, self.secrets = settings, secrets
        self.page = "# no frame yet\n"
        self.frame: Frame | None = None
        self.at: float | None = None
        self.stale_s = max(30.0, 10 * settings.interval_s)  # no poll this long: /healthz 503
        self._verdict: tuple[Frame, str] | None = None

    def took(self, frame: Frame) -> None:
        from console.out.exporter import frame_metrics

        self.page = frame_metrics(frame, self.settings, __version__)
        self.frame, self.at = frame, time.monotonic()

    def verdict(self) -> str:
        from console.out.exporter import plan_hash
        from console.out.redact import redact

        frame = self.frame
        if frame is None:
            return "{}"
        if self._verdict is None or self._verdict[0] is not frame:
            doc = {
                "schema": "inferdeck.verdict/1",
                "plan_hash": plan_hash(self.settings),
                "interval_s": self.settings.interval_s,
                "frame": json.loads(frame.to_json(indent=None)),
            }
            self._verdict = (frame, redact(json.dumps(doc), self.secrets))
        return self._verdict[1]

    def health(self) -> str:
        """Whether the polls go on (no token, no figure)."""
        from console.out.textserver import Unavailable

        if self.at is None:
            raise Unavailable("starting: no poll yet")
        age = time.monotonic() - self.at
        if age > self.stale_s:
            raise Unavailable(
                f"no poll for {age:.0f} s (every {self.settings.interval_s:g} s asked)"
            )
        return f"ok: last poll {age:.1f} s ago\n"


async def _polls(
    live: LiveSource,
    served: _Served,
    push: OtlpPush | None,
    duration: float | None,
    stop: dict[str, bool],
) -> None:
    """Poll at the interval until stopped (or for ``duration``), each frame served; pushed off
    the loop where --otlp asks (a slow receiver never holds the polls: a frame is skipped)."""
    told = {"n": 0}

    def tell(said: list[str]) -> None:
        for line in said[told["n"] :]:
            print(f"inferdeck: {line}", file=sys.stderr, flush=True)
        told["n"] = len(said)

    interval_s = served.settings.interval_s
    sending: asyncio.Task[bool] | None = None
    end = time.monotonic() + duration if duration else None
    try:
        while not stop["now"] and (end is None or time.monotonic() < end):
            started = time.monotonic()
            frame = await live.poll()
            served.took(frame)
            if push is not None and (sending is None or sending.done()):
                sending = asyncio.create_task(
                    asyncio.to_thread(push.send, frame, served.settings, live.last_sample)
                )
                sending.add_done_callback(lambda _: tell(push.said))
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    finally:
        if sending is not None:
            await sending  # the last push is whole
        await live.aclose()


def rules(args: argparse.Namespace) -> int:
    import yaml

    from console.out.exporter import ALERTMANAGER_EXAMPLE, alert_rules
    from console.out.slorules import rule_groups, rule_tests, to_yaml

    settings = settings_from(args, args.demo)
    if args.fleet:
        from console.fleet.promql import fleet_rule_groups

        doc = fleet_rule_groups(settings.window_s)
        sys.stdout.write(to_yaml(doc, [], args.format, "inferdeck-fleet"))
    elif args.alertmanager:
        sys.stdout.write(ALERTMANAGER_EXAMPLE)
    elif args.slo and args.tests:
        doc = rule_tests(settings, args.rule_file, args.period_days)
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, width=10_000))
    elif args.slo:
        doc, skipped = rule_groups(settings, args.period_days)
        sys.stdout.write(to_yaml(doc, skipped, args.format, per_service=True))
    elif args.format == "prometheusrule":
        sys.stdout.write(
            to_yaml(yaml.safe_load(alert_rules(settings)), [], args.format, "inferdeck")
        )
    else:
        sys.stdout.write(alert_rules(settings))
    return 0


def dashboards(args: argparse.Namespace) -> int:
    """Grafana (or Perses) dashboards from the engine profiles and the exporter's families: one
    file each under --out (written whole), else a JSON list of them on stdout."""
    from pathlib import Path

    from console.out.dashboards import dashboards as all_dashboards

    try:
        docs = all_dashboards(args.format)
    except RuntimeError as exc:  # --format perses without its package
        raise UsageError(str(exc)) from None
    if not args.out:
        sys.stdout.write(json.dumps(list(docs.values()), indent=1) + "\n")
        return 0
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, doc in docs.items():
            part = out / f".{name}.part"
            part.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            part.replace(out / name)
    except OSError as exc:
        raise UsageError(
            f"--out {args.out}: cannot write the dashboards there ({exc.strerror}); give a "
            "folder you can write."
        ) from None
    print(f"wrote {len(docs)} dashboards under {out}: {', '.join(docs)}", file=sys.stderr)
    return 0
