"""History for a real Prometheus, written before it starts: `promtool tsdb create-blocks-from
openmetrics` turns series (name -> [(labels, [(unix time, value)])]) into TSDB blocks, so a
test reads hours of a node at once instead of waiting for them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def backfill(data: Path, series: dict[str, Any]) -> None:
    lines = []
    for name, rows in series.items():  # one family at a time, each series in time order
        for labels, points in rows:
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines += [f"{name}{{{body}}} {v:g} {t:.3f}" for t, v in points]
    data.parent.mkdir(parents=True, exist_ok=True)
    om = data.parent / f"{data.name}.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    done = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
