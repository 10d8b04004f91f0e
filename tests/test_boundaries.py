"""Import contracts, held by a test rather than by care: what each package may import.

Imports are read from the source (every `import`, also inside functions; those under
`if TYPE_CHECKING:` are types only and do not count)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

DERIVATIONS = (
    "console/window.py",
    "console/enginestats.py",
    "console/slo.py",
    "console/cost.py",
    "console/headroom.py",
    "console/plan.py",
    "console/alerts.py",
    "console/meters.py",
    "console/derive.py",
    "console/units.py",
    "console/frame.py",
    "console/triton.py",
    "console/mig/layouts.py",
)
IO = (
    "httpx",
    "pynvml",
    "subprocess",
    "console.poller",
    "console.scraper",
    "console.nvml",
    "console.sim",
    "console.fleet.prom",
)
DRAWING = ("textual", "rich", "screens")
SOURCES = (
    "httpx",
    "pynvml",
    "console.poller",
    "console.scraper",
    "console.nvml",
    "console.sim",
    "console.fleet.prom",
    "console.fleet.source",
    "console.mig.manager",
)
SIM_USERS = ("console/cli.py", "console/mig/cli.py")


def imports(source: str) -> list[tuple[str, int]]:
    """(module, line) of every runtime import in a module's source."""
    tree = ast.parse(source)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, node.lineno)]
    return out


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(files: dict[str, str]) -> list[str]:
    """Every broken contract in ``files`` (path relative to the root -> source)."""
    out = []
    for path, source in files.items():
        for module, line in imports(source):
            where = f"{path}:{line} imports {module}"
            if path.startswith("console/") and path != "console/cli.py" and _under(module, DRAWING):
                out.append(f"{where}: console/ never draws (only the launcher starts the app)")
            if path.startswith("screens/") and _under(module, SOURCES):
                out.append(f"{where}: screens/ draw Frames; sources live in console/")
            if (
                path.startswith("console/")
                and not path.startswith("console/sim/")
                and path not in SIM_USERS
                and _under(module, ("console.sim",))
            ):
                out.append(f"{where}: the simulators are for the CLI, tests and benchmarks")
            if path in DERIVATIONS and _under(module, IO):
                out.append(f"{where}: a derivation does no I/O")
    return out


def _project() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for d in ("console", "screens")
        for p in sorted((ROOT / d).rglob("*.py"))
    }


def test_the_project_keeps_its_import_contracts():
    assert violations(_project()) == []


def test_each_contract_catches_a_planted_violation():
    planted = {
        "console/slo.py": "import httpx\n",
        "console/headroom.py": "def f():\n    from textual.app import App\n",
        "screens/gpus.py": "from console.nvml import NvmlReader\n",
        "console/poller.py": "from console.sim.engine import MetricsServer\n",
        "screens/mig.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from console.mig.manager import M\n",
    }
    found = violations(planted)
    assert [v.split(":")[0] for v in found] == [
        "console/slo.py",
        "console/headroom.py",
        "screens/gpus.py",
        "console/poller.py",
    ]
    assert "a derivation does no I/O" in found[0] and "never draws" in found[1]


def test_importing_the_derivation_loads_no_textual_and_no_io():
    code = (
        "import sys, console.derive, console.slo, console.meters\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'httpx', 'pynvml'))\n"
        "print(','.join(bad))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""


def test_files_exist_for_every_named_derivation():
    assert all((ROOT / p).is_file() for p in DERIVATIONS + SIM_USERS)
    assert Path(__file__).name == "test_boundaries.py"
