"""Incident bundles: ``<UTC time>-<host>[-<slug>]/`` holding snapshot.md (for the incident note),
frame.json (the Frame plus the last 15 minutes of key series), charts/*.svg (those series drawn,
with SLO lines and alert marks) and, from the TUI, screen.svg.
Files are written atomically (temp file, then rename) with mode 0600 in a 0700 directory, and
every file passes through the redactor."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from console.figures.charts import bundle_charts
from console.frame import Frame
from console.out.redact import redact, secrets_in
from console.out.snapshot import to_markdown
from console.records import Invalid


def slug(note: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", note.lower()).strip("-")
    return s[:40].strip("-")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_bundle(
    root: Path,
    frame: Frame,
    note: str = "",
    history: dict[str, Any] | None = None,
    svg: str | None = None,
    secrets: list[str] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = frame.taken_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = "-".join(
        x for x in (stamp, re.sub(r"[^A-Za-z0-9.-]+", "-", frame.host), slug(note)) if x
    )
    final = root / name
    n = 1
    while final.exists():
        final = root / f"{name}.{n}"
        n += 1
    # written whole into a hidden folder, then renamed: a full disk leaves no half bundle
    path = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        _fill(path, frame, note, history, svg, secrets)
        os.replace(path, final)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return final


def _fill(
    path: Path,
    frame: Frame,
    note: str,
    history: dict[str, Any] | None,
    svg: str | None,
    secrets: list[str] | None,
) -> None:
    commands = [p.command for g in frame.gpus for p in g.processes if p.command]
    commands += [
        p.command
        for g in frame.gpus
        for d in (g.mig.devices if g.mig else [])
        for p in d.processes
        if p.command
    ]
    secrets = list(secrets or []) + secrets_in(commands)
    doc = json.loads(frame.to_json(indent=None))
    doc["note"] = note or None
    doc["history"] = history or {}
    _write(path / "frame.json", redact(json.dumps(doc, indent=1), secrets))
    charts = bundle_charts(history or {}, frame)
    if charts:
        (path / "charts").mkdir(mode=0o700)
        for name, text in charts.items():
            _write(path / "charts" / name, redact(text, secrets))
    _write(path / "snapshot.md", redact(to_markdown(frame, note, sorted(charts)), secrets))
    if svg is not None:
        _write(path / "screen.svg", redact(svg, secrets))


class BundleFrame(Frame):
    """A bundle's frame.json: the Frame, the operator's note and the key series kept with it."""

    note: str | None = None
    history: dict[str, Any] = {}


def list_bundles(root: Path) -> list[dict[str, Any]]:
    """Saved bundles, newest first: path, time, note, active alert count. A frame.json pydantic
    cannot read as a bundle's frame is listed with the reason in its note."""
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    for d in sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True
    ):
        try:
            text = (d / "frame.json").read_text(encoding="utf-8")
        except OSError:
            continue  # not a bundle
        try:
            doc = BundleFrame.model_validate_json(text)
        except ValidationError as exc:
            out.append(
                {
                    "path": d,
                    "taken_at": None,
                    "note": f"unreadable frame.json: {Invalid.of(exc)}",
                    "alerts": "?",
                    "host": None,
                }
            )
            continue
        out.append(
            {
                "path": d,
                "taken_at": doc.taken_at.isoformat(),
                "note": doc.note or "",
                "alerts": sum(1 for a in doc.alerts if a.state == "active"),
                "host": doc.host,
            }
        )
    return out
    for d in sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True
    ):
        try:
            doc = json.loads((d / "frame.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        active = sum(1 for a in doc.get("alerts", []) if a.get("state", "active") == "active")
        out.append(
            {
                "path": d,
                "taken_at": doc.get("taken_at"),
                "note": doc.get("note") or "",
                "alerts": active,
                "host": doc.get("host"),
            }
        )
    return out
