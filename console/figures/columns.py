"""Columns a dashboard table and snapshot.md's table share: one spec per column — its label, key,
the pane's width, the heading snapshot.md writes (where the page has room for the whole name), and
a pure text function (the pane adds style). Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from console.frame import CostReport, ServiceStatus
from console.units import NA, money, pct, price_range

R = TypeVar("R")


@dataclass(frozen=True)
class Column(Generic[R]):
    label: str
    key: str
    width: int
    text: Callable[[R], str]
    heading: str | None = None  # snapshot.md's, when not the label in lower case

    @property
    def doc(self) -> str:
        return self.heading or self.label.lower()


def _cost(text: Callable[[CostReport], str]) -> Callable[[ServiceStatus], str]:
    """A cost cell: n/a for a service without cost figures, never a stand-in 0."""
    return lambda s: NA if s.cost is None else text(s.cost)


def _joules(k: CostReport) -> str:
    return f"{k.joules_per_output_token:.1f}" if k.joules_per_output_token else NA


# the Cost pane and snapshot.md's Cost table, a row per service
COST_COLUMNS: tuple[Column[ServiceStatus], ...] = (
    Column("Service", "service", 12, lambda s: s.name),
    Column("$/h", "hourly", 6, _cost(lambda k: money(k.usd_per_h))),
    Column("Energy", "energy", 7, _cost(lambda k: money(k.energy.usd_per_h if k.energy else None, 3))),
    Column("Busy", "busy", 5, _cost(lambda k: pct(k.occupancy))),
    Column("$/M out", "out", 8, _cost(lambda k: money(k.usd_per_m_output_tokens)),
           heading="$/M output tokens"),
    Column("$/M good", "good", 13, _cost(lambda k: price_range(k.usd_per_m_compliant_tokens)),
           heading="$/M good tokens"),
    Column("J/tok", "jtok", 6, _cost(_joules), heading="J/tok"),
)  # fmt: skip
