"""Where inferdeck keeps what it writes: one place for every path under the state folder
($XDG_STATE_HOME/inferdeck, or ~/.local/state/inferdeck). The demo's simulated MIG changes keep
theirs apart, under demo/."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir(demo: bool = False) -> Path:
    root = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "inferdeck"
    return root / "demo" if demo else root


def snapshots_dir(configured: str | None = None, demo: bool = False) -> Path:
    """Incident bundles: the config's snapshot_dir when given (never for the demo's MIG changes)."""
    if configured and not demo:
        return Path(configured).expanduser()
    return state_dir(demo) / "snapshots"


def recordings_dir() -> Path:
    return state_dir() / "recordings"


def mig_audit_log(demo: bool = False) -> Path:
    return state_dir(demo) / "mig-audit.jsonl"
