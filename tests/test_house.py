"""The house's size rule: no function in console/ or screens/ runs past 80 lines unless it is
listed here with its reason. A rule list is a tuple of small named functions (findings per
finding, the exporter per family, SLO per target, detail screens per section); what is left
long either has a reason to stay whole or is named as not yet split, so a new long function
fails here until it is cut or its reason is written down."""

from __future__ import annotations

import ast

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
