"""Humanised numbers for people (screens, Markdown). SI stays inside the Frame."""

from __future__ import annotations

GIB = 1024**3

NA = "n/a"


def gib(n: float | None) -> str:
    return NA if n is None else f"{n / GIB:.1f}"


def pct(frac: float | None, digits: int = 0) -> str:
    return NA if frac is None else f"{frac * 100:.{digits}f}%"


def num(v: float | None, digits: int = 0) -> str:
    return NA if v is None else f"{v:,.{digits}f}"


def seconds(v: float | None, lower_bound: bool = False) -> str:
    """Latency: ms below 1 s, seconds above; '≥' when only a lower bound is known."""
    if v is None:
        return NA
    prefix = "≥" if lower_bound else ""
    if v < 1:
        return f"{prefix}{v * 1000:.0f}ms"
    if v < 10:
        return f"{prefix}{v:.2f}s"
    return f"{prefix}{v:.1f}s"


def watts(v: float | None) -> str:
    return NA if v is None else f"{v:.0f}W"
