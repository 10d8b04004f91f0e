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
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, overload

from console import __version__
from console.out.redact import redact
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

    def write_timeline(self, book: Any, t: float) -> None:
        """What changed in the timeline (``book``, the deriver's EventBook) at the frame of time
        ``t``, after that frame's line: a replay and ``inferdeck timeline`` read it instead of
        deriving it again."""
        book.start_log()
        line = book.take_log()
        if line is not None:
            self._open(t)
            self._line({"tl": t, **line})

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
            if isinstance(doc, dict) and "tl" in doc:
                continue  # the timeline's changes (Recording.timeline_log reads them)
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


_NAME = re.compile(r"^(?P<host>.+)-\d{8}-\d{6}(?:\.\d+)?" + re.escape(SUFFIX) + "$")
_T = re.compile(rb'^\{"t":(-?[0-9][0-9.eE+-]*)[,}]')
CACHED_MEMBERS = 4  # decoded members kept (a member is MEMBER_FRAMES frames)


def recorders(paths: list[Path]) -> dict[str, list[Path]]:
    """A folder's files by the recorder that wrote them (the host in the name), each in time
    order: two recorders' files replayed as one stream flipped between their engine sets."""
    out: dict[str, list[Path]] = {}
    for p in paths:
        m = _NAME.match(p.name)
        out.setdefault(m.group("host") if m else p.name, []).append(p)
    return out


class Recording(Sequence[Sample]):
    """A recording read lazily: an index of its frames (time, member) built on a background
    thread as the files are read once, frames decoded member by member as they are asked for,
    a few members kept. Memory does not grow with the recording's length; the first frame is
    there as soon as the first member is read. A folder is replayed one recorder at a time:
    ``recorder`` names it, else the newest; the others are named in ``others``."""

    def __init__(self, path: Path, recorder: str | None = None) -> None:
        every = files(path)
        groups = recorders(every) if path.is_dir() else {path.name: every}
        if not every:
            raise RecordingError(f"{path}: holds no recording ({SUFFIX} files).")
        if recorder is not None and recorder not in groups:
            raise RecordingError(
                f"{path}: no recorder {recorder!r} here; it holds {', '.join(sorted(groups))}."
            )
        chosen = recorder or max(groups, key=lambda k: groups[k][-1].stat().st_mtime)
        self.recorder = chosen
        self.files = groups[chosen]
        self.others = sorted(k for k in groups if k != chosen)
        self.times: list[float] = []  # grows while the index builds
        # the timeline's changes as recorded (time, line), in time order; grows with the index
        self.timeline_log: list[tuple[float, dict[str, Any]]] = []
        # the plans the console read again from its config file (time, plan), in time order
        self.config_log: list[tuple[float, dict[str, Any]]] = []
        self._member_of: list[int] = []  # frame -> member
        self._members: list[tuple[Path, int, int]] = []  # (file, offset, first frame)
        self.notes: list[str] = []
        self.header: dict[str, Any] = {}
        self.total_bytes = sum(f.stat().st_size for f in self.files)
        self.read_bytes = 0
        self.done = threading.Event()
        self._cache: OrderedDict[int, dict[float, Sample]] = OrderedDict()
        self._lock = threading.Lock()
        self._index_file(0, first_member_only=True)  # the first frame before anything else
        if not self.header:
            raise RecordingError(
                f"{self.files[0]}: not an inferdeck recording (no {SCHEMA} header)."
            )
        threading.Thread(target=self._index_rest, name="recording-index", daemon=True).start()

    # --- the index ------------------------------------------------------------------------------
    def _index_rest(self) -> None:
        try:
            for i in range(len(self.files)):
                self._index_file(i, skip_first=(i == 0))
        finally:
            self.done.set()

    def _index_file(
        self, i: int, first_member_only: bool = False, skip_first: bool = False
    ) -> None:
        f = self.files[i]
        try:
            if first_member_only:  # the first frame at once: a member is well under 4 MiB
                with f.open("rb") as fh:
                    data = fh.read(4 * 1024 * 1024)
            else:
                data = f.read_bytes()
        except OSError as exc:
            self.notes.append(f"{f.name} cannot be read ({exc.strerror}); left out")
            return
        if data[:2] != b"\x1f\x8b":
            self.notes.append(f"{f.name} is not an inferdeck recording (not a gzip file); left out")
            return
        pos, member = 0, 0
        while pos < len(data):
            raw, nxt, whole = _member_text(data, pos)
            if not (skip_first and member == 0):
                self._index_member(f, pos, raw)
            if first_member_only:
                return
            member += 1
            if whole:
                self.read_bytes += nxt - pos
                pos = nxt
                continue
            found = data.find(GZIP_MAGIC, max(nxt, pos + 1))
            self.notes.append(
                f"{f.name} is damaged or cut after its frame at "
                f"{_hms(self.times[-1]) if self.times else 'its start'} (UTC); "
                + ("the rest is replayed" if found >= 0 else "what came before is replayed")
            )
            if found < 0:
                break
            self.read_bytes += found - pos
            pos = found
        self.read_bytes = sum(g.stat().st_size for g in self.files[: i + 1])

    def _index_member(self, f: Path, offset: int, raw: bytes) -> None:
        k = len(self._members)
        self._members.append((f, offset, len(self.times)))
        for line in raw.split(b"\n"):
            m = _T.match(line)
            if m is None:
                if line.startswith(b'{"tl":') and line.endswith(b"}"):
                    self._timeline_line(line)
                    continue
                if not self.header and line.startswith(b'{"schema"'):
                    try:
                        doc = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
                        self.header = doc
                continue
            if not line.endswith(b"}"):
                continue  # a line cut by a kill
            try:
                t = float(m.group(1))
            except ValueError:
                continue
            if self.times and t < self.times[-1]:
                continue  # out of order (another recorder's file under this name): left out
            if line.find(b',"config":{', 0, 80) >= 0:
                self._config_line(t, line)
            self._member_of.append(k)
            self.times.append(t)  # appended last: a reader sees a frame only once it is indexed

    def _config_line(self, t: float, line: bytes) -> None:
        try:
            plan = json.loads(line)["config"].get("plan")
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # a damaged line: left to the sample's own reading
        if isinstance(plan, dict):
            self.config_log.append((t, plan))

    def _timeline_line(self, line: bytes) -> None:
        try:
            doc = json.loads(line)
            t = float(doc["tl"])
        except (ValueError, KeyError, TypeError):
            return  # a damaged line: the next one still holds its entries' latest state
        if isinstance(doc, dict) and (not self.timeline_log or t >= self.timeline_log[-1][0]):
            self.timeline_log.append((t, doc))

    def progress(self) -> float:
        """The share of the recording indexed so far (1.0 when done)."""
        if self.done.is_set() or not self.total_bytes:
            return 1.0
        return min(0.99, self.read_bytes / self.total_bytes)

    # --- frames ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, i: int) -> Sample: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Sample]: ...
    def __getitem__(self, i: int | slice) -> Sample | Sequence[Sample]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self.times):
            raise IndexError(i)
        k = self._member_of[i]
        frames = self._decoded(k)
        got = frames.get(self.times[i])
        if got is None and frames:  # a line that indexed but does not decode: its neighbour
            got = frames[min(frames, key=lambda t: abs(t - self.times[i]))]
        if got is None:
            raise RecordingError(f"{self._members[k][0].name}: a damaged stretch cannot be read")
        return got

    def _decoded(self, k: int) -> dict[float, Sample]:
        """The frames of member ``k`` by their time (a few members kept)."""
        with self._lock:
            got = self._cache.get(k)
            if got is not None:
                self._cache.move_to_end(k)
                return got
        f, offset, _ = self._members[k]
        with f.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(4 * 1024 * 1024)  # a member of 60 frames is well under this
        raw, _, _ = _member_text(data, 0)
        out: dict[float, Sample] = {}
        for line in raw.split(b"\n"):
            if _T.match(line) is None or not line.endswith(b"}"):
                continue
            try:
                sample = sample_from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            out[sample.t] = sample
        with self._lock:
            self._cache[k] = out
            while len(self._cache) > CACHED_MEMBERS:
                self._cache.popitem(last=False)
        return out


def _hms(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%S")
