"""Recordings: every poll's Sample appended to a compressed, self-describing file.

Layout (chosen for crash safety and simple retention): a directory holds one file per recorder
run and UTC day, ``<host>-<YYYYMMDD>-<HHMMSS>.idrec.gz``. Each file is a series of gzip members
of JSON lines, a new member every MEMBER_FRAMES frames: each member opens with the header line
(``"schema": "inferdeck.recording/1"``, host, inferdeck version, start time, window, the plan with
secrets masked), then one line per Sample. Every line is sync-flushed, so a kill at any moment
leaves a file that reads up to its last complete line; damage in the middle costs the member it
hits, and the reader says how many frames were lost and where. Retention deletes whole
files older than the given number of hours. A single file path (not a directory) records there,
without rotation.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from console import __version__
from console.redact import redact
from console.sample import Sample, sample_from_json, sample_to_json

SCHEMA = "inferdeck.recording/1"
SUFFIX = ".idrec.gz"
MEMBER_FRAMES = 60  # a minute at 1 s: what damage in the middle of a file can cost


class Recorder:
    def __init__(
        self,
        out: Path,
        host: str,
        header: dict[str, Any] | None = None,
        retention_h: float | None = None,
        secrets: list[str] | None = None,
    ) -> None:
        self.out = out
        self.host = host
        self.header = header or {}
        self.retention_h = retention_h
        self.secrets = secrets or []
        self._file: gzip.GzipFile | None = None
        self._raw: BinaryIO | None = None
        self._day: str | None = None
        self.path: Path | None = None
        self.frames = 0
        self._in_member = 0  # frames in the current gzip member
        self._head: dict[str, Any] = {}

    def _open(self, t: float) -> None:
        day = datetime.fromtimestamp(t, tz=UTC).strftime("%Y%m%d")
        if self._file is not None and (self._day == day or not self.out_is_dir):
            return
        self.close()
        if self.out_is_dir:
            self.out.mkdir(parents=True, exist_ok=True, mode=0o700)
            stamp = datetime.fromtimestamp(t, tz=UTC).strftime("%Y%m%d-%H%M%S")
            self.path = self.out / f"{self.host}-{stamp}{SUFFIX}"
            n = 1
            while self.path.exists():
                self.path = self.out / f"{self.host}-{stamp}.{n}{SUFFIX}"
                n += 1
        else:
            self.out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.path = self.out
            repair(self.path)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._raw = os.fdopen(fd, "ab")
        self._day = day
        self._head = {
            "schema": SCHEMA,
            "host": self.host,
            "inferdeck_version": __version__,
            "started_at": datetime.fromtimestamp(t, tz=UTC).isoformat(),
            **self.header,
        }
        try:
            self._member()
        except OSError:
            try:
                self.close()
            except OSError:
                pass
            if created:
                self.path.unlink(missing_ok=True)  # its header never made it: leave no file
            raise
        self.prune(t)

    def _member(self) -> None:
        """Start a gzip member (closing the last), its header line first."""
        assert self._raw is not None
        if self._file is not None:
            self._file.close()
        self._file = gzip.GzipFile(fileobj=self._raw, mode="ab", compresslevel=6)
        self._in_member = 0
        self._line(self._head)

    @property
    def out_is_dir(self) -> bool:
        return not self.out.name.endswith(SUFFIX) or self.out.is_dir()

    def _line(self, doc: dict[str, Any]) -> None:
        assert self._file is not None and self._raw is not None
        text = redact(json.dumps(doc, separators=(",", ":")), self.secrets)
        self._file.write(text.encode() + b"\n")
        self._file.flush(zlib.Z_SYNC_FLUSH)
        self._raw.flush()

    def write_header(self, t: float) -> None:
        """Open the file now (its header first), so a path that cannot be written says so at once."""
        self._open(t)

    def write(self, sample: Sample) -> None:
        self._open(sample.t)
        if self._in_member >= MEMBER_FRAMES:
            self._member()
        self._line(sample_to_json(sample))
        self.frames += 1
        self._in_member += 1

    def prune(self, now: float) -> None:
        if self.retention_h is None or not self.out_is_dir:
            return
        cut = now - self.retention_h * 3600
        for f in self.out.glob(f"*{SUFFIX}"):
            try:
                if f != self.path and f.stat().st_mtime < cut:
                    f.unlink()
            except OSError:
                pass

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._raw is not None:
            self._raw.close()
            self._raw = None


class RecordingError(ValueError):
    """A recording cannot be read; the message is one sentence."""


GZIP_MAGIC = b"\x1f\x8b\x08"
DAMAGED = "\x00damaged"  # a line _lines yields where a damaged stretch was skipped


def _member_text(data: bytes, start: int) -> tuple[bytes, int, bool]:
    """Decompress the gzip member at ``start``: (what came out, where the next member starts,
    whether it ended whole). Fed in pieces, so damage keeps what came before it."""
    d = zlib.decompressobj(wbits=31)
    out = bytearray()
    pos = start
    while pos < len(data) and not d.eof:
        piece = data[pos : pos + 65536]
        try:
            out += d.decompress(piece)
        except zlib.error:
            return bytes(out), pos, False
        pos += len(piece)
    if not d.eof:
        return bytes(out), len(data), False
    return bytes(out), pos - len(d.unused_data), True  # the rest of the last piece follows


def _lines(path: Path, cut: list[bool] | None = None) -> Iterator[str]:
    """Complete lines of one recording file, member by member. A damaged member keeps its lines
    before the damage, then the next member is looked for (a line DAMAGED marks the gap); ``cut``
    gets True when the file ends inside a member or a line (a kill mid-write)."""
    data = path.read_bytes()
    if data[:2] != b"\x1f\x8b":
        raise RecordingError(
            f"{path}: not an inferdeck recording (not a gzip file; recordings end in {SUFFIX})."
        )
    pos, ended_whole = 0, True
    while pos < len(data):
        raw, nxt, whole = _member_text(data, pos)
        text = raw.decode("utf-8", errors="replace")
        complete, _, rest = text.rpartition("\n")
        yield from (line for line in complete.split("\n") if line)
        if whole and not rest:
            pos, ended_whole = nxt, True
            continue
        found = data.find(GZIP_MAGIC, max(nxt, pos + 1))
        if found < 0:  # nothing after: the end of the file was cut (a kill mid-write)
            ended_whole = False
            break
        yield DAMAGED
        pos = found
    if cut is not None:
        cut.append(not ended_whole)


def files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob(f"*{SUFFIX}"), key=lambda p: p.name)
    if not path.exists():
        raise RecordingError(
            f"{path}: no such recording; give a .idrec.gz file or a directory of them."
        )
    return [path]


def read(path: Path) -> tuple[dict[str, Any], list[Sample]]:
    """The first header and every complete Sample, in time order, of a file or directory."""
    header: dict[str, Any] | None = None
    samples: list[Sample] = []
    notes: list[str] = []
    for f in files(path):
        cut: list[bool] = []
        n = 0
        gap_after: float | None = None  # the last frame before a damaged stretch
        in_gap = False
        mine = False  # this file's header seen
        for i, line in enumerate(_lines(f, cut)):
            if line == DAMAGED:
                if not in_gap:
                    gap_after, in_gap = (samples[-1].t if n else None), True
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                if i == 0:
                    raise RecordingError(
                        f"{f}: not an inferdeck recording (no {SCHEMA} header)."
                    ) from None
                if not in_gap:
                    gap_after, in_gap = (samples[-1].t if n else None), True
                continue
            if isinstance(doc, dict) and doc.get("schema") == SCHEMA:  # a member's header
                header = header or doc
                mine = True
                continue
            if i == 0 and not mine:
                raise RecordingError(f"{f}: not an inferdeck recording (no {SCHEMA} header).")
            try:
                sample = sample_from_json(doc)
            except (KeyError, TypeError, ValueError):
                if not in_gap:
                    gap_after, in_gap = (samples[-1].t if n else None), True
                continue
            if in_gap:
                notes.append(_gap_note(f, gap_after, sample.t, samples))
                in_gap = False
            samples.append(sample)
            n += 1
        if in_gap and not any(cut):
            cut.append(True)
        if any(cut):
            when = (
                datetime.fromtimestamp(samples[-1].t, tz=UTC).strftime("%H:%M:%S")
                if n
                else "its header"
            )
            notes.append(
                f"{f.name} is truncated after frame {n} at {when} (UTC); what came before is replayed"
            )
    if header is None:
        raise RecordingError(f"{path}: holds no complete recording yet (no header line).")
    if notes:
        header = {**header, "truncated": notes}
    samples.sort(key=lambda s: s.t)
    return header, samples


def _gap_note(f: Path, before: float | None, after: float, samples: list[Sample]) -> str:
    """Where a damaged stretch lay and about how many frames it held (at the file's cadence)."""

    def hms(t: float) -> str:
        return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%S")

    if before is None:
        return f"{f.name} is damaged before its frame at {hms(after)} (UTC); the rest is replayed"
    steps = [b.t - a.t for a, b in zip(samples[-20:], samples[-19:], strict=False) if b.t > a.t]
    step = sorted(steps)[len(steps) // 2] if steps else 1.0
    lost = max(0, round((after - before) / step) - 1)
    return (
        f"{f.name} is damaged between {hms(before)} and {hms(after)} (UTC): about {lost} "
        "frames lost; the rest is replayed"
    )


def repair(path: Path) -> None:
    """Rewrite a file whose last stream was cut by a kill, so appending to it stays readable."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    rest, whole = data, True
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            d.decompress(rest)
        except zlib.error:
            whole = False
            break
        if not d.eof:
            whole = False
            break
        rest = d.unused_data
    if whole:
        return
    lines = list(_lines(path))
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode() if lines else b"")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
