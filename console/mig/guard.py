"""What keeps a MIG re-cut whole: one writer per GPU (an exclusive lock held from the pre-checks
to the journal's end record) and interruptions held off until the re-cut is done or undone."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from console.mig.journal import now_iso
from console.mig.layouts import MigError
from console.paths import state_dir

HELD_OFF = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def lock_dir(demo: bool = False) -> Path:
    """Where the per-GPU locks live: /run/inferdeck for root on a real node (one place whatever
    $XDG_STATE_HOME each console was started with), else the state folder."""
    run = Path("/run")
    if not demo and os.geteuid() == 0 and os.access(run, os.W_OK):
        return run / "inferdeck"
    return state_dir(demo) / "locks"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder_text(holder: dict[str, object]) -> str:
    return (
        f"pid {holder.get('pid', '?')} ({holder.get('command') or 'command unknown'}, "
        f"user {holder.get('user') or '?'}) since {str(holder.get('since', '?'))[:19]}Z"
    )


@contextmanager
def gpu_lock(folder: Path, uuid: str, index: int, user: str, command: str) -> Iterator[str | None]:
    """Hold GPU ``uuid``'s lock (flock: released by the kernel when the holder dies). A second
    writer gets a MigError naming the holder. Yields a sentence when the last holder died while
    holding it (its re-cut may be unfinished), else None."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(folder / f"mig-{uuid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise MigError(
            f"cannot take GPU {index}'s MIG lock in {folder} ({exc.strerror or exc}); "
            "nothing was changed."
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            for _ in range(40):  # the holder writes its name just after it took the lock
                if holder.get("pid"):
                    break
                time.sleep(0.025)
                holder = _read_holder(fd)
            raise MigError(
                f"GPU {index} is being re-cut by {_holder_text(holder)}: wait for it to finish; "
                "nothing was changed."
            ) from None
        last = _read_holder(fd)
        note = None
        if str(last.get("pid", "")).isdigit() and not _alive(int(str(last["pid"]))):
            note = (
                f"the last re-cut of GPU {index}, by {_holder_text(last)}, ended without "
                "releasing its lock (killed, or the machine went down)"
            )
        me = {"pid": os.getpid(), "command": command, "user": user, "since": now_iso()}
        with contextlib.suppress(OSError):  # a full disk: held all the same, unnamed
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            yield note
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # a clean release leaves no holder behind
    finally:
        os.close(fd)  # releases the flock


def _read_holder(fd: int) -> dict[str, object]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def this_command() -> str:
    """This process's command line, as the lock and journal name it (first 200 characters)."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    name = "python -m console" if name == "__main__.py" else name
    return " ".join([name, *sys.argv[1:]])[:200]


@contextmanager
def signals_held(say: Callable[[str], None]) -> Iterator[list[int]]:
    """SIGINT, SIGTERM and SIGHUP held off while the body runs (in the main thread: a console's
    worker thread is held by the app instead); the first one received is delivered after, to the
    handler that was there before."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def hold(sig: int, _frame: FrameType | None) -> None:
        if not got:
            say(f"{signal.Signals(sig).name} received: finishing the re-cut, then quitting")
        got.append(sig)

    previous = {sig: signal.signal(sig, hold) for sig in HELD_OFF}
    try:
        yield got
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if got:
            signal.raise_signal(got[0])
