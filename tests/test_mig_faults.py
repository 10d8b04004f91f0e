"""A MIG re-cut under every fault: an NVML error at every mutating call, SIGINT, SIGTERM and
SIGKILL at every step, two writers at once, a state folder nearly full. Afterwards the GPU is in
exactly the old or the new layout with every compute instance (or, after SIGKILL, the next start
names the state and offers the apply that completes it), and the journal holds a begin record and
a record of each step taken. The simulator's own state is the truth read here, not the manager's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pynvml
import pytest

from console.gpucatalog import catalog
from console.mig.journal import records
from console.mig.layouts import MigError, layout_text, parse_layout
from console.mig.manager import MigManager
from console.sim.nvml import SimNvml
from tests.conftest import ROOT
from tests.mig_child import MUTATING, persisted_sim
from tests.test_jsondocs import valid


def _layout(model: str, text: str) -> list[tuple[str, int]]:
    got = parse_layout(text, catalog()[model])
    assert isinstance(got, list)
    return sorted(got)


RECUTS = [  # (model, before, after): both GI-destroy calls, creates largest first
    ("rtx-pro-6000-se", "2g.48gb@0,2g.48gb@6", "1g.24gb@0,1g.24gb@3,1g.24gb@6,1g.24gb@9"),
    ("rtx-pro-6000-se", "1g.24gb@0,1g.24gb@3,1g.24gb@6,1g.24gb@9", "2g.48gb@0,1g.24gb@6,1g.24gb@9"),
    ("h100-80gb", "3g.40gb+4g.40gb", "2g.20gb*3+1g.10gb"),
]


def truth(sim: SimNvml) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(layout, instances without a compute instance) as the simulated driver holds them."""
    gis = sim.gpus[0].gis
    return (
        sorted((gi.profile.name, gi.start) for gi in gis),
        sorted((gi.profile.name, gi.start) for gi in gis if not gi.cis),
    )


def node(model: str, layout: list[tuple[str, int]]) -> SimNvml:
    sim = SimNvml()
    sim.add_gpu(model, mig=layout)
    sim.nvmlInit()
    return sim


def count_mutating(sim: SimNvml) -> list[str]:
    """The mutating calls the manager makes from now on, in order (attempts, failed ones too)."""
    made: list[str] = []

    def counted(name: str, fn):
        def call(*args):
            made.append(name)
            return fn(*args)

        return call

    for name in MUTATING:
        setattr(sim, name, counted(name, getattr(sim, name)))
    return made


def apply_records(journal: Path, apply_id: str) -> list[dict]:
    return [r for r in records(journal) if r.get("apply") == apply_id]


def assert_whole_journal(recs: list[dict], attempted: int, result: str) -> None:
    kinds = [r["record"] for r in recs]
    assert kinds[0] == "begin" and kinds.count("begin") == 1, kinds
    assert kinds.count("step") == attempted and kinds.count("done") == attempted, kinds
    ends = [r for r in recs if r["record"] == "end"]
    assert len(ends) == 1 and ends[0]["result"] == result, ends
    # every step is on disk before it is taken: its step record precedes its done record
    for r in recs:
        if r["record"] == "done":
            assert any(s["record"] == "step" and s["n"] == r["n"] for s in recs[: recs.index(r)])


def mutating_sequence(model: str, before, after, tmp_path: Path) -> list[tuple[str, int]]:
    """Each mutating call of a clean re-cut as (function, its occurrence among that function's)."""
    sim = node(model, before)
    made = count_mutating(sim)
    mm = MigManager(sim, audit_path=tmp_path / "clean.jsonl", locks=tmp_path, user="tester")
    assert mm.apply(0, after).result == "applied"
    seen: dict[str, int] = {}
    out = []
    for name in made:
        seen[name] = seen.get(name, 0) + 1
        out.append((name, seen[name]))
    return out


@pytest.mark.parametrize("model,before,after", RECUTS)
@pytest.mark.parametrize(
    "code,reason",
    [
        (pynvml.NVML_ERROR_IN_USE, "in use by another client"),
        (pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, "insufficient resources"),
        (pynvml.NVML_ERROR_UNKNOWN, "unknown error in the driver"),
    ],
)
def test_a_fault_at_every_mutating_call_ends_old_or_new_with_every_compute_instance(
    tmp_path, model, before, after, code, reason
):
    before, after = _layout(model, before), _layout(model, after)
    sequence = mutating_sequence(model, before, after, tmp_path)
    assert len(sequence) >= 6
    outcomes = set()
    for k, (fn, nth) in enumerate(sequence, 1):
        sim = node(model, before)
        sim.inject(code, gpu=0, function=fn, on_call=nth)
        made = count_mutating(sim)
        journal = tmp_path / f"journal-{k}.jsonl"
        mm = MigManager(sim, audit_path=journal, locks=tmp_path, user="tester")
        report = mm.apply(0, after)
        sim.faults.clear()
        layout, bare = truth(sim)
        assert not bare, (k, fn, report)
        assert report.result == "rolled back" and layout == before, (k, fn, report)
        assert report.error and f"{reason}" in report.error, report.error
        assert "each with its compute instance and a MIG device UUID" in (report.verified or "")
        assert_whole_journal(apply_records(journal, report.apply_id), len(made), "rolled back")
        failed = [r for r in apply_records(journal, report.apply_id) if r["record"] == "done"]
        assert f"failed: {reason}" in [r["result"] for r in failed]
        outcomes.add(fn)
    assert {"nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy"} <= outcomes


def test_a_gpu_instance_held_by_another_client_gets_its_compute_instance_back(tmp_path):
    """DCGM holds the instance: every GI destroy answers "in use" after its compute instance is
    gone. The rollback re-creates that compute instance; the report says what it verified."""
    model, before, after = RECUTS[0]
    before, after = _layout(model, before), _layout(model, after)
    sim = node(model, before)
    sim.inject(pynvml.NVML_ERROR_IN_USE, gpu=0, function="nvmlGpuInstanceDestroy")
    mm = MigManager(sim, audit_path=tmp_path / "j.jsonl", locks=tmp_path, user="tester")
    report = mm.apply(0, after)
    sim.faults.clear()
    assert truth(sim) == (before, [])
    assert report.result == "rolled back"
    assert report.error == "destroy GI 2g.48gb@0: in use by another client"
    assert [s.step for s in report.steps][-1] == "rollback: re-create CI on 2g.48gb@0"
    assert mm.read(0).bare == [] and len(mm.read(0).devices) == 2


def test_a_compute_instance_lost_before_the_apply_is_re_created_on_the_way(tmp_path):
    model, before, after = RECUTS[1]
    before, after = _layout(model, before), _layout(model, after)
    sim = node(model, before)
    gi = next(g for g in sim.gpus[0].gis if g.start == 9)
    gi.cis.clear()  # left bare by an earlier tool
    mm = MigManager(sim, audit_path=tmp_path / "j.jsonl", locks=tmp_path, user="tester")
    assert mm.read(0).bare == [("1g.24gb", 9)]
    report = mm.apply(0, after)
    assert report.result == "applied" and truth(sim) == (after, [])
    assert "re-create CI on 1g.24gb@9" in [s.step for s in report.steps]


def _child(state: Path, journal: Path, locks: Path, model: str, target: str, sig: int, k: int):
    return subprocess.run(
        [sys.executable, "-m", "tests.mig_child", str(state), str(journal), str(locks), model]
        + [target, str(sig), str(k)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_at_every_step(tmp_path, sig):
    from console.figures.findings import findings
    from console.out.checkplugin import check_lines
    from console.read.live import LiveSource
    from console.read.nvml import NvmlReader
    from console.settings import Settings

    model, before_text, after_text = RECUTS[0]
    before, after = _layout(model, before_text), _layout(model, after_text)
    steps = len(mutating_sequence(model, before, after, tmp_path))
    assert steps == 12
    for k in range(1, steps + 1):
        state, journal, locks = (
            tmp_path / f"s{k}.json",
            tmp_path / f"j{k}.jsonl",
            tmp_path / f"l{k}",
        )
        state.write_text(json.dumps(node(model, before).mig_state()))
        res = _child(state, journal, locks, model, after_text, sig, k)
        sim = persisted_sim(state, model)
        recs = list(records(journal))
        kinds = [r["record"] for r in recs]
        assert kinds[0] == "begin" and kinds.count("begin") == 1
        assert recs[0]["before"] == before_text and recs[0]["target"] == after_text
        if sig != signal.SIGKILL:  # held off: the re-cut finished, then the process quit
            assert res.returncode == (130 if sig == signal.SIGINT else -sig), res.stderr
            assert f"{signal.Signals(sig).name} received: finishing the re-cut" in res.stdout
            assert "applied: GPU 0 is now" in res.stdout and "quitting as asked" in res.stdout
            assert truth(sim) == (after, []), (sig, k)
            assert_whole_journal(recs, steps, "applied")
            continue
        assert res.returncode == -signal.SIGKILL
        # every step taken was on disk before it was taken
        assert kinds.count("step") == k and kinds.count("done") in (k - 1, k) and "end" not in kinds
        layout, bare = truth(sim)
        expected = "new" if k == steps else "neither"  # 12 steps: the last one completes it
        assert (layout == after and not bare) == (expected == "new")
        # the next start: the manager, the dashboard's reader, findings and check all say so
        mm = MigManager(sim, audit_path=journal, locks=locks, user="tester")
        (found,) = mm.recoveries()
        assert found.state == expected and found.target == after_text and found.index == 0
        assert found.command == f"inferdeck mig apply 0 {after_text}"
        live = LiveSource.reading(
            [], NvmlReader(sim, simulated=True, journal=journal), plan=Settings()
        )
        import asyncio

        frame = asyncio.run(live.poll())
        recut = frame.gpus[0].mig.recut
        assert recut is not None and recut.state == expected
        assert recut.action == found.command
        (finding,) = [f for f in findings(frame) if f.title.startswith("MIG re-cut")]
        assert finding.severity == ("critical" if expected == "neither" else "info")
        first = check_lines(frame, Settings())[0]
        assert first.startswith(
            "INFERDECK CRITICAL - GPU 0" if expected == "neither" else "INFERDECK OK"
        ), first
        # the offered apply completes it and closes the record; the dead holder is named
        report = mm.apply(0, parse_layout(found.target, catalog()[model]))
        assert report.result == "applied" and truth(sim) == (after, [])
        assert any("ended without releasing its lock" in n for n in report.notes), report.notes
        assert mm.recoveries() == []


def _together(mm, after, start, settled, out, i) -> None:
    """One of two applies started at once; the one that runs waits (at each step) until the other
    has returned, so the two overlap however the threads are scheduled."""
    start.wait()
    try:
        out[i] = mm.apply(0, after, progress=lambda _m: settled.wait(5))
    except MigError as exc:
        out[i] = exc
    finally:
        settled.set()


def test_two_applies_on_one_gpu_at_once_one_runs_the_other_is_refused(tmp_path):
    model, before, after = RECUTS[0]
    before, after = _layout(model, before), _layout(model, after)
    for trial in range(20):
        sim = node(model, before)
        journal = tmp_path / f"j{trial}.jsonl"
        managers = [
            MigManager(sim, audit_path=journal, locks=tmp_path / "locks", user=f"op{i}")
            for i in range(2)
        ]
        start = threading.Barrier(2)
        settled = threading.Event()  # one of the two has returned: the runner may go on
        out: list[object] = [None, None]
        threads = [
            threading.Thread(target=_together, args=(managers[i], after, start, settled, out, i))
            for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        refused = [o for o in out if isinstance(o, MigError)]
        ran = [o for o in out if not isinstance(o, MigError)]
        assert len(refused) == 1 and len(ran) == 1, (trial, out)
        assert ran[0].result == "applied" and truth(sim) == (after, [])
        said = str(refused[0])
        assert f"GPU 0 is being re-cut by pid {os.getpid()}" in said and "user op" in said, said
        assert "nothing was changed" in said
        assert [r["record"] for r in records(journal)].count("begin") == 1


def test_another_process_holding_the_lock_is_named_and_a_dead_one_is_recognised(tmp_path):
    model, before, after = RECUTS[0]
    before, after = _layout(model, before), _layout(model, after)
    sim = node(model, before)
    uuid = sim.gpus[0].uuid
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from console.mig.guard import gpu_lock\n"
            f"with gpu_lock(Path({str(tmp_path)!r}), {uuid!r}, 0, 'alice', 'inferdeck mig import x'):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        mm = MigManager(sim, audit_path=tmp_path / "j.jsonl", locks=tmp_path, user="bob")
        with pytest.raises(MigError) as refused:
            mm.apply(0, after)
        assert f"pid {holder.pid} (inferdeck mig import x, user alice) since" in str(refused.value)
        assert truth(sim) == (before, []) and not (tmp_path / "j.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    report = mm.apply(0, after)
    assert report.result == "applied"
    assert any(
        f"pid {holder.pid}" in n and "ended without releasing its lock" in n for n in report.notes
    )


@contextlib.contextmanager
def small_disk(tmp_path: Path, free_kib: int):
    """A tmpfs of its own with about ``free_kib`` KiB free (root only)."""
    mnt = tmp_path / f"disk{free_kib}"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    got = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {got.stderr.strip()}")
    try:
        st = os.statvfs(mnt)
        fill = st.f_bavail * st.f_frsize - free_kib * 1024
        with open(mnt / "filler", "wb") as f:
            f.write(b"\0" * fill)
        left = os.statvfs(mnt)
        assert abs(left.f_bavail * left.f_frsize - free_kib * 1024) <= 4096
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("free_kib", [0, 40, 70, 100, 130])
def test_a_nearly_full_state_folder_never_loses_a_change(tmp_path, free_kib):
    from console.out.bundle import write_bundle
    from console.read.live import LiveSource
    from console.read.nvml import NvmlReader

    model, before, after = RECUTS[0]
    before, after = _layout(model, before), _layout(model, after)
    sim = node(model, before)
    live = LiveSource.reading([], NvmlReader(sim, simulated=True))
    import asyncio

    frame = asyncio.run(live.poll())
    with small_disk(tmp_path, free_kib) as disk:
        state = disk / "inferdeck"
        journal = state / "mig-audit.jsonl"
        mm = MigManager(
            sim,
            audit_path=journal,
            locks=state / "locks",
            user="tester",
            snapshot=lambda when: write_bundle(state / "snapshots", frame, f"mig {when}"),
        )
        try:
            report = mm.apply(0, after)
        except MigError as exc:  # refused before any change: it says so in one sentence
            assert "no room" in str(exc) or "cannot take" in str(exc), exc
            assert "nothing was changed" in str(exc)
            assert truth(sim) == (before, [])
            return
        assert report.result == "applied" and truth(sim) == (after, [])
        recs = apply_records(journal, report.apply_id)
        assert_whole_journal(recs, 12, "applied")
        for when in ("before", "after"):
            path = getattr(report, f"snapshot_{when}")
            assert path or any(f"{when}-snapshot could not be written" in n for n in report.notes)
        if not report.snapshot_after:
            assert any("the change was made" in n for n in report.notes)
        leftovers = [p.name for p in state.iterdir() if p.name.endswith(".reserve")]
        assert leftovers == []
    assert free_kib >= 40  # with nothing free the apply must have been refused


def _inferdeck(*args: str, env: dict[str, str], timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.integration
def test_a_killed_cli_apply_is_named_by_mig_show_and_check_and_the_offered_apply_closes_it(
    tmp_path,
):
    env = {"XDG_STATE_HOME": str(tmp_path)}
    target = "2g.48gb@0,2g.48gb@6"
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "mig", "apply", "2", target, "--demo", "--yes"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if ".. destroy GI 1g.24gb@0" in line or not line:
            break
    proc.kill()
    proc.wait()
    journal = tmp_path / "inferdeck" / "demo" / "mig-audit.jsonl"
    kinds = [r["record"] for r in records(journal)]
    assert kinds[0] == "begin" and "end" not in kinds
    # the demo's simulated GPUs start afresh in each process: GPU 2 reads back in its old layout
    shown = _inferdeck("mig", "show", "--demo", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "INTERRUPTED: GPU 2: a MIG re-cut from 1g.24gb@0,1g.24gb@3,1g.24gb@6,1g.24gb@9 to " in (
        shown.stdout
    )
    assert "the GPU is still in the old layout" in shown.stdout
    assert f"to bring it to a recorded layout: inferdeck mig apply 2 {target}" in shown.stdout
    as_json = _inferdeck("mig", "show", "--demo", "--format", "json", env=env)
    doc = json.loads(as_json.stdout)
    valid(doc, "mig-show")
    assert as_json.returncode == 0 and len(doc["interrupted"]) == 1
    assert {"gpu": 2, "state": "old", "command": f"inferdeck mig apply 2 {target}"}.items() <= (
        doc["interrupted"][0].items()
    )
    assert doc["gpus"][2]["layout"] == "1g.24gb x4"
    check = _inferdeck("check", "--demo", "--wait", "0", env=env)
    assert check.returncode >= 1 and "Traceback" not in check.stderr
    assert "GPU 2: MIG re-cut interrupted: the GPU is still in the old layout" in check.stdout
    done = _inferdeck("mig", "apply", "2", target, "--demo", "--yes", env=env)
    assert done.returncode == 0 and "applied: GPU 2" in done.stdout, done.stdout + done.stderr
    assert "ended without releasing its lock" in done.stdout
    again = _inferdeck("mig", "show", "--demo", env=env)
    assert "INTERRUPTED" not in again.stdout


@pytest.mark.integration
def test_mig_export_out_is_whole_or_absent(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path)}
    res = _inferdeck("mig", "export", "--demo", "--out", "/proc/inferdeck.yaml", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("inferdeck: /proc/inferdeck.yaml: cannot write the mig-parted")
    with small_disk(tmp_path, 0) as disk:
        out = disk / "mig.yaml"
        res = _inferdeck("mig", "export", "--demo", "--out", str(out), env=env)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "nothing was written" in res.stderr and not out.exists()
        assert [p.name for p in disk.iterdir()] == ["filler"]
    ok = _inferdeck("mig", "export", "--demo", "--out", str(tmp_path / "m.yaml"), env=env)
    assert ok.returncode == 0 and "version: v1" in (tmp_path / "m.yaml").read_text()


def test_the_journal_reads_old_whole_report_lines_and_cut_lines(tmp_path):
    from console.mig.journal import unfinished

    journal = tmp_path / "j.jsonl"
    journal.write_text(
        json.dumps({"t": "x", "gpu": 0, "uuid": "GPU-a", "result": "applied", "steps": []})
        + "\n"
        + json.dumps({"record": "begin", "apply": "a1", "gpu": 0, "uuid": "GPU-a", "t": "t0"})
        + "\n"
        + '{"record": "step", "apply": "a1", "n": 1, "st'  # cut short by a full disk
        + "\n"
        + json.dumps({"record": "begin", "apply": "b1", "gpu": 1, "uuid": "GPU-b", "t": "t1"})
        + "\n"
        + json.dumps({"record": "end", "apply": "b1", "result": "applied"})
        + "\n"
    )
    assert [a.apply_id for a in unfinished(journal)] == ["a1"]
    assert layout_text([]) == "none"


def test_judge_names_the_state_of_layout_and_mode_changes():
    from console.mig.journal import OpenApply, completing_target, judge

    def op(before, target, steps=()):
        return OpenApply("a", "t", 0, "GPU-a", before, target, "u", 1, "c", list(steps), 0, False)

    recut = op("2g.48gb@0,2g.48gb@6", "1g.24gb@0,1g.24gb@3,2g.48gb@6")
    new = [("1g.24gb", 0), ("1g.24gb", 3), ("2g.48gb", 6)]
    assert judge(recut, new) == "new"
    assert judge(recut, [("2g.48gb", 0), ("2g.48gb", 6)]) == "old"
    assert judge(recut, new, missing_ci=[("1g.24gb", 3)]) == "neither"  # no MIG device there
    assert judge(recut, [("2g.48gb", 6)]) == "neither"
    assert judge(recut, None) == "unknown"
    off = op("1g.24gb@0", "disable")
    assert judge(off, [], mode_current=False) == "new"
    assert judge(off, [("1g.24gb", 0)], mode_current=True) == "old"
    assert judge(off, [], mode_current=True) == "neither"  # its instances gone, mode still on
    on = op("none", "enable")
    assert judge(on, [], mode_current=True) == "new" and judge(on, [], mode_current=False) == "old"
    back = op("2g.48gb@0,2g.48gb@6", "1g.24gb@0", ["destroy CI", "rollback: create GI"])
    back.rolling_back = True
    assert completing_target(back) == "2g.48gb@0,2g.48gb@6" and completing_target(recut) == (
        "1g.24gb@0,1g.24gb@3,2g.48gb@6"
    )
