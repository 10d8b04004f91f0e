"""The type checker sees every record's constructor: a planted misspelt field, a wrong type, a
missing field and a frozen record's assignment each fail ``mypy --strict`` with the project's own
configuration, and the same code spelt right passes (so the failures are the plants', nothing
else's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RIGHT = """\
from console.frame import Headroom
from console.figures.plan import SloSpec
from console.settings import EngineConfig

h = Headroom(name="kv", value=1.5, state="ok")
s = SloSpec(ttft_s=0.5)
e = EngineConfig(url="http://127.0.0.1:8000/metrics")
e.timeout_s = 3.0  # a part of a user's file may be set by its validators
print(h.value, s.ttft_s, e.url_auth)
"""

PLANTS = {
    "misspelt field": (
        'Headroom(name="kv", value=1.5, state="ok")',
        'Headroom(nmae="kv")',
        'Unexpected keyword argument "nmae"',
    ),
    "wrong type": (
        'Headroom(name="kv", value=1.5, state="ok")',
        'Headroom(name="kv", value="1.5")',
        'Argument "value" to "Headroom" has incompatible type "str"',
    ),
    "not one of the states": ('state="ok"', 'state="fine"', 'Argument "state" to "Headroom"'),
    "missing field": (
        'Headroom(name="kv", value=1.5, state="ok")',
        "Headroom(value=1.5)",
        'Missing named argument "name"',
    ),
    "frozen record set": (
        "print(h.value",
        "h.value = 2.0\nprint(h.value",
        'Property "value" defined in "Headroom" is read-only',
    ),
    "read-only secret set": (
        "print(h.value",
        "e.url_auth = {}\nprint(h.value",
        'Property "url_auth"',
    ),
}


def _mypy(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "planted.py"
    src.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(src)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_records_spelt_right_pass_mypy(tmp_path: Path) -> None:
    got = _mypy(tmp_path, RIGHT)
    assert got.returncode == 0, got.stdout


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_mistake_fails_mypy(tmp_path: Path, plant: str) -> None:
    old, new, says = PLANTS[plant]
    assert old in RIGHT
    got = _mypy(tmp_path, RIGHT.replace(old, new, 1))
    assert got.returncode == 1, got.stdout
    assert "planted.py:" in got.stdout and says in got.stdout, got.stdout
