"""One name per figure. Every label a figure is shown under — the dashboard's tables at their
widest (every view of the lower pane), the fleet's table, snapshot.md's tables and check's
perfdata — is listed here with the figure it names, and each figure must read under one name
on all of them (a header may shorten it: `Compl%` for completion, `Run` for running). The
Engines pane read `Done%` where the SLO pane, snapshot.md and the exporter said completion;
`TTFT95` beside `TTFT p95`; `gen tok/s`, `queue` and `$/M compliant tokens` beside `tok/s`,
`Wait` and `$/M good`. Help names every Engines column.

The exporter's family names are Prometheus' interface (users' rules and dashboards read them) and
are not renamed here; its figures are named in its HELP text."""

from __future__ import annotations

import re
from pathlib import Path

from console.figures.columns import (
    BUDGET_COLUMNS,
    BUDGET_DOC,
    BUDGET_PANE,
    COST_COLUMNS,
    ENGINE_COLUMNS,
    ENGINE_DOC,
    ENGINE_PANE,
    GPU_COLUMNS,
    GPU_DOC,
    GPU_PANE,
    SLO_COLUMNS,
    SLO_DOC,
    SLO_PANE,
    gpu_rows,
    pick,
)
from console.frame import Frame
from console.out.checkplugin import perfdata
from console.out.snapshot import to_markdown
from console.settings import demo_settings
from screens.app import InferdeckApp
from screens.fleet import COLUMNS as FLEET_COLUMNS
from screens.help import READING
from screens.widgets import BAR_EMPTY, BAR_FULL, KeyedTable
from tests.frames import StaticSource, node_frame

GOLDEN = Path(__file__).parent / "golden" / "demo-frame.json"

# every label on every surface (normalised: lower case, no %, no parenthesis, "_" as a space),
# with the figure it names; a label not listed fails the test until it is given its figure
FIGURE_OF = {
    # what a row is
    "gpu": "gpu", "node": "node", "engine": "engine", "engines": "engine count",
    "service": "service", "kind": "engine kind", "model": "model", "name": "gpu name",
    "device": "device", "dev": "device", "gpus": "gpu count", "mig": "mig", "window": "window",
    "worst": "node verdict", "alerts": "alert count", "fits": "plan fits",
    "mig / processes": "mig", "procs": "processes", "clock events": "clock events",
    "planned / capacity": "planned vs capacity",
    "engine vs plan gib": "engine vs plan memory",
    # GPU figures
    "memory": "memory", "util/act": "utilisation", "util": "utilisation", "power": "power",
    "temp": "temperature", "sm clock": "sm clock", "trend power": "power trend",
    # engine figures
    "run": "running", "running": "running", "wait": "waiting", "waiting": "waiting",
    "kv": "kv cache use", "tok/s": "tok/s", "tok s": "tok/s", "trend tok/s": "tok/s trend",
    "ttft p95": "ttft p95", "tpot p95": "tpot p95", "ttft p50/p95/p99": "ttft percentiles",
    "compl": "completion", "completion": "completion", "req/s": "req/s",
    "room": "room", "room rps": "room", "sat": "saturation", "saturation": "saturation",
    "kv full in": "kv full in", "used up in": "used up in", "ttft≤1s": "ttft within target",
    # the plan's headrooms
    "kv seqs": "kv headroom", "queue": "queue headroom", "thermal": "thermal headroom",
    "headroom": "headroom",
    # SLO and cost
    "ttft": "ttft slo", "tpot": "tpot slo", "good": "good share", "good share": "good share",
    "burn 5m/1h": "burn", "$/h": "$/h", "energy": "energy", "busy": "busy",
    "$/m out": "$/M output tokens", "$/m output tokens": "$/M output tokens",
    "$/m good": "$/M good tokens", "$/m good tokens": "$/M good tokens", "j/tok": "J/tok",
}  # fmt: skip


def normal(label: str) -> str:
    """A label as a name: its parenthesised qualifier, the `observed / target` and `%` that say
    how a cell reads, and case dropped."""
    text = re.sub(r"\([^)]*\)", "", label).replace("%", "").replace("_", " ")
    text = text.replace(" observed / target", "").replace(" / target", "")
    return " ".join(text.lower().split())


async def _dashboard_labels() -> list[str]:
    app = InferdeckApp(StaticSource(node_frame()))
    labels: list[str] = []
    async with app.run_test(size=(220, 60)) as pilot:
        for _ in range(3):  # the lower pane's views: budget, SLO, cost
            await pilot.pause()
            for table in app.query(KeyedTable):
                labels += [str(c.label) for c in table.columns.values()]
            await pilot.press("v")
    return labels


def _markdown_labels(md: str) -> list[str]:
    lines = md.splitlines()
    out: list[str] = []
    for head, rule in zip(lines, lines[1:], strict=False):
        if head.startswith("| ") and rule.startswith("|---"):
            for cell in head.strip("|").split(" | "):
                out += cell.strip().split(" / ") if cell.strip() == "running / waiting" else [cell]
    return out


def _perf_labels(frame: Frame) -> list[str]:
    names = {e.name for e in frame.engines}
    out = []
    for label in re.findall(r"'([^']*)'=", perfdata(frame, demo_settings())):
        engine = max((n for n in names if label.startswith(n + " ")), key=len, default="")
        out.append(label.removeprefix(engine + " "))
    return out


async def test_every_figure_reads_under_one_name_on_every_surface():
    frame = Frame.model_validate_json(GOLDEN.read_text())
    surfaces = {
        "dashboard": await _dashboard_labels(),
        "fleet": [label for label, _, _ in FLEET_COLUMNS],
        "snapshot.md": _markdown_labels(to_markdown(frame)),
        "check perfdata": _perf_labels(frame),
    }
    names: dict[str, dict[str, set[str]]] = {}  # figure -> name -> the surfaces using it
    unlisted = []
    for surface, labels in surfaces.items():
        for label in labels:
            name = normal(label)
            figure = FIGURE_OF.get(name)
            if figure is None:
                unlisted.append(f"{surface}: {label!r}")
                continue
            names.setdefault(figure, {}).setdefault(name, set()).add(surface)
    assert not unlisted, f"labels with no figure in FIGURE_OF: {unlisted}"
    second = {}
    for figure, by_name in names.items():
        # a shorter name must shorten the longest (Compl% for completion, Run for running)
        full = max(by_name, key=len).replace(" ", "")
        others = [n for n in by_name if not full.startswith(n.replace(" ", ""))]
        if others:
            second[figure] = by_name
    assert not second, f"a figure under two names: {second}"


def test_help_names_every_engines_column():
    """Every column of the Engines pane is explained in help, under its header."""
    text = " ".join(READING)
    missing = [
        col.label
        for col in pick(ENGINE_COLUMNS, ENGINE_PANE)
        if col.key not in ("engine", "kind", "model", "dev") and col.label not in text
    ]
    assert not missing, missing


def _golden() -> Frame:
    """The golden frame with a port per engine (it writes each as PORT): one row key each."""
    frame = Frame.model_validate_json(GOLDEN.read_text())
    engines = [
        e.model_copy(update={"url": e.url.replace("PORT", str(8000 + i))})
        for i, e in enumerate(frame.engines)
    ]
    return frame.model_copy(update={"engines": engines})


async def _one_spec(frame, table_id, columns, pane_keys, doc_keys, rows):
    """A table's cells on both surfaces, checked against its one spec: where both draw a column,
    the page writes its whole figure and the pane the same figure or its brief form (never a
    figure of its own). Returns the two surfaces' rows by column key."""
    app = InferdeckApp(StaticSource(frame))
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.pause()
        table = app.query_one(table_id, KeyedTable)
        keys = [str(c.key.value) for c in table.columns.values()]
        pane = [
            dict(zip(keys, (v.plain for v in table.get_row(k)), strict=True)) for k in table.rows
        ]
    lines = to_markdown(frame).splitlines()
    doc_columns = pick(columns, doc_keys)
    at = lines.index("| " + " | ".join(c.doc for c in doc_columns) + " |")
    doc = [
        dict(zip(doc_keys, (v.strip() for v in row.strip("|").split(" | ")), strict=True))
        for row in lines[at + 2 : at + 2 + len(rows)]
    ]
    assert keys[: len(pane_keys)] == list(pane_keys)
    both = [c for c in doc_columns if c.key in pane_keys]
    assert len(both) >= 3
    for row, shown, written in zip(rows, pane, doc, strict=True):
        if getattr(row, "up", True) is False:
            continue
        for col in both:
            what = (getattr(row, "name", None) or str(row)[:60], col.key)
            assert written[col.key] == col.text(row).replace("|", "\\|"), what
            # the pane's own marks off: the dot, the KV bar, the '…' of a cut cell
            brief = (
                shown[col.key].removeprefix("● ").lstrip(BAR_FULL + BAR_EMPTY).rstrip("…").strip()
            )
            short = col.short(row).strip()
            assert short.startswith(brief) and (brief or not short), (*what, brief)
            if col.brief is None:
                assert col.short(row) == col.text(row)
    return pane, doc


async def test_the_engines_pane_and_snapshot_md_draw_one_spec():
    """The Engines pane and snapshot.md's Engines table draw their columns from one spec, an engine
    without kind, device or model n/a on both."""
    frame = _golden()
    engines = list(frame.engines)
    engines[0] = engines[0].model_copy(update={"kind": None, "device": None, "model": None})
    frame = frame.model_copy(update={"engines": engines})
    pane, doc = await _one_spec(
        frame, "#engine-table", ENGINE_COLUMNS, ENGINE_PANE, ENGINE_DOC, engines
    )
    assert sum(e.up for e in engines) >= 3 and list(pane[0])[-1] == "trend"
    assert [pane[0][k] for k in ("kind", "dev", "model")] == ["n/a"] * 3
    assert [doc[0][k] for k in ("kind", "dev", "model")] == ["n/a"] * 3


async def test_the_slo_pane_and_snapshot_md_draw_one_spec():
    """The SLO pane and snapshot.md's SLO table: one spec; a service without an SLO report n/a on
    both."""
    frame = _golden()
    bare = frame.services[0].model_copy(update={"name": "no-slo", "slo": None})
    services = [*frame.services, bare]
    frame = frame.model_copy(update={"services": services})
    pane, doc = await _one_spec(frame, "#slo-table", SLO_COLUMNS, SLO_PANE, SLO_DOC, services)
    assert len(pane) == len(services) >= 3
    assert list(pane[-1].values()) == ["no-slo"] + ["n/a"] * (len(SLO_PANE) - 1)
    assert list(doc[-1].values()) == ["no-slo"] + ["n/a"] * (len(SLO_DOC) - 1)
    assert any(d["ttft"].endswith(("(met)", "(MISSED)")) for d in doc)


async def test_the_budget_pane_and_snapshot_md_draw_one_spec():
    """The Budget pane and snapshot.md's plan-fit table: one spec (the pane a column per headroom,
    in the words the spec writes; the page every headroom's state in one); a service whose device
    was not found and whose plan does not fit says so on both."""
    frame = _golden()
    lost = frame.services[1].model_copy(
        update={"name": "lost", "device_id": None, "fits": False, "capacity_bytes": None}
    )
    services = [*frame.services, lost]
    frame = frame.model_copy(update={"services": services})
    pane, doc = await _one_spec(
        frame, "#service-table", BUDGET_COLUMNS, BUDGET_PANE, BUDGET_DOC, services
    )
    for s, shown in zip(services, pane, strict=True):
        for key in ("memory", "kv", "queue", "power", "thermal", "engine", "drift"):
            words = pick(BUDGET_COLUMNS, (key,))[0].short(s)
            assert shown[key].lstrip(BAR_FULL + BAR_EMPTY).strip() == words, (s.name, key)
    assert [pane[-1][k] for k in ("dev", "planned")] == ["?", "NO FIT 36.9 / ? GiB"]
    assert [doc[-1][k] for k in ("dev", "planned", "fits")] == [
        f"{lost.device} → not found",
        "36.90 / ? GiB",
        "NO",
    ]


async def test_the_gpu_pane_and_snapshot_md_draw_one_spec():
    """The GPU pane and snapshot.md's GPU table: one spec, a row per GPU and per MIG device on
    both, in one order; a GPU whose temperature, clock events and power were not read n/a on
    both."""
    frame = _golden()
    gpus = list(frame.gpus)
    gpus[0] = gpus[0].model_copy(
        update={"temperature_c": None, "clock_events": None, "power_w": None}
    )
    frame = frame.model_copy(update={"gpus": gpus})
    rows = gpu_rows(gpus)
    assert any(r.mig for r in rows) and len(rows) > len(gpus)
    pane, doc = await _one_spec(frame, "#gpu-table", GPU_COLUMNS, GPU_PANE, GPU_DOC, rows)
    assert [p["gpu"].strip() for p in pane] == [d["gpu"] for d in doc]
    assert [pane[0][k] for k in ("power", "temp", "events")] == ["n/a"] * 3
    assert [doc[0][k] for k in ("power", "temp")] == [f"n/a/{gpus[0].power_limit_w:.0f}W", "n/a"]


async def test_the_cost_pane_and_snapshot_md_draw_the_same_columns_with_the_same_text():
    """One column spec (console/figures/columns.py) drawn by both: the Cost pane's header and every cell
    are snapshot.md's Cost table's (the pane's names short, the document's whole), a service
    without cost figures n/a on both."""
    frame = Frame.model_validate_json(GOLDEN.read_text())
    engines = [  # the golden frame writes every engine's port as PORT: one row key each here
        e.model_copy(update={"url": e.url.replace("PORT", str(8000 + i))})
        for i, e in enumerate(frame.engines)
    ]
    bare = frame.services[0].model_copy(update={"name": "no-cost", "cost": None})
    frame = frame.model_copy(update={"services": [*frame.services, bare], "engines": engines})
    app = InferdeckApp(StaticSource(frame))
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.pause()
        table = app.query_one("#cost-table", KeyedTable)
        heads = [str(c.label) for c in table.columns.values()]
        pane = [[str(v) for v in table.get_row(k)] for k in table.rows]
    lines = to_markdown(frame).splitlines()
    at = lines.index(
        "| service | $/h | energy | busy | $/M output tokens | $/M good tokens | J/tok |"
    )
    doc = [row.strip("|").split(" | ") for row in lines[at + 2 : at + 2 + len(frame.services)]]
    doc = [[cell.strip() for cell in row] for row in doc]
    assert heads == [c.label for c in COST_COLUMNS] == ["Service", "$/h", "Energy", "Busy",
                                                         "$/M out", "$/M good", "J/tok"]  # fmt: skip
    assert pane == doc and len(pane) == 4, (pane, doc)
    assert pane[-1] == ["no-cost"] + ["n/a"] * 6
    assert pane[0][5] == "$0.68–$0.68" and pane[0][6] == "2.2"


def test_a_mig_device_without_a_placement_names_none():
    """DCGM, in the fleet, exports no placement: the page and the pane name the instance's
    profile alone (the page wrote 'MIG 2g.48gb @None')."""
    frame = _golden()
    g = next(g for g in frame.gpus if g.mig and g.mig.devices)
    d = g.mig.devices[0].model_copy(update={"placement_start": None})
    g = g.model_copy(update={"mig": g.mig.model_copy(update={"devices": [d]})})
    md = to_markdown(frame.model_copy(update={"gpus": [g]}))
    row = next(line for line in md.splitlines() if line.startswith(f"| {g.index}/0 |"))
    assert f"| MIG {d.profile} |" in row and "None" not in row
    name = pick(GPU_COLUMNS, ("device",))[0]
    assert name.short(gpu_rows([g])[1]) == f"└ {d.profile}"
