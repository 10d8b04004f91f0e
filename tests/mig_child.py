"""A MIG re-cut in a process of its own, for the interruption tests.

    python -m tests.mig_child STATE JOURNAL LOCKS MODEL TARGET SIGNAL K

The simulated GPU's MIG state is read from STATE and written back after every mutating call (it
lives in the driver, not in the process: the next process finds it as this one left it), and the
process sends itself SIGNAL right after its K-th mutating NVML call. Everything between is the
production manager, journal, lock and signal handling.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from console.gpucatalog import catalog
from console.mig.layouts import parse_layout
from console.mig.manager import MigManager
from console.sim.nvml import SimNvml

MUTATING = (
    "nvmlComputeInstanceDestroy",
    "nvmlGpuInstanceDestroy",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlDeviceSetMigMode",
)


def persisted_sim(state: Path, model: str) -> SimNvml:
    sim = SimNvml()
    sim.add_gpu(model, mig=[])
    sim.restore_mig(json.loads(state.read_text()))
    sim.nvmlInit()
    return sim


def main(argv: list[str]) -> int:
    state, journal, locks, model, target, sig, k = argv
    sim = persisted_sim(Path(state), model)
    made = [0]

    def persisting(fn: Any) -> Any:
        def call(*args: Any) -> Any:
            out = fn(*args)
            Path(state).write_text(json.dumps(sim.mig_state()))
            made[0] += 1
            if made[0] == int(k):
                os.kill(os.getpid(), int(sig))
            return out

        return call

    for name in MUTATING:
        setattr(sim, name, persisting(getattr(sim, name)))
    mm = MigManager(sim, audit_path=Path(journal), locks=Path(locks), user="tester")
    try:
        report = mm.apply(
            0, parse_layout(target, catalog()[model]), progress=lambda m: print(m, flush=True)
        )
    except KeyboardInterrupt:
        print("KeyboardInterrupt after the re-cut", flush=True)
        return 130
    print(json.dumps(report.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
