"""The MIG write-ahead journal: the audit log of every re-cut, one JSON line per record, each
flushed to disk before the console goes on.

An apply writes, in order: ``begin`` (GPU uuid and index, the layout before and the target, user,
pid, command) before its first NVML call; for each mutating call a ``step`` record before the call
and a ``done`` record after it (``ok`` or the driver's reason); ``end`` with the result and what
was verified; then ``note`` records (the snapshots, or why one could not be written). An apply
with a ``begin`` and no ``end`` (SIGKILL, power loss) is *unfinished* until a later apply on the
same GPU ends: the console, ``mig show`` and ``check`` read the GPU back and say which layout it
is in. Lines written by older versions (one whole report a line) read as finished applies.

Room on disk is reserved before the begin record (a small file, given back when an append finds
the disk full, and at the end), so the records of an apply that started always fit.
"""

from __future__ import annotations

import errno
import json
import os
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from console.mig.layouts import Instance, MigError

RESERVE_BYTES = 32 * 1024  # an apply's records: ~8 KB with a whole rollback


class JournalError(MigError):
    """The journal could not be written: the step it was for is not taken."""


def now_iso() -> str:
    return datetime.now(tz=UTC).isoformat()


class Journal:
    """One apply's records, appended to the journal file."""

    def __init__(self, path: Path, simulated: bool = False) -> None:
        self.path = path
        self.simulated = simulated
        self.apply_id = uuidlib.uuid4().hex[:12]
        self._reserve = path.with_name(f".{path.name}.{self.apply_id}.reserve")
        self.failed: str | None = None  # why a record could not be written (after the begin)

    # --- writing -------------------------------------------------------------------------------
    def begin(self, **fields: Any) -> None:
        """The reserve, then the begin record; either failing raises JournalError and nothing
        has been changed."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self._reserve, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.write(fd, b"\0" * RESERVE_BYTES)  # a file system without fallocate
            finally:
                os.close(fd)
        except OSError as exc:
            self._free()
            raise JournalError(
                f"the MIG journal's folder {self.path.parent} has no room for this re-cut's "
                f"records ({exc.strerror or exc}): free some space there; nothing was changed."
            ) from None
        self._write({"record": "begin", **fields})

    def step(self, n: int, what: str) -> None:
        self._write({"record": "step", "n": n, "step": what})

    def done(self, n: int, result: str, status: int | None = None) -> None:
        rec: dict[str, Any] = {"record": "done", "n": n, "result": result}
        if status is not None:
            rec["status"] = status
        self._write(rec)

    def end(self, **fields: Any) -> None:
        try:
            self._write({"record": "end", **fields})
        finally:
            self._free()

    def note(self, text: str) -> None:
        try:
            self._write({"record": "note", "note": text})
        except JournalError:
            pass  # a note after the end: the report on screen carries it

    def _write(self, record: dict[str, Any]) -> None:
        mark = (
            {"simulated": True} if self.simulated else {}
        )  # the demo's GPUs: every record says so
        line = json.dumps({"t": now_iso(), "apply": self.apply_id, **record, **mark}) + "\n"
        try:
            self._append(line.encode())
        except OSError as first:
            # the disk filled: give back the reserve and write again, after a newline that ends
            # any part of the line the failed write left
            if not self._free():
                self.failed = f"{first.strerror or first}"
                raise JournalError(
                    f"the MIG journal {self.path} could not be written ({self.failed})"
                ) from None
            try:
                self._append(b"\n" + line.encode())
            except OSError as exc:
                self.failed = f"{exc.strerror or exc}"
                raise JournalError(
                    f"the MIG journal {self.path} could not be written ({self.failed})"
                ) from None

    def _append(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _free(self) -> bool:
        """Give back the reserved room; True if there was some."""
        try:
            self._reserve.unlink()
        except OSError:
            return False
        return True


# --- reading -------------------------------------------------------------------------------------
@dataclass
class OpenApply:
    """An apply with a begin record and no end: interrupted (killed, or the power went)."""

    apply_id: str
    t: str
    gpu: int
    uuid: str
    before: str
    target: str  # placements ("2g.48gb@0,2g.48gb@6"), or "enable"/"disable"
    user: str
    pid: int | None
    command: str | None
    steps: list[str]  # the steps begun, in order
    done: int  # how many of them were recorded done
    rolling_back: bool  # it had begun rolling back


def records(path: Path) -> Iterable[dict[str, Any]]:
    """The journal's records; a line that is not a JSON object (a write cut short) is passed over."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        line = line.strip("\0 \t")
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def unfinished(path: Path) -> list[OpenApply]:
    """Applies begun and never ended, leaving out any that a later finished apply on the same
    GPU has superseded (that one read the GPU back and recorded its state)."""
    begun: dict[str, OpenApply] = {}
    order: list[str] = []
    for rec in records(path):
        kind, aid = rec.get("record"), str(rec.get("apply", ""))
        if kind == "begin" and aid:
            begun[aid] = OpenApply(
                aid,
                str(rec.get("t", "")),
                int(rec.get("gpu", -1)),
                str(rec.get("uuid", "")),
                str(rec.get("before", "")),
                str(rec.get("target", "")),
                str(rec.get("user", "")),
                rec.get("pid"),
                rec.get("command"),
                [],
                0,
                False,
            )
            order.append(aid)
        elif kind == "step" and aid in begun:
            what = str(rec.get("step", ""))
            begun[aid].steps.append(what)
            begun[aid].rolling_back |= what.startswith("rollback")
        elif kind == "done" and aid in begun:
            begun[aid].done += 1
        elif kind == "end" and aid in begun:
            ended = begun.pop(aid)
            for other in [a for a in begun.values() if a.uuid == ended.uuid]:
                begun.pop(other.apply_id)  # superseded: the GPU's state was read and recorded
    return [begun[a] for a in order if a in begun]


def parse_placements(text: str) -> list[Instance]:
    """A journal's layout text back as instances ("none" and "" are no instances)."""
    out: list[Instance] = []
    for part in text.split(","):
        name, _, start = part.strip().rpartition("@")
        if name and start.isdigit():
            out.append((name, int(start)))
    return sorted(out)


def judge(
    open_apply: OpenApply,
    layout: list[Instance] | None,
    missing_ci: Iterable[Instance] = (),
    mode_current: bool | None = None,
) -> str:
    """Which state an interrupted apply left the GPU in: "new", "old", "neither", or "unknown"
    (the GPU's instances could not be read). A GPU instance without its compute instance is
    neither layout: it has no MIG device for a workload."""
    if layout is None:
        return "unknown"
    now = sorted(layout)
    whole = not list(missing_ci)
    before = parse_placements(open_apply.before)
    target = open_apply.target
    if target in ("enable", "disable"):
        want_on = target == "enable"
        if mode_current is not None and mode_current == want_on and (want_on or not now):
            return "new"
        return "old" if whole and now == before and mode_current != want_on else "neither"
    if whole and now == parse_placements(target):
        return "new"
    if whole and now == before:
        return "old"
    return "neither"


def completing_target(open_apply: OpenApply) -> str:
    """What brings the GPU to a recorded state: the target, or the previous layout when the
    apply had begun rolling back."""
    if open_apply.rolling_back and open_apply.target not in ("enable", "disable"):
        return open_apply.before or "disable"
    return open_apply.target


def describe_open(open_apply: OpenApply, state: str) -> str:
    """One sentence on an interrupted apply and the state it left the GPU in."""
    who = f"{open_apply.user or 'someone'}" + (f", pid {open_apply.pid}" if open_apply.pid else "")
    where = {
        "new": "the GPU is in the new layout (the change was made; the record was not closed)",
        "old": "the GPU is still in the old layout (nothing took effect)",
        "neither": "the GPU is in NEITHER layout: some slices may have no MIG device",
        "unknown": "its MIG instances could not be read back (needs root) to tell which layout "
        "it is in",
    }[state]
    return (
        f"GPU {open_apply.gpu}: a MIG re-cut from {open_apply.before or 'no instances'} to "
        f"{open_apply.target or 'no instances'} begun {open_apply.t[:19]}Z ({who}) was "
        f"interrupted after {len(open_apply.steps)} of its steps; {where}."
    )
