"""Documented thresholds, compared in one place. A figure exactly at a threshold meets it even
where float arithmetic leaves it a hair below: with a 99 % target the budget ``1 - 0.99`` is
0.010000000000000009, so a 6x burn computes as 5.999999999999995, and a 70 % against a 40 % KV
use is 0.29999999999999993 apart. Every finding and alert compares through these."""

from __future__ import annotations

TOLERANCE = 1e-9  # relative to the threshold (absolute below 1)


def at_least(value: float, threshold: float) -> bool:
    """``value >= threshold``, allowing float error at the edge."""
    return value >= threshold - TOLERANCE * max(1.0, abs(threshold))


def below(value: float, threshold: float) -> bool:
    """``value < threshold``, the complement of :func:`at_least`."""
    return not at_least(value, threshold)
