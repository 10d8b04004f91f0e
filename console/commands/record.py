"""``inferdeck record`` (headless, every poll) and ``inferdeck replay``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from console.compose import UsageError, build, open_recorder, positive, writable_dir

if TYPE_CHECKING:
    from console.read.recording import Recorder, Recording


def record(args: argparse.Namespace) -> int:
    import signal

    if args.retention is not None:
        positive(args.retention, "--retention")
    if args.out and not args.out.endswith(".gz"):
        writable_dir(args.out, "--out")
    live, node, settings = build(args, args.demo)
    try:
        live.recorder = rec = open_recorder(args.out, live, settings, args.retention)
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

    live.poller.budget_s = settings.interval_s  # a hung engine never halves the others' frames

    async def loop() -> None:
        begun = time.monotonic()
        end = begun + args.duration if args.duration else None
        try:
            while not stop["now"] and (end is None or time.monotonic() < end):
                started = time.monotonic()
                await live.poll()
                if show:
                    sys.stderr.write(f"\r{record_progress(rec, time.monotonic() - begun)}\033[K")
                    sys.stderr.flush()
                await asyncio.sleep(max(0.0, settings.interval_s - (time.monotonic() - started)))
        finally:
            if show:
                sys.stderr.write("\r\033[K")
            await live.aclose()

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


def open_recording(path: str, recorder: str | None) -> Recording:
    """A recording to read (`replay`, `timeline`), or the one sentence that says why not."""
    from console.read.recording import Recording, RecordingError

    try:
        rec = Recording(Path(path).expanduser(), recorder)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}).") from None
    if not len(rec):
        raise UsageError(f"{path}: the recording holds a header but no frames yet.")
    return rec


def replay(args: argparse.Namespace) -> int:
    from console.read.replay import ReplaySource
    from screens.app import InferdeckApp

    rec = open_recording(args.path, args.recorder)
    if rec.others:
        print(
            f"inferdeck: {args.path} holds {len(rec.others) + 1} recorders' files; replaying "
            f"{rec.recorder} (the newest); the others: {', '.join(rec.others)} "
            "(choose one with --recorder).",
            file=sys.stderr,
        )
    header = rec.header
    source = ReplaySource(header, rec)
    source.origin = str(Path(args.path).expanduser())  # a bundle saved in the replay names it
    InferdeckApp(
        source,
        interval_s=0.25,
        title=f"inferdeck replay {header.get('host', '')}",
        read_only=True,
        replay=source,
        freeze_startup=True,
    ).run()
    return 0
