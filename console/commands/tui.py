"""The console on this node (``inferdeck``, ``inferdeck demo``), or the fleet screen."""

from __future__ import annotations

import argparse
import gc
from datetime import UTC, datetime
from pathlib import Path

from console.commands.fleet import run_fleet
from console.compose import build, open_recorder, secrets_of, settings_from
from console.paths import mig_audit_log, snapshots_dir
from console.read.live import LiveSource


def run_tui(args: argparse.Namespace, demo: bool) -> int:
    if getattr(args, "prometheus", None) or (
        not demo and settings_from(args).prometheus is not None
    ):
        return run_fleet(args)
    # the collector held off until the first frame is drawn (the app then freezes what start-up
    # built and switches it back on): nothing start-up builds is garbage
    gc.disable()
    live, node, settings = build(args, demo)
    poller = live.poller
    from screens.app import InferdeckApp

    if args.record is not None:
        live.recorder = open_recorder(args.record, live, settings, flag="--record")
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
                    snapshot=lambda when: mig_snapshot(live, snapdir, when, demo),
                )
                if lib
                else None
            )
        poller.budget_s = max(
            0.2, settings.interval_s * 0.8
        )  # a hung engine never holds the screen
        app = InferdeckApp(
            live,
            interval_s=settings.interval_s,
            title="inferdeck demo" if demo else "inferdeck",
            read_only=args.read_only,
            snapshot_dir=snapshots_dir(settings.snapshot_dir),
            secrets=secrets_of(poller),
            mig=mig,
            freeze_startup=True,
        )
        app.run(mouse=not args.no_mouse)
    finally:
        gc.enable()  # the app did at its first frame, unless it stopped before
        if node is not None:
            node.stop()
    return app.return_code or 0  # a crash inside the app is 1, never 0


def mig_snapshot(live: LiveSource, root: Path, when: str, simulated: bool = False) -> Path | None:
    """The automatic bundle before and after a MIG change: the last frame, with the GPUs read
    afresh after the change."""
    from console.out.bundle import write_bundle

    frame = live.last_frame
    if frame is None:
        return None
    if when == "after" and live.poller.nvml is not None:
        source, gpus = live.poller.nvml.read()
        frame = frame.model_copy(
            update={"gpus": gpus, "gpu_source": source, "taken_at": datetime.now(tz=UTC)}
        )
    return write_bundle(
        root,
        frame,
        f"mig {when}" + (" simulated" if simulated else ""),
        secrets=secrets_of(live.poller),
    )
