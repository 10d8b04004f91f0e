"""``inferdeck export`` (the frame's figures at /metrics) and ``inferdeck rules``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from console import __version__
from console.compose import UsageError, build, settings_from


def export(args: argparse.Namespace) -> int:
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
    poller, node, settings = build(args, args.demo)
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
        server.stop()
        if node is not None:
            node.stop()
    return 0


def rules(args: argparse.Namespace) -> int:
    import yaml

    from console.exporter import ALERTMANAGER_EXAMPLE, alert_rules
    from console.slorules import rule_groups, rule_tests, to_yaml

    settings = settings_from(args, args.demo)
    if args.alertmanager:
        sys.stdout.write(ALERTMANAGER_EXAMPLE)
    elif args.slo and args.tests:
        doc = rule_tests(settings, args.rule_file, args.period_days)
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, width=10_000))
    elif args.slo:
        doc, skipped = rule_groups(settings, args.period_days)
        sys.stdout.write(to_yaml(doc, skipped, args.format))
    elif args.format == "prometheusrule":
        sys.stdout.write(
            to_yaml(yaml.safe_load(alert_rules(settings)), [], args.format, "inferdeck")
        )
    else:
        sys.stdout.write(alert_rules(settings))
    return 0
