"""The house's rules that are not imports (tests/test_boundaries.py holds those): no function in
console/ or screens/ runs past 80 lines unless it is listed here with its reason (a rule list is
a tuple of small named functions: findings per finding, the exporter per family, SLO per target,
detail screens per section), and docs/architecture.md's map of where each figure is computed
names only what the code holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

MAX_LINES = 80
SIMULATED_PAGE = "a simulated engine's /metrics page written series by series, as the engine does"
LONG = {
    "console/cli.py:_parser": "the command line's grammar as one declarative argparse table "
    "(completion and the man page are written from it)",
    "console/promtext.py:parse": "the exposition parser's hot loop, inlined (a call per line "
    "costs; bench/poll_breakdown.py measures it)",
    "console/sim/formats.py:vllm_page": SIMULATED_PAGE,
    "console/sim/formats.py:sglang_page": SIMULATED_PAGE,
    "console/sim/formats.py:dynamo_page": SIMULATED_PAGE,
}


def long_functions() -> dict[str, int]:
    """Every function over MAX_LINES lines: 'path:Class.name' -> its length."""
    out = {}
    for root in ("console", "screens"):
        for path in sorted((ROOT / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(ROOT).as_posix()
            for node in tree.body:
                funcs = (
                    [(node, "")] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
                )
                if isinstance(node, ast.ClassDef):
                    funcs = [
                        (n, node.name + ".")
                        for n in node.body
                        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    ]
                for f, owner in funcs:
                    n = (f.end_lineno or f.lineno) - f.lineno + 1
                    if n > MAX_LINES:
                        out[f"{rel}:{owner}{f.name}"] = n
    return out


def test_no_function_runs_past_80_lines_without_a_stated_reason():
    found = long_functions()
    unlisted = {k: n for k, n in found.items() if k not in LONG}
    assert not unlisted, f"functions over {MAX_LINES} lines with no reason in LONG: {unlisted}"
    gone = sorted(set(LONG) - set(found))
    assert not gone, f"listed in LONG but now short (drop them from the list): {gone}"


# words the figure map names that are not code: YAML keys of engines.yaml, a key, a command
NOT_CODE = {"aggregate", "lora_requests_info", "F", "check"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_FILE = re.compile(r"^(console|screens)/[\w/]+\.py$")


def _defined(path: Path) -> set[str]:
    """What a module defines: functions, classes, their members ('Class.name'), constants."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
            if isinstance(node, ast.ClassDef):
                for n in node.body:
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        out.add(f"{node.name}.{n.name}")
                    elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                        out.add(f"{node.name}.{n.target.id}")
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def stale_references(text: str) -> list[str]:
    """What the figure map names that the code does not hold. A table cell or a sentence that
    names files must find its functions in them (`Class.member` in its class; a module's stem
    then a name in that module); a Frame record or field may be named from anywhere; a cell
    that names no file finds its names anywhere in console/ or screens/."""
    defined = {
        p.relative_to(ROOT).as_posix(): _defined(p)
        for root in ("console", "screens")
        for p in (ROOT / root).rglob("*.py")
    }
    stems = {Path(f).stem for f in defined}
    everywhere = set().union(*defined.values())
    records = defined["console/frame.py"] | {n.split(".")[1] for n in everywhere if "." in n}
    blocks: list[str] = []  # a table row each, else a paragraph each
    for line in text.splitlines():
        if line.startswith("|") or not line.strip() or not blocks or blocks[-1].startswith("|"):
            blocks.append(line)
        else:
            blocks[-1] += " " + line
    stale = []
    for block in blocks:
        parts = block.split("|") if block.startswith("|") else re.split(r"(?<=[.;])\s", block)
        for part in parts:
            names = [t.strip() for t in re.findall(r"`([^`]+)`", part)]
            files = [t for t in names if _FILE.match(t)]
            stale += [f for f in files if f not in defined]
            for t in (t.removesuffix("()") for t in names if t not in files):
                if not _IDENT.match(t) or t.endswith((".yaml", ".sh")) or t in NOT_CODE:
                    continue
                head, _, tail = t.partition(".")
                if head in stems and tail:
                    ok = any(tail in defined[f] for f in defined if Path(f).stem == head)
                elif tail:
                    ok = t in everywhere or head in records
                elif head in stems or head in records:
                    ok = True
                else:
                    ok = (
                        any(head in defined.get(f, ()) for f in files)
                        if files
                        else head in everywhere
                    )
                if not ok:
                    stale.append(f"{t} (in {', '.join(files) or 'the code'})")
    return stale


def test_every_name_the_figure_map_gives_is_in_the_code():
    """docs/architecture.md's 'Where every figure on screen is computed' names, for each figure,
    the file and the function that compute it: each one is there. A planted stale reference —
    a function renamed away, a file moved — is caught."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = doc.index("## Where every figure on screen is computed")
    figure_map = doc[start : doc.index("## Snapshot and tests")]
    assert figure_map.count("|") > 200  # the tables are there
    assert stale_references(figure_map) == []
    planted = (
        "| KV | `kv_cache_usage` | `console/figures/enginestats.py` `_Deriver.kv_gone` |\n"
        "| x | y | `console/figures/gone.py` `read_kv` |\n"
        "| Dev | `device` | `screens/panes.py` `drift_cell` |\n"
    )
    assert stale_references(planted) == [
        "_Deriver.kv_gone (in console/figures/enginestats.py)",
        "console/figures/gone.py",
        "read_kv (in console/figures/gone.py)",
        "drift_cell (in screens/panes.py)",
    ]
