"""``inferdeck export`` (the frame's figures at /metrics) and ``inferdeck rules``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from console import __version__
from console.compose import UsageError, build, secrets_of, settings_from, token_from_file


def export(args: argparse.Namespace) -> int:
    """Poll like the console, headless, and serve the newest frame's figures at /metrics. A scrape
    never waits for a poll: it gets the last page (a hung engine only ages it)."""
    import signal
    import ssl

    from console.out.exporter import frame_metrics, plan_hash
    from console.out.exportserver import ListenError, is_loopback, parse_listen, serve
    from console.out.redact import redact

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
    push = None
    if getattr(args, "otlp", None):
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
            push = OtlpPush(args.otlp, __version__, protocol=protocol)
        except RuntimeError as exc:
            raise UsageError(str(exc)) from None
    live, node, settings = build(args, args.demo)
    page = {"text": "# no frame yet\n"}
    newest: dict[str, Any] = {"frame": None, "json": None, "at": None}
    stale_s = max(30.0, 10 * settings.interval_s)  # no poll this long: /healthz says 503
    secrets = secrets_of(live.poller)
    if push is not None:
        push.secrets = list(secrets)

    def verdict() -> str:
        """The newest frame for `inferdeck check` (built when asked, once per frame)."""
        frame = newest["frame"]
        if frame is None:
            return "{}"
        if newest["json"] is None or newest["json"][0] is not frame:
            doc = {
                "schema": "inferdeck.verdict/1",
                "plan_hash": plan_hash(settings),
                "interval_s": settings.interval_s,
                "frame": json.loads(frame.to_json(indent=None)),
            }
            newest["json"] = (frame, redact(json.dumps(doc), secrets))
        return str(newest["json"][1])

    def health() -> str:
        """Whether the polls go on (for a kubelet's probe: no token, no figure)."""
        from console.out.textserver import Unavailable

        if newest["at"] is None:
            raise Unavailable("starting: no poll yet")
        age = time.monotonic() - newest["at"]
        if age > stale_s:
            raise Unavailable(f"no poll for {age:.0f} s (every {settings.interval_s:g} s asked)")
        return f"ok: last poll {age:.1f} s ago\n"

    try:
        server = serve(
            (host, port), lambda: page["text"], token, ctx, verdict=verdict, health=health
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

    told = {"n": 0}

    def tell(said: list[str]) -> None:
        for line in said[told["n"] :]:
            print(f"inferdeck: {line}", file=sys.stderr, flush=True)
        told["n"] = len(said)

    async def loop() -> None:
        sending: asyncio.Task[bool] | None = None
        end = time.monotonic() + args.duration if args.duration else None
        try:
            while not stop["now"] and (end is None or time.monotonic() < end):
                started = time.monotonic()
                frame = await live.poll()
                page["text"] = frame_metrics(frame, settings, __version__)
                newest["frame"], newest["at"] = frame, time.monotonic()
                if push is not None and (sending is None or sending.done()):
                    # off the loop: a slow receiver never holds the polls (a frame is skipped)
                    sending = asyncio.create_task(
                        asyncio.to_thread(push.send, frame, settings, live.last_sample)
                    )
                    sending.add_done_callback(lambda _: tell(push.said))
                await asyncio.sleep(max(0.0, settings.interval_s - (time.monotonic() - started)))
        finally:
            if sending is not None:
                await sending  # the last push is whole
            await live.aclose()

    scheme = "https" if args.tls_cert else "http"
    print(
        f"serving {scheme}://{args.listen}/metrics"
        + (f" and pushing to {push.url}" if push is not None else "")
        + f", polling every {settings.interval_s:g} s (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    try:
        asyncio.run(loop())
    finally:
        server.stop()
        if push is not None:
            push.close()
        if node is not None:
            node.stop()
    return 0


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
