"""Cost meters (DESIGN §1 "Cost").

    hourly cost = three-year system total / 26,280 h          (or a given hourly price)
    cost per million compliant output tokens = hourly x 1e6 / (3,600 x u x G)
    a candidate R beats baseline L per token when G_R / G_L > (C_R / C_L) x (u_L / u_R)

Energy: measured power (GPU boards, plus the host's figure or a wall meter when given) x PUE when
the bill does not already include facility overhead, x the tariff at that hour.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from console.frame import EnergyReport
from console.records import UserFile

HORIZON_H = 3 * 365 * 24  # 26,280


class CostSpec(UserFile):
    system_cost_usd: float | None = Field(None, gt=0)  # three-year system total
    hourly_usd: float | None = Field(None, gt=0)  # or a price per hour (cloud, lease)
    horizon_h: float = Field(HORIZON_H, gt=0)
    usd_per_kwh: float | None = Field(None, ge=0)  # flat tariff
    tariff_by_hour: list[float] | None = (
        None  # 24 prices, local hour 0..23 (overrides the flat one)
    )
    pue: float = Field(1.54, ge=1.0)  # facility / IT energy; applied only when not already included
    facility_overhead_included: bool = True
    host_power_w: float | None = Field(None, ge=0)  # CPUs, fans, NICs: added to GPU board power
    wall_power_w: float | None = Field(None, gt=0)  # a wall-meter reading for the whole system

    @model_validator(mode="after")
    def _one_price(self) -> Self:
        if self.system_cost_usd is None and self.hourly_usd is None:
            raise ValueError("give system_cost_usd (three-year total) or hourly_usd")
        if self.system_cost_usd is not None and self.hourly_usd is not None:
            raise ValueError("give system_cost_usd or hourly_usd, not both")
        if self.tariff_by_hour is not None and len(self.tariff_by_hour) != 24:
            raise ValueError("tariff_by_hour needs 24 prices, one per hour of the day")
        return self


def hourly_cost(total_usd: float, horizon_h: float = HORIZON_H) -> float:
    return total_usd / horizon_h


def per_million(hourly_usd: float, goodput_tok_s: float, occupancy: float) -> float | None:
    """Cost per million (compliant) output tokens; None when nothing was served."""
    if goodput_tok_s <= 0 or occupancy <= 0:
        return None
    return hourly_usd * 1_000_000 / (3600 * occupancy * goodput_tok_s)


def crossover(cost_r: float, cost_l: float, u_l: float = 1.0, u_r: float = 1.0) -> float:
    """The goodput ratio G_R / G_L a candidate R must beat to be cheaper per token than L."""
    return (cost_r / cost_l) * (u_l / u_r)


def serving_goodput(window_avg_tok_s: float, occupancy: float | None) -> float | None:
    """G, the goodput *while serving*, from a window's average (which already holds u: avg = u x G)."""
    if not occupancy or occupancy <= 0:
        return None
    return window_avg_tok_s / occupancy


def tariff_at(spec: CostSpec, hour: int) -> float | None:
    if spec.tariff_by_hour is not None:
        return spec.tariff_by_hour[hour % 24]
    return spec.usd_per_kwh


def node_hourly(spec: CostSpec) -> float:
    return (
        spec.hourly_usd
        if spec.hourly_usd is not None
        else hourly_cost(spec.system_cost_usd or 0.0, spec.horizon_h)
    )


def energy(
    spec: CostSpec, gpu_power_w: float | None, hour: int, node_share: float = 1.0
) -> EnergyReport:
    """Power drawn, its basis, and what it costs per hour now. For a part of the node, pass its GPU
    power and its ``node_share`` of the host's (or the wall meter's) figure."""
    if spec.wall_power_w is not None:
        watts, basis = spec.wall_power_w * node_share, "wall meter"
    elif gpu_power_w is None:
        return EnergyReport(power_w=None, basis=None, usd_per_h=None)
    elif spec.host_power_w is not None:
        watts, basis = gpu_power_w + spec.host_power_w * node_share, "GPU boards + host figure"
    else:
        watts, basis = gpu_power_w, "GPU only"
    if not spec.facility_overhead_included:
        watts *= spec.pue
        basis += f" x PUE {spec.pue:g}"
    price = tariff_at(spec, hour)
    return EnergyReport(
        power_w=watts,
        basis=basis,
        usd_per_kwh=price,
        usd_per_h=watts / 1000 * price if price is not None else None,
    )


def slice_share(slices: int, full_slices: int) -> float:
    """A MIG slice carries its share of the card (a 2g.48gb of a 4g card = 1/2)."""
    return slices / full_slices if full_slices else 1.0
