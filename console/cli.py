"""Command line: ``inferdeck [demo|snapshot|simulate]``. User errors exit 2 with one sentence."""

from __future__ import annotations

import argparse
import copy
import os
import sys

from console import __version__
from console.commands.export import dashboards, export, rules
from console.commands.node import check, example_config, plan, simulate, snapshot
from console.commands.record import record, replay
from console.commands.tui import run_tui
from console.completion import SHELLS
from console.compose import NoAnswer, UsageError
from console.out.schemas import KINDS as SCHEMA_KINDS
from console.sim.formats import FORMATS
from console.sim.traffic import PROFILES

FORMAT_HELP = "text (default) or json (its schema: inferdeck schema COMMAND)"


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
    snap.add_argument(
        "--deadline",
        type=float,
        metavar="S",
        help="the whole command ends within S seconds (default: --wait + 8; with --prometheus, "
        "--wait + the query timeout + 2): a source still answering then is named as such",
    )
    snap.add_argument(
        "--format",
        choices=("json", "md"),
        default="json",
        help="json (default; schema: inferdeck schema frame, or fleet-snapshot with --prometheus) "
        "or md",
    )
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
    ex.add_argument(
        "--otlp",
        metavar="URL",
        help="also push each poll's figures over OTLP to this receiver (an OpenTelemetry "
        "Collector: http://127.0.0.1:4318, or http://127.0.0.1:4317 with --otlp-protocol grpc); "
        "needs pip install 'inferdeck[otlp]' (or 'inferdeck[otlp-grpc]')",
    )
    ex.add_argument(
        "--otlp-protocol",
        choices=("http/protobuf", "grpc"),
        help="how --otlp pushes (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
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
    rules.add_argument(
        "--slo",
        action="store_true",
        help="SLO recording rules and multi-window burn alerts from the engines' own series "
        "(they outlive any inferdeck process)",
    )
    rules.add_argument(
        "--window", metavar="DURATION", help="with --fleet: the window its records keep (1m)"
    )
    rules.add_argument(
        "--fleet",
        action="store_true",
        help="recording rules for every windowed figure the fleet view shows, at --window "
        "(the fleet reads them when present: a refresh of thousands of nodes stays cheap)",
    )
    rules.add_argument(
        "--period-days",
        type=int,
        default=None,
        metavar="DAYS",
        help="the error budget's period for --slo (default: each service's "
        "slo.budget_period_days, 28 unless set; the console judges burn over the same)",
    )
    rules.add_argument(
        "--tests",
        action="store_true",
        help="with --slo: print `promtool test rules` unit tests for those rules instead",
    )
    rules.add_argument(
        "--rule-file",
        default="inferdeck-slo.yaml",
        metavar="NAME",
        help="the rule file the --tests file names (default inferdeck-slo.yaml)",
    )
    rules.add_argument(
        "--format",
        choices=("rules", "prometheusrule"),
        default="rules",
        help="a Prometheus rule file, or the Prometheus Operator's PrometheusRule resource",
    )
    dash = sub.add_parser(
        "dashboards",
        help="Grafana (or Perses) dashboards (node, SLOs, fleet, one per engine kind) written from "
        "the engine profiles and the exporter's families",
    )
    dash.add_argument(
        "--format",
        choices=("grafana", "perses"),
        default="grafana",
        help="grafana (default), or perses (needs pip install 'inferdeck[perses]')",
    )
    dash.add_argument(
        "--out", metavar="DIR", help="one JSON file per dashboard there (else a JSON list)"
    )
    mig = sub.add_parser("mig", help="show, plan and change MIG layouts (root)")
    migsub = mig.add_subparsers(dest="mig_command", required=True)
    mig_common = argparse.ArgumentParser(add_help=False)
    mig_common.add_argument("--demo", action="store_true", help="act on the simulated demo node")
    show = migsub.add_parser("show", parents=[mig_common], help="every GPU's MIG mode and layout")
    show.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
    lay = migsub.add_parser("layouts", parents=[mig_common], help="the valid layouts of a GPU")
    lay.add_argument("gpu", type=int)
    lay.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
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
    rep.add_argument(
        "--recorder",
        metavar="HOST",
        help="in a folder holding several recorders' files, the one to replay (default: the "
        "newest; the others are named)",
    )
    tl = sub.add_parser(
        "timeline", help="what happened in a recording, in order, the first sign marked"
    )
    tl.add_argument("path", metavar="FILE|DIR")
    tl.add_argument(
        "--recorder",
        metavar="HOST",
        help="in a folder of several recorders' files, the one to read",
    )
    tl.add_argument(
        "--since", metavar="TIME", help="only events on at or after this ISO time (UTC by default)"
    )
    tl.add_argument(
        "--format",
        choices=["text", "json", "jsonl"],
        default="text",
        help="text (default); json (the timeline record, schema inferdeck.timeline/1); jsonl "
        "(one event a line, for log shippers)",
    )
    plan = sub.add_parser("plan", help="check that the plan fits, before anything runs")
    plan.add_argument("--config", metavar="FILE", help="config file with the plan")
    plan.add_argument("--demo", action="store_true", help="the demo node's plan")
    plan.add_argument("--format", choices=("text", "json"), default="text", help=FORMAT_HELP)
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
    check.add_argument(
        "--deadline",
        type=float,
        metavar="S",
        help="the check ends within S seconds (default: --wait + 8, inside Nagios' 10 s at the "
        "default --wait; with --prometheus, --wait + the query timeout + 2): an engine or NVML "
        "still answering then is named, never waited for",
    )
    check.add_argument(
        "--export",
        default="http://127.0.0.1:9464",
        metavar="URL|none",
        help="read the verdict of the inferdeck export serving here, over its full window, when "
        "it polls the same engines with the same plan (default http://127.0.0.1:9464; none: "
        "always sample)",
    )
    check.add_argument(
        "--export-token-file", metavar="FILE", help="the bearer token that export requires"
    )
    check.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the Nagios plugin's lines (default); json: the same verdict, perfdata and "
        "exit code as fields (schema: inferdeck schema check, or fleet-check with --prometheus)",
    )
    sim = sub.add_parser("simulate", help="serve a simulated engine's /metrics until interrupted")
    sim.add_argument("--engine", dest="sim_kind", choices=sorted(FORMATS), default="vllm")
    sim.add_argument("--port", type=int, default=0)
    sim.add_argument("--profile", choices=PROFILES, default="steady")
    sim.add_argument("--rate", type=float, default=4.0, help="mean requests per second")
    sch = sub.add_parser(
        "schema",
        help="print the JSON Schema of the config file, of a Frame (snapshot JSON) or of a "
        "command's --format json",
    )
    sch.add_argument("schema_kind", choices=SCHEMA_KINDS, metavar="|".join(SCHEMA_KINDS))
    comp = sub.add_parser(
        "completion",
        help="print the shell completion script: source <(inferdeck completion bash)",
    )
    comp.add_argument("shell", choices=SHELLS, metavar="|".join(SHELLS))
    sub.add_parser("man", help="print the man page (roff): inferdeck man > inferdeck.1")
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
            return example_config()
        if args.command in ("completion", "man"):
            from console.completion import script

            shell = "man" if args.command == "man" else args.shell
            sys.stdout.write(script(shell, _parser(), __version__))
            return 0
        if args.command == "schema":
            from console.out.schemas import print_schema

            return print_schema(args.schema_kind)
        if args.command == "snapshot":
            return snapshot(args)
        if args.command == "simulate":
            return simulate(args)
        if args.command == "plan":
            return plan(args)
        if args.command == "record":
            return record(args)
        if args.command == "replay":
            return replay(args)
        if args.command == "timeline":
            from console.commands.timeline import timeline

            return timeline(args)
        if args.command == "mig":
            from console.mig.cli import run_mig

            return run_mig(args)
        if args.command == "check":
            return check(args)
        if args.command == "export":
            return export(args)
        if args.command == "rules":
            return rules(args)
        if args.command == "dashboards":
            return dashboards(args)
        return run_tui(args, demo=args.command == "demo")
    except UsageError as exc:
        print(f"inferdeck: {exc}", file=sys.stderr)
        return 2
    except NoAnswer as exc:
        # with --format json, stdout holds JSON or nothing
        print(str(exc), file=sys.stderr if getattr(args, "format", "") == "json" else sys.stdout)
        return 3
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
