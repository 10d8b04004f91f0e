"""``inferdeck mig show|layouts|apply|export|import`` (all with --demo on the simulated node)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.mig.layouts import (
    Instance,
    MigError,
    describe,
    diff,
    parse_layout,
    placements,
    valid_layouts,
)
from console.mig.manager import ApplyReport, GpuMig, MigManager
from console.mig.parted import export_mig_parted, import_mig_parted
from console.mig.script import nvidia_smi
from console.out.jsondocs import (
    Interrupted,
    MigGpu,
    MigLayout,
    MigLayoutsDoc,
    MigShowDoc,
    Placement,
    dump,
)

if TYPE_CHECKING:
    from console.figures.plan import Plan
    from console.settings import Settings
    from console.sim.demo import DemoNode

from console.paths import mig_audit_log, snapshots_dir


class MigUsageError(Exception):
    pass


def _lib(demo: bool) -> tuple[Any, DemoNode | None]:
    if demo:
        from console.sim.demo import start_demo

        node = start_demo()
        node.nvml.nvmlInit()
        return node.nvml, node
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise MigError(
            f"NVML could not start ({exc}): no GPU to manage here (try --demo)."
        ) from None
    return pynvml, None


def run_mig(args: argparse.Namespace) -> int:
    try:
        lib, node = _lib(args.demo)
    except MigError as exc:
        print(f"inferdeck: {exc}", file=sys.stderr)
        return 2
    try:
        mm = MigManager(
            lib,
            audit_path=mig_audit_log(args.demo),
            snapshot=lambda when: _snapshot(lib, args.demo, when, node),
            simulated=args.demo,
        )
        count = mm.count()
        if hasattr(args, "gpu") and not 0 <= args.gpu < count:
            raise MigError(
                f"GPU {args.gpu} does not exist (this node has {count}, numbered from 0)."
            )
        command = SUBCOMMANDS.get(args.mig_command)
        return command(mm, count, args) if command is not None else 0
    except MigError as exc:
        print(f"inferdeck: {exc}", file=sys.stderr)
        return 2
    finally:
        if node is not None:
            node.stop()


def _layouts(mm: MigManager, count: int, args: argparse.Namespace) -> int:
    """The layouts the GPU's profiles allow, the current one marked."""
    g = mm.read(args.gpu)
    if g.spec is None:
        raise MigError(
            f"GPU {args.gpu}'s MIG profiles are unknown: not in the catalogue and the driver "
            "did not list placements (needs root)."
        )
    rows = [(layout, sorted(layout) == sorted(g.layout)) for layout in valid_layouts(g.spec)]
    if getattr(args, "format", "text") == "json":
        doc = MigLayoutsDoc(
            gpu=g.index,
            spec_source=g.spec_source,
            layouts=[
                MigLayout(layout=describe(la), placements=_placed(la), current=now)
                for la, now in rows
            ],
        )
        sys.stdout.write(dump(doc))
        return 0
    print(f"# profiles and placements from the {g.spec_source}")
    for layout, now in rows:
        print(f"{'*' if now else ' '} {describe(layout):<40} {placements(layout)}")
    return 0


def _apply_one(mm: MigManager, count: int, args: argparse.Namespace) -> int:
    g = mm.read(args.gpu)
    if g.spec is None and args.layout not in ("disable", "enable"):
        raise MigError(f"GPU {args.gpu}'s MIG profiles are unknown; its layouts cannot be checked.")
    target = parse_layout(args.layout, g.spec) if g.spec is not None else args.layout
    return _apply(mm, g, target, args.dry_run, args.yes, args.force, _plan(args.demo))


def _export(mm: MigManager, count: int, args: argparse.Namespace) -> int:
    """Every GPU's layout as a mig-parted config."""
    text = export_mig_parted([mm.read(i) for i in range(count)], args.config_label)
    if args.out:
        _write_whole(Path(args.out), text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _import(mm: MigManager, count: int, args: argparse.Namespace) -> int:
    """A mig-parted config's layouts applied, GPU by GPU (the worst exit status)."""
    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except OSError as exc:
        raise MigError(f"{args.file}: cannot read it ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise MigError(
            f"{args.file}: not a text file; give a mig-parted YAML config "
            "(`inferdeck mig export` writes one)."
        ) from None
    gpus = [mm.read(i) for i in range(count)]
    targets = import_mig_parted(text, args.config_label, gpus, args.file)
    rc = 0
    for index, target in targets.items():
        if target == "disable" and not gpus[index].mode_current and not gpus[index].mode_pending:
            print(f"GPU {index}: MIG is off and stays off: no change")
            continue
        rc = max(
            rc, _apply(mm, gpus[index], target, args.dry_run, args.yes, False, _plan(args.demo))
        )
    return rc


SUBCOMMANDS: dict[str, Callable[[MigManager, int, argparse.Namespace], int]] = {
    "show": lambda mm, count, args: _show(mm, count, getattr(args, "format", "text") == "json"),
    "layouts": _layouts,
    "apply": _apply_one,
    "export": _export,
    "import": _import,
}


def _placed(layout: list[Instance]) -> list[Placement]:
    return [Placement(profile=n, start=st) for n, st in sorted(layout, key=lambda x: x[1])]


def _show(mm: MigManager, count: int, as_json: bool) -> int:
    """Every GPU's MIG mode and layout, and every re-cut left interrupted (exit 2 when one left
    its GPU in neither layout)."""
    recoveries = mm.recoveries()
    gpus: list[MigGpu] = []
    lines = []
    for i in range(count):
        try:
            g = mm.read(i)
        except MigError as exc:
            gpus.append(MigGpu(index=i, error=str(exc)))
            lines.append(f"GPU {i}: {exc}")
            continue
        gpus.append(
            MigGpu(
                index=i,
                model=g.model.name if g.model else None,
                mig=g.mode_current,
                mig_pending=g.mode_pending,
                layout=describe(g.layout),
                placements=_placed(g.layout),
                bare=_placed(g.bare),
            )
        )
        mode = f"MIG {'on' if g.mode_current else 'off'}" + (
            f" (pending {'on' if g.mode_pending else 'off'})"
            if g.mode_pending != g.mode_current
            else ""
        )
        lines.append(
            f"GPU {i} {g.model.name if g.model else ''}: {mode}; {describe(g.layout)}"
            + (f" [{placements(g.layout)}]" if g.layout else "")
            + (f"; NO compute instance on {placements(g.bare)}" if g.bare else "")
        )
    for r in recoveries:
        lines.append(f"INTERRUPTED: {r.sentence}")
        if r.index is not None:
            lines.append(f"  to bring it to a recorded layout: {r.command}")
    if as_json:
        doc = MigShowDoc(
            gpus=gpus,
            interrupted=[
                Interrupted(
                    gpu=r.index,
                    state=r.state,
                    sentence=r.sentence,
                    command=r.command if r.index is not None else None,
                )
                for r in recoveries
            ],
        )
        sys.stdout.write(dump(doc))
    elif lines:
        print("\n".join(lines))
    return 2 if any(r.state == "neither" for r in recoveries) else 0


def _write_whole(path: Path, text: str) -> None:
    """The file whole or not at all: written beside it, flushed, then renamed over it (a full or
    read-only disk leaves nothing that mig-parted could be handed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise MigError(
            f"{path}: cannot write the mig-parted config there ({exc.strerror or exc}); "
            "nothing was written."
        ) from None


def _snapshot(lib: Any, demo: bool, when: str, node: DemoNode | None = None) -> Path:
    """The automatic bundle before and after a change: one poll of the whole node — GPUs as NVML
    reads them, the configured (or demo) engines, the plan — as the console would save it."""
    import asyncio

    from console.compose import config_targets, discover_targets, sample, secrets_of
    from console.out.bundle import write_bundle
    from console.read.live import LiveSource
    from console.read.nvml import NvmlReader

    settings = _plan(demo)
    nvml = NvmlReader(lib, simulated=demo, journal=mig_audit_log(demo))
    targets = config_targets(settings) + (node.targets() if node is not None else [])
    if not targets and not demo and settings.discover:
        targets = discover_targets(nvml)
    live = LiveSource.reading(targets, nvml, window_s=settings.window_s, plan=settings)
    frame = asyncio.run(sample(live, 0.0, settings.interval_s))
    return write_bundle(
        snapshots_dir(demo=demo),
        frame,
        f"mig {when}" + (" simulated" if demo else ""),
        secrets=secrets_of(live.poller),
    )


def _plan(demo: bool) -> Settings:
    """The plan, for the services-landing check (the demo's, or the configured one)."""
    from console.settings import ConfigError, config_path, demo_settings, load_settings

    try:
        return demo_settings() if demo else load_settings(config_path())
    except ConfigError as exc:
        raise MigError(str(exc)) from None


def _apply(
    mm: MigManager,
    g: GpuMig,
    target: list[Instance] | str,
    dry_run: bool,
    yes: bool,
    force: bool = False,
    plan: Plan | None = None,
) -> int:
    keep, destroy, create = diff(g.layout, target if isinstance(target, list) else [])
    print(
        f"GPU {g.index}: {describe(g.layout)} -> {target if isinstance(target, str) else describe(target)}"
    )
    if isinstance(target, list):
        print(
            f"  keep    {placements(keep) or '-'}\n  destroy {placements(destroy) or '-'}\n  create  {placements(create) or '-'}"
        )
    for c in nvidia_smi(g.index, g.layout, target, g.profile_ids, g.gi_ids):
        print(f"  $ {c}")
    for note in mm.reset_notes(g, target):
        print(f"  NOTE: {note}")
    problems = mm.precheck(g, target)
    for p in problems:
        print(f"  BLOCKED: {p}")
    warnings = []
    if plan is not None:
        from console.mig.preview import landing

        for land in landing(plan, g, target):
            if land["warning"]:
                warnings.append(land["warning"])
            else:
                print(
                    f"  {land['service']} lands on {land['lands_on']}: headroom {land['headroom_gib']:.1f} GiB"
                )
    for w in warnings:
        print(f"  WARNING: {w}" + ("" if force else " (--force goes ahead anyway)"))
    if dry_run:
        return 2 if problems else (1 if warnings else 0)
    if problems:  # --force never overrides these: processes, root, pending mode
        return 2
    if warnings and not force:
        print(
            "  not applied: the plan would break; change the plan, pick another layout, or pass --force"
        )
        return 1
    if not yes:
        if not sys.stdin.isatty():
            raise MigError("not applying without confirmation: pass --yes, or run in a terminal.")
        typed = input(f"Type the GPU index ({g.index}) to apply, anything else cancels: ").strip()
        if typed != str(g.index):
            print("cancelled")
            return 1
    report = mm.apply(g.index, target, progress=lambda m: print(f"  .. {m}", flush=True))
    for line in report_lines(report, mm.audit_path):
        print(f"  {line}")
    return 0 if report.result == "applied" or str(report.result).startswith("pending") else 1


def report_lines(report: ApplyReport, audit: Path | None) -> list[str]:
    """An apply's outcome in sentences (the audit log keeps the whole record, steps included)."""
    lines = [
        f"{report.result}: GPU {report.gpu} was {report.before or 'no MIG instances'}, "
        f"now {report.after or 'no MIG instances'}."
    ]
    for label, said in (
        ("verified", report.verified),
        ("error", report.error),
        ("rollback error", report.rollback_error),
        ("next", report.next),
        ("snapshot before", report.snapshot_before),
        ("snapshot after", report.snapshot_after),
    ):
        if said:
            lines.append(f"{label}: {said}")
    lines += [f"note: {n}" for n in report.notes]
    if audit is not None:
        lines.append(
            f"every step is in the MIG journal {audit}"
            + (f" (apply {report.apply_id})" if report.apply_id else "")
        )
    return lines
