"""The last 15 minutes of a few key series, kept from successive Frames: the console's trends and
the incident bundle's charts."""

from __future__ import annotations

from collections import deque
from typing import Any

from console.frame import Frame

KEEP_S = 900.0


def key_values(frame: Frame) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for g in frame.gpus:
        out[f"gpu{g.index}.memory_used_bytes"] = g.memory_used_bytes
        out[f"gpu{g.index}.power_w"] = g.power_w
        out[f"gpu{g.index}.temperature_c"] = g.temperature_c
        out[f"gpu{g.index}.utilization_gpu_pct"] = g.utilization_gpu_pct
        for d in g.mig.devices if g.mig else []:
            out[f"gpu{g.index}.mig{d.index}.activity_pct"] = (
                d.activity.graphics_pct if d.activity else None
            )
    for e in frame.engines:
        out[f"{e.name}.up"] = 1.0 if e.up else 0.0
        out[f"{e.name}.requests_running"] = e.requests_running
        out[f"{e.name}.requests_waiting"] = e.requests_waiting
        out[f"{e.name}.kv_cache_usage"] = e.kv_cache_usage
        out[f"{e.name}.generation_tokens_per_s"] = e.generation_tokens_per_s
        out[f"{e.name}.ttft_p50_s"] = e.ttft_s.p50 if e.ttft_s else None
        out[f"{e.name}.ttft_p95_s"] = e.ttft_s.p95 if e.ttft_s else None
        out[f"{e.name}.itl_p95_s"] = e.itl_s.p95 if e.itl_s else None
        out[f"{e.name}.tpot_p95_s"] = e.tpot_s.p95 if e.tpot_s else None
    return out


class KeySeries:
    def __init__(self, keep_s: float = KEEP_S) -> None:
        self.keep_s = keep_s
        self.points: deque[tuple[float, dict[str, float | None]]] = deque()

    def add(self, frame: Frame) -> None:
        t = frame.taken_at.timestamp()
        self.points.append((t, key_values(frame)))
        while self.points and self.points[0][0] < t - self.keep_s:
            self.points.popleft()

    def trend(self, name: str, width: int, step_s: float = 1.0) -> list[float]:
        """The series' last ``width`` values, one per ``step_s`` of frame time (the last in each):
        the same trend live, in a replay at any speed, and after a pause."""
        out: dict[int, float] = {}
        for t, values in reversed(self.points):
            v = values.get(name)
            if v is None:
                continue
            out.setdefault(int(t // step_s), v)
            if len(out) >= width:
                break
        return [out[b] for b in sorted(out)]

    def export(self) -> dict[str, Any]:
        """{"seconds": 900, "t": [...], "series": {name: [values...]}} (null where unread)."""
        names: list[str] = []
        for _, values in self.points:
            names += [n for n in values if n not in names]
        return {
            "seconds": self.keep_s,
            "t": [t for t, _ in self.points],
            "series": {n: [values.get(n) for _, values in self.points] for n in names},
        }
