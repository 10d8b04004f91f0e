"""``inferdeck timeline RECORDING|DIR``: what happened, in order, for the review after the fact."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from console.commands.record import open_recording
from console.compose import UsageError
from console.figures.timeline import lines
from console.frame import Timeline


def timeline(args: argparse.Namespace) -> int:
    from console.read.replay import ReplaySource

    since = _since(args.since) if args.since else None
    rec = open_recording(args.path, args.recorder)
    rec.done.wait()  # the whole index: the timeline runs to the recording's end
    source = ReplaySource(rec.header, rec)
    host = str(rec.header.get("host") or "")
    until = datetime.fromtimestamp(rec.times[-1], tz=UTC)
    tl = source.recorded.at(rec.times[-1]) if source.recorded is not None else None
    if tl is None:  # recorded before timelines were: derived again, sample by sample
        frame = source.last_frame()
        tl, host, until = frame.timeline, frame.host, frame.taken_at
    assert tl is not None
    if since is not None:
        tl = Timeline.model_validate(
            {
                **tl.model_dump(by_alias=True),
                "events": [e for e in tl.events if (e.end or until) >= since],
            }
        )
    for note in rec.notes:
        print(f"inferdeck: {note}", file=sys.stderr)
    if args.format == "json":
        print(tl.model_dump_json(by_alias=True, indent=2))
    elif args.format == "jsonl":  # one event a line, for log shippers
        for e in tl.events:
            doc = {"host": host, **json.loads(e.model_dump_json())}
            print(json.dumps(doc, ensure_ascii=False))
    else:
        print(f"{host}: timeline {tl.since:%Y-%m-%d %H:%M:%S}Z – {until:%H:%M:%S}Z")
        for line in lines(tl, until):
            print(line)
    return 0


def _since(text: str) -> datetime:
    """An ISO time (UTC when no zone is given)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--since {text!r} is not a time: give an ISO date and time, e.g. 2026-12-05T18:17:00Z."
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
