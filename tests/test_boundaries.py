"""Import contracts, held by a test rather than by care: what each package may import.

Imports are read from the source (every `import`, also inside functions; those under
`if TYPE_CHECKING:` are types only and do not count)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

# nothing under console/figures/ does I/O; besides it the Frame, the Sample, their units, the
# Triton ensembles' arithmetic and the pure parts of the MIG and fleet packages
DERIVATIONS = tuple(
    sorted(str(p.relative_to(ROOT)) for p in (ROOT / "console" / "figures").glob("*.py"))
) + (
    "console/units.py",
    "console/frame.py",
    "console/sample.py",
    "console/triton.py",
    "console/mig/layouts.py",
    "console/mig/preview.py",
    "console/mig/script.py",
    "console/fleet/state.py",
)
# what screens/ may import of console/ at run time (docs/architecture.md lists the same): the
# Frame, its units and the figures (each a derivation); besides them only the incident bundle
# the `s` key writes, and the state folder's paths it is written under
SCREENS_USE = (
    "frame",
    "units",
    "figures",
    "fleet.state",
    "mig.layouts",
    "mig.preview",
    "mig.script",
)
SCREENS_WRITE = ("out.bundle", "paths")
IO = (
    "httpx",
    "pynvml",
    "subprocess",
    "console.read",
    "console.out",
    "console.sim",
    "console.fleet.prom",
    "console.fleet.source",
    "console.mig.manager",
)
DRAWING = ("textual", "rich", "screens")
SOURCES = (
    "httpx",
    "pynvml",
    "console.read",
    "console.sim",
    "console.fleet.prom",
    "console.fleet.source",
    "console.mig.manager",
)
SIM_USERS = (
    "console/cli.py",
    "console/compose.py",
    "console/commands/node.py",
    "console/mig/cli.py",
)
# the readers (what a poll acquires: a Sample) never import a figure: the two FrameSources
# (console/read/live.py, console/read/replay.py) are where a Sample meets the Deriver
READERS = tuple(
    str(p.relative_to(ROOT))
    for p in sorted((ROOT / "console" / "read").glob("*.py"))
    if p.name not in ("live.py", "replay.py")
) + ("console/engines.py",)
FIGURING = ("console.figures",)
# the commands that start an app (the console, a replay, the fleet screen), importing it lazily
LAUNCHERS = ("console/commands/tui.py", "console/commands/record.py", "console/commands/fleet.py")


def imports(source: str, types_too: bool = False) -> list[tuple[str, int]]:
    """(module, line) of every runtime import in a module's source (and those under
    ``if TYPE_CHECKING:`` with ``types_too``)."""
    tree = ast.parse(source)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if not types_too and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
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
            if path.startswith("console/") and path not in LAUNCHERS and _under(module, DRAWING):
                out.append(f"{where}: console/ never draws (only the launchers start an app)")
            if path.startswith("screens/") and _under(module, SOURCES):
                out.append(f"{where}: screens/ draw Frames; sources live in console/")
            elif (
                path.startswith("screens/")
                and _under(module, ("console",))
                and not _under(module, tuple(f"console.{m}" for m in SCREENS_USE + SCREENS_WRITE))
            ):
                out.append(f"{where}: screens/ use only the Frame, units and figures")
            if (
                path.startswith("console/")
                and not path.startswith("console/sim/")
                and path not in SIM_USERS
                and _under(module, ("console.sim",))
            ):
                out.append(f"{where}: the simulators are for the CLI, tests and benchmarks")
            if path in DERIVATIONS and _under(module, IO):
                out.append(f"{where}: a derivation does no I/O")
            if path in READERS and _under(module, FIGURING):
                out.append(f"{where}: a reader only reads (a LiveSource derives its Sample)")
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
        "console/figures/slo.py": "import httpx\n",
        "console/figures/headroom.py": "def f():\n    from textual.app import App\n",
        "screens/gpus.py": "from console.read.nvml import NvmlReader\n",
        "console/read/poller.py": "from console.sim.engine import MetricsServer\n",
        "screens/mig.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from console.mig.manager import M\n",
        # a screen reaching past the Frame, units and figures (the bundle's writer may be used)
        "screens/engines.py": "from console.frame import Engine\nfrom console.units import num\n",
        "screens/panes.py": "from console.out.snapshot import to_markdown\n",
        "screens/services.py": "def f():\n    from console.settings import load_settings\n",
        "screens/app.py": "from console.out.bundle import write_bundle\nfrom console.figures.timeline import lines\n",
        "console/figures/findings.py": "import subprocess\n",
        "console/read/nvml.py": "from console.figures.alerts import AlertBook\n",
    }
    found = violations(planted)
    assert [v.split(":")[0] for v in found] == [
        "console/figures/slo.py",
        "console/figures/headroom.py",
        "screens/gpus.py",
        "console/read/poller.py",
        "screens/panes.py",
        "screens/services.py",
        "console/figures/findings.py",
        "console/read/nvml.py",
    ], found
    assert "a derivation does no I/O" in found[0] and "never draws" in found[1]
    assert "only the Frame, units and figures" in found[4]
    assert "a derivation does no I/O" in found[6]
    assert "a reader only reads" in found[7]


def test_the_modules_screens_use_are_pure_and_the_docs_list_them():
    """Each console module screens/ may import is a derivation (no I/O, held above), but for
    the bundle's writer and its paths; docs/architecture.md's screens row names exactly these."""
    pure = [m for m in SCREENS_USE if m != "figures"]  # figures/: every module a derivation
    assert all(f"console/{m.replace('.', '/')}.py" in DERIVATIONS for m in pure), [
        m for m in pure if f"console/{m.replace('.', '/')}.py" not in DERIVATIONS
    ]
    row = next(
        line
        for line in (ROOT / "docs/architecture.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `screens/` |")
    )
    uses = row.split("|")[3].split("only these", 1)[1]
    named = set(re.findall(r"`([a-z_.]+)`", uses))
    assert named == set(SCREENS_USE + SCREENS_WRITE), (
        sorted(named - set(SCREENS_USE + SCREENS_WRITE)),
        sorted(set(SCREENS_USE + SCREENS_WRITE) - named),
    )


def cycles(files: dict[str, str], types_too: bool = False) -> list[list[str]]:
    """Every import cycle among the project's modules at run time (lazy imports included: a cycle
    through a function's import still ties the two modules together; type-only imports too with
    ``types_too``), each as the modules in order."""
    names = {p.removesuffix(".py").removesuffix("/__init__").replace("/", "."): p for p in files}
    graph = {
        mod: sorted({m for m, _ in imports(files[path], types_too) if m in names} - {mod})
        for mod, path in names.items()
    }
    found, state = [], dict.fromkeys(graph, 0)  # 0 unseen, 1 on the path, 2 done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for nxt in graph[mod]:
            if state[nxt] == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif state[nxt] == 0:
                visit(nxt, [*path, nxt])
        state[mod] = 2

    for mod in sorted(graph):
        if state[mod] == 0:
            visit(mod, [mod])
    return found


def test_no_import_cycle():
    assert cycles(_project()) == []


def test_no_screen_imports_the_app_even_for_its_types():
    """Screens read the app as a ``screens.deck.Deck`` and draw frames as a ``FrameView``: no
    ring of screen modules through a type-only import of the app (there was one of 12)."""
    screens = {p: src for p, src in _project().items() if p.startswith("screens/")}
    assert cycles(screens, types_too=True) == []
    planted = {**screens, "screens/widgets.py": screens["screens/widgets.py"] + (
        "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from screens.app import InferdeckApp\n"
    )}  # fmt: skip
    assert cycles(planted) == [] and cycles(planted, types_too=True) != []


def test_a_planted_cycle_is_found():
    planted = {
        "console/cli.py": "from console.compose import build\n",
        "console/compose.py": "import os\n",
        "console/mig/cli.py": "def f():\n    from console.cli import main\n",
        "console/commands/tui.py": "from console.mig.cli import run_mig\n",
    }
    assert cycles(planted) == []
    planted["console/compose.py"] = "def g():\n    from console.mig.cli import run_mig\n"
    planted["console/mig/cli.py"] = "def f():\n    from console.compose import sample\n"
    assert cycles(planted) == [["console.compose", "console.mig.cli", "console.compose"]]


def test_importing_the_derivation_loads_no_textual_and_no_io():
    mods = ", ".join(p.removesuffix(".py").replace("/", ".") for p in DERIVATIONS)
    code = (
        f"import sys, {mods}\n"
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


def engine_names_in_code(files: dict[str, str]) -> list[str]:
    """Each string in ``console/`` code (not a docstring, not the simulators) that names an
    engine's series by a family prefix its profile claims: engine knowledge lives in
    config/engines.yaml."""
    from console.engines import profiles

    prefixes = tuple(p for prof in profiles().values() for p in prof.prefixes)
    out = []
    for path, source in files.items():
        if not path.startswith("console/") or path.startswith("console/sim/"):
            continue
        tree = ast.parse(source)
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and any(p in node.value for p in prefixes)
            ):
                out.append(f"{path}:{node.lineno}: {node.value[:60]!r}")
    return out


def test_engine_series_are_named_only_in_the_profiles():
    assert engine_names_in_code(_project()) == []


def test_a_planted_engine_name_in_code_is_found():
    planted = {
        "console/figures/slo.py": '"""About vllm:e2e_request_latency_seconds."""\nX = ("vllm:e2e",)\n',
        "console/sim/formats.py": 'Y = "sglang:num_running_reqs"\n',
    }
    assert engine_names_in_code(planted) == ["console/figures/slo.py:2: 'vllm:e2e'"]


SHIM = "screens/tableshim.py"


def _textual_private_names() -> set[str]:
    """Every private name Textual's own source uses (attributes and methods)."""
    import textual

    names: set[str] = set()
    for path in Path(textual.__path__[0]).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.name
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else ""
            )
            if name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return names


def private_textual_uses(files: dict[str, str], textual_names: set[str]) -> list[str]:
    """Each attribute or method under ``screens/`` (outside the documented shim) named as one of
    Textual's private names: reading one, or defining a method that may override one. A
    module-level helper of the same name is no use of Textual's."""
    out = []
    for path, source in files.items():
        if not path.startswith("screens/") or path == SHIM:
            continue
        tree = ast.parse(source)
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in top:
                name = node.name
            else:
                continue
            if name in textual_names:
                out.append(f"{path}:{node.lineno}: {name}")
    return out


def test_no_private_textual_name_outside_the_shim():
    assert private_textual_uses(_project(), _textual_private_names()) == []


def test_a_planted_private_textual_name_is_found():
    planted = {
        "screens/widgets.py": (
            "def _render_cell(x):\n    return x\n\n"  # a module helper: not Textual's
            "class T:\n    def _render_cell(self):\n        self._update_count += 1\n"
        ),
        SHIM: "def f(t):\n    return t._data\n",
    }
    assert private_textual_uses(planted, _textual_private_names()) == [
        "screens/widgets.py:5: _render_cell",
        "screens/widgets.py:6: _update_count",
    ]


def test_a_count_fits_four_characters_at_every_magnitude():
    """The Engines pane's Run and Wait are 4 wide: a queue of 1,834 read "1,8…" (the number cut).
    Now every count fits: "1.8k", "25k", "1.2M", rounding never pushes a fifth character."""
    from console.units import count_text

    cases = {0: "0", 74: "74", 999: "999", 999.6: "1.0k", 1834: "1.8k", 9949: "9.9k",
             9999: "10k", 25_000: "25k", 999_499: "999k", 999_600: "1.0M", 1.2e6: "1.2M"}  # fmt: skip
    for value, text in cases.items():
        assert count_text(value) == text and len(text) <= 4, (value, count_text(value))
    assert count_text(None) == "n/a"
