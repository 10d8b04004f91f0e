"""Recordings: every poll's Sample appended to a compressed, self-describing file.

Layout (chosen for crash safety and simple retention): a directory holds one file per recorder
run and UTC day, ``<host>-<YYYYMMDD>-<HHMMSS>.idrec.gz``. Each file is one gzip stream of JSON
lines: a header line (``"schema": "inferdeck.recording/1"``, host, inferdeck version, start time,
window, the plan with secrets masked), then one line per Sample. Every line is sync-flushed, so a
kill at any moment leaves a file that reads up to its last complete line. Retention deletes whole
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
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._raw = os.fdopen(fd, "ab")
        self._file = gzip.GzipFile(fileobj=self._raw, mode="ab", compresslevel=6)
        self._day = day
        head = {
            "schema": SCHEMA,
            "host": self.host,
            "inferdeck_version": __version__,
            "started_at": datetime.fromtimestamp(t, tz=UTC).isoformat(),
            **self.header,
        }
        self._line(head)
        self.prune(t)

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
        self._line(sample_to_json(sample))
        self.frames += 1

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


def _lines(path: Path, cut: list[bool] | None = None) -> Iterator[str]:
    """Complete lines of one (possibly truncated) recording file; ``cut`` gets True when the file
    ends inside a stream or a line (a kill mid-write)."""
    data = path.read_bytes()
    if data[:2] != b"\x1f\x8b":
        raise RecordingError(
            f"{path}: not an inferdeck recording (not a gzip file; recordings end in {SUFFIX})."
        )
    out = bytearray()
    truncated = False
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out += d.decompress(data)
        except zlib.error:
            truncated = True
            break  # a torn write: keep what decompressed before it
        if not d.eof:
            truncated = True
            break  # truncated: a kill mid-stream; what we have is complete up to the last flush
        data = d.unused_data
    text = out.decode("utf-8", errors="replace")
    complete, _, rest = text.rpartition("\n")
    if cut is not None:
        cut.append(truncated or bool(rest))
    yield from (line for line in complete.split("\n") if line)


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
        for i, line in enumerate(_lines(f, cut)):
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                if i == 0:
                    raise RecordingError(
                        f"{f}: not an inferdeck recording (no {SCHEMA} header)."
                    ) from None
                cut.append(True)
                break
            if i == 0:
                if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
                    raise RecordingError(f"{f}: not an inferdeck recording (no {SCHEMA} header).")
                header = header or doc
                continue
            try:
                samples.append(sample_from_json(doc))
                n += 1
            except (KeyError, TypeError, ValueError):
                cut.append(True)
                break
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
