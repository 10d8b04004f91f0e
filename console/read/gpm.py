"""GPU Performance Monitoring (GPM): the activity of a whole GPU or of one MIG GPU instance,
averaged between two NVML samples (Hopper and newer; DCGM reads its per-instance figures the same
way). Ampere and Ada have no GPM: they say so.

Each GPU (and each GPU instance) keeps two samples, filled in turn. A poll too soon after the last
keeps the previous figure; one after a long gap reseeds (an average over minutes says nothing about
now). A GPU instance re-created under the same id (a re-layout) is known by its compute instances'
UUIDs and reseeded, never differenced against the old one. Samples are freed when an instance goes,
the GPU is lost, or the reader closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from console.frame import GpmActivity

MIN_INTERVAL_S = 0.5  # sooner than this: keep the previous figure
MAX_INTERVAL_S = 30.0  # longer than this: reseed
NO_GPM = "GPM needs Hopper or newer (on Ampere and Ada, DCGM's profiling metrics give activity)"

# (GpmActivity field, pynvml metric id name)
METRICS = (
    ("graphics_pct", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
    ("sm_pct", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("tensor_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("dram_bw_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
    ("pcie_tx_mib_s", "NVML_GPM_METRIC_PCIE_TX_PER_SEC"),
    ("pcie_rx_mib_s", "NVML_GPM_METRIC_PCIE_RX_PER_SEC"),
)
DECODERS = tuple(f"NVML_GPM_METRIC_NVDEC_{i}_UTIL" for i in range(8))
_NAMES = tuple(n for _, n in METRICS) + DECODERS  # the metrics one request asks for, in order


class GpmLost(Exception):
    """The GPU stopped answering while being sampled."""


@dataclass
class _Entity:
    identity: Hashable
    samples: list[Any]  # two, used in turn
    t: float | None = None  # when samples[0] was taken
    last: GpmActivity | None = None


class GpmSampler:
    def __init__(self, lib: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib
        self._clock = clock
        self._entities: dict[tuple[int, int | None], _Entity] = {}
        self._support: dict[int, str | None] = {}  # GPU index -> None (supported) or why not
        self._request: Any = None  # one metrics request, its metric ids set once, reused

    def support(self, index: int, handle: Any) -> str | None:
        """None when the GPU supports GPM, else the reason (asked once per GPU)."""
        if index in self._support:
            return self._support[index]
        lib = self._lib
        why: str | None
        if getattr(lib, "nvmlGpmQueryDeviceSupport", None) is None:
            why = "this nvidia-ml-py has no GPM calls (nvidia-ml-py >= 12.535)"
        else:
            try:
                why = None if lib.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice else NO_GPM
            except lib.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_UNKNOWN):
                    raise GpmLost() from None
                why = (
                    NO_GPM
                    if code == lib.NVML_ERROR_NOT_SUPPORTED
                    else "driver too old for GPM"
                    if code == lib.NVML_ERROR_FUNCTION_NOT_FOUND
                    else f"GPM: {exc}"
                )
        self._support[index] = why
        return why

    def read(
        self, index: int, handle: Any, gi_id: int | None, identity: Hashable
    ) -> tuple[GpmActivity | None, str | None]:
        """Activity of the GPU (gi_id None) or of one GPU instance since the previous call, or
        (None, why). ``identity`` changes when the instance was re-created."""
        why = self.support(index, handle)
        if why is not None:
            return None, why
        lib, key, now = self._lib, (index, gi_id), self._clock()
        ent = self._entities.get(key)
        if ent is not None and ent.identity != identity:
            self._free(key)
            ent = None
        try:
            if ent is None:
                ent = _Entity(identity, [lib.nvmlGpmSampleAlloc(), lib.nvmlGpmSampleAlloc()])
                self._entities[key] = ent
            if ent.t is not None and now - ent.t < MIN_INTERVAL_S:
                return ent.last, None if ent.last else "activity after the next poll"
            self._sample(handle, gi_id, ent.samples[1])
        except lib.NVMLError as exc:
            code = getattr(exc, "value", None)
            self._free(key)
            if code in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_UNKNOWN):
                raise GpmLost() from None
            return None, f"GPM sample failed: {exc}"
        first, gap = ent.t is None, now - (ent.t or now)
        ent.samples.reverse()  # the sample just taken is the base for the next call
        ent.t = now
        if first:
            return None, "activity after the next poll (GPM needs two samples)"
        if gap > MAX_INTERVAL_S:
            ent.last = None
            return None, f"GPM reseeded after {gap:.0f} s without a sample"
        ent.last = self._metrics(ent.samples[1], ent.samples[0], gap)
        return ent.last, None

    def _sample(self, handle: Any, gi_id: int | None, sample: Any) -> None:
        if gi_id is None:
            self._lib.nvmlGpmSampleGet(handle, sample)
        else:
            self._lib.nvmlGpmMigSampleGet(handle, gi_id, sample)

    def _metrics(self, older: Any, newer: Any, gap: float) -> GpmActivity:
        lib = self._lib
        mg = self._request
        if mg is None:  # the ids and count are set once: NVML writes only each metric's result
            mg = self._request = lib.c_nvmlGpmMetricsGet_t()
            mg.version = lib.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(_NAMES)
            slots = mg.metrics
            for i, name in enumerate(_NAMES):
                slots[i].metricId = getattr(lib, name)
        mg.sample1, mg.sample2 = older, newer
        lib.nvmlGpmMetricsGet(mg)
        ok = lib.NVML_SUCCESS
        slots = mg.metrics
        values: dict[str, float] = {}
        for i, name in enumerate(_NAMES):
            m = slots[i]
            if int(m.nvmlReturn) == ok:
                values[name] = float(m.value)
        fields: dict[str, float | None] = {f: values.get(n) for f, n in METRICS}
        decoders = [values[n] for n in DECODERS if n in values]
        busy = max(decoders, default=0.0)
        return GpmActivity(nvdec_pct=busy if busy > 0 else None, interval_s=gap, **fields)

    def retain(self, index: int, gi_ids: set[int | None]) -> None:
        """Free the samples of this GPU's instances that are gone."""
        for key in [k for k in self._entities if k[0] == index and k[1] not in gi_ids]:
            self._free(key)

    def forget_gpu(self, index: int) -> None:
        for key in [k for k in self._entities if k[0] == index]:
            self._free(key)
        self._support.pop(index, None)

    def close(self) -> None:
        for key in list(self._entities):
            self._free(key)

    def _free(self, key: tuple[int, int | None]) -> None:
        ent = self._entities.pop(key, None)
        for sample in ent.samples if ent else []:
            try:
                self._lib.nvmlGpmSampleFree(sample)
            except self._lib.NVMLError:
                pass  # a lost GPU's samples: nothing more to do
