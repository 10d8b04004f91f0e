"""The one-shot commands on this node: ``snapshot``, ``plan``, ``check``, ``example-config``,
``simulate``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING

from console.commands.fleet import fleet_check, fleet_snapshot
from console.compose import (
    DEADLINE_AFTER_WAIT_S,
    UsageError,
    build,
    positive,
    sample,
    secrets_of,
    settings_from,
    token_from_file,
    writable_dir,
)
from console.figures.keyseries import KeySeries

if TYPE_CHECKING:
    from console.frame import Frame
    from console.read.poller import Poller
    from console.settings import Settings


def one_line(note: str) -> str:
    if "\n" in note or "\r" in note:
        raise UsageError("--note must be one line (it names the bundle and heads snapshot.md).")
    return note.strip()


def snapshot(args: argparse.Namespace) -> int:
    positive(args.wait, "--wait", allow_zero=True)
    if args.prometheus:
        return fleet_snapshot(args)
    note = one_line(args.note)
    out = writable_dir(args.out, "--out") if args.out else None
    live, node, settings = build(args, args.demo)
    keys = KeySeries()
    try:
        frame = asyncio.run(
            sample(live, args.wait, settings.interval_s, keys, deadline_s=deadline_of(args))
        )
    finally:
        if node is not None:
            node.stop()
    if out is not None:
        from console.out.bundle import write_bundle

        try:
            path = write_bundle(out, frame, note, keys.export(), secrets=secrets_of(live.poller))
        except OSError as exc:
            raise UsageError(
                f"--out {args.out}: cannot write the bundle there ({exc.strerror})."
            ) from None
        print(path)
        return 0
    if args.format == "md":
        from console.out.snapshot import to_markdown

        sys.stdout.write(to_markdown(frame))
    else:
        sys.stdout.write(frame.to_json() + "\n")
    return 0


def plan(args: argparse.Namespace) -> int:
    from console.out.planreport import plan_fits, plan_json, plan_text

    args.window = args.interval = None
    settings = settings_from(args, args.demo)
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


def check(args: argparse.Namespace) -> int:
    """A Nagios plugin: the first line is the node's verdict with performance data, the details
    follow; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. The verdict is the console's: alerts,
    findings, and conditions that hold but whose hold has not elapsed (pending, a warning), so the
    same state gives the same code however long the check sampled."""
    from console.figures.verdict import EXIT
    from console.out.checkplugin import check_doc, check_lines
    from console.out.jsondocs import dump

    def say(frame: Frame, source: str | None = None, notes: tuple[str, ...] = ()) -> int:
        if getattr(args, "format", "text") == "json":
            sys.stdout.write(dump(check_doc(frame, settings, source, list(notes))))
        else:
            print("\n".join(check_lines(frame, settings, source) + list(notes)))
        return EXIT[frame.status]

    positive(args.wait, "--wait", allow_zero=True)
    if args.prometheus:
        return fleet_check(args)
    live, node, settings = build(args, args.demo)
    read, why_not = (None, None) if args.demo else from_export(args, live.poller, settings)
    if read is not None:
        frame, source = read
        if node is not None:
            node.stop()
        asyncio.run(live.aclose())
        return say(frame, source)
    deadline = deadline_of(args)
    try:
        frame = asyncio.run(sample(live, args.wait, settings.interval_s, deadline_s=deadline))
    finally:
        if node is not None:
            node.stop()
    late = (
        [f"deadline {deadline:g} s reached while {', '.join(live.poller.waiting)} still answered: "
         "shown as still waiting (--deadline)"]
        if live.poller.waiting
        else []
    )  # fmt: skip
    return say(frame, None, (*late, *([why_not] if why_not else [])))


def deadline_of(args: argparse.Namespace) -> float:
    """The command's whole deadline: --deadline, else --wait + 8 s; it must exceed --wait."""
    if args.deadline is None:
        return float(args.wait) + DEADLINE_AFTER_WAIT_S
    positive(args.deadline, "--deadline")
    if args.deadline <= args.wait:
        raise UsageError(
            f"--deadline {args.deadline:g} must be longer than --wait {args.wait:g}: the "
            "sampling needs its time and the last answers theirs."
        )
    return float(args.deadline)


def from_export(
    args: argparse.Namespace, poller: Poller, settings: Settings
) -> tuple[tuple[Frame, str] | None, str | None]:
    """The newest frame of the `inferdeck export` at ``--export``, when it polls the engines this
    check would, with the same plan, and is fresh: its verdict over its full window, not a 2 s
    sample's. Else None, with a sentence when an export answered but could not be used."""
    import json

    import httpx
    from pydantic import ValidationError

    from console.frame import Frame
    from console.out.exporter import plan_hash
    from console.out.exportserver import VERDICT_PATH

    url = (args.export or "").rstrip("/")
    if url in ("", "none"):
        return None, None
    headers = {}
    if args.export_token_file:
        token = token_from_file(args.export_token_file, "--export-token-file")
        headers["Authorization"] = f"Bearer {token}"
    try:
        resp = httpx.get(url + VERDICT_PATH, headers=headers, timeout=1.0)
        doc = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None, None  # no export there (or not this one): sample
    if not isinstance(doc, dict) or doc.get("schema") != "inferdeck.verdict/1":
        return None, None
    try:
        frame = Frame.model_validate(doc["frame"])
    except (ValidationError, KeyError, TypeError, json.JSONDecodeError):
        return None, f"the inferdeck export at {url} sent a verdict this check cannot read"
    mine = sorted(st.target.label for st in poller.engines)
    theirs = sorted(e.name for e in frame.engines)
    if mine != theirs or doc.get("plan_hash") != plan_hash(settings):
        return None, (
            f"an inferdeck export at {url} polls "
            + ("other engines" if mine != theirs else "with another plan")
            + ": this check sampled on its own"
        )
    age = time.time() - frame.taken_at.timestamp()
    interval = float(doc.get("interval_s") or settings.interval_s)
    if not -2.0 <= age <= 3 * interval + 1.0:
        return None, (
            f"the inferdeck export at {url} has no fresh frame (its newest is {age:,.0f} s "
            "old): this check sampled on its own"
        )
    where = url.split("://", 1)[-1]
    return (frame, f"inferdeck export at {where}, its frame {max(0.0, age):.0f} s old"), None


def example_config() -> int:
    from importlib import resources

    sys.stdout.write(resources.files("config").joinpath("example.yaml").read_text("utf-8"))
    return 0


def simulate(args: argparse.Namespace) -> int:
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
