"""The wheel a user installs holds every package and data file of the tree.

An editable install finds every module on disk, so only the built wheel shows a part left out
(console.sim was, and every command failed at once). CI also installs the wheel into a fresh venv
and runs every command from an empty folder (tests/installed.sh).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

SHIPPED = ("console", "screens", "config")
DATA = (".yaml", ".tcss", ".service")


def tree_parts(files: list[str]) -> set[str]:
    """What the wheel must hold: every module and data file under the shipped packages."""
    return {
        f
        for f in files
        if f.split("/", 1)[0] in SHIPPED and (f.endswith(".py") or f.endswith(DATA))
    }


def missing_from_wheel(files: list[str], wheel_names: list[str]) -> list[str]:
    return sorted(tree_parts(files) - set(wheel_names))


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.splitlines() if (ROOT / p).is_file()]


def test_the_check_catches_a_planted_omission():
    files = ["console/__init__.py", "console/sim/__init__.py", "console/sim/demo.py"]
    files += ["config/engines.yaml", "screens/inferdeck.tcss", "tests/test_x.py", "README.md"]
    wheel = ["console/__init__.py", "config/engines.yaml", "screens/inferdeck.tcss"]
    assert missing_from_wheel(files, wheel) == ["console/sim/__init__.py", "console/sim/demo.py"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from the tracked files alone (as from a fresh clone)."""
    src = tmp_path_factory.mktemp("src")
    for f in _tracked():
        dest = src / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((ROOT / f).read_bytes())
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (built,) = out.glob("inferdeck-*.whl")
    return built


def test_the_wheel_holds_every_package_and_data_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert missing_from_wheel(_tracked(), names) == []
    for part in ("console/sim/demo.py", "console/mig/cli.py", "console/fleet/source.py"):
        assert part in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]


def test_the_wheel_declares_the_console_script(wheel):
    z = zipfile.ZipFile(wheel)
    (entry,) = [n for n in z.namelist() if n.endswith("entry_points.txt")]
    assert "inferdeck = console.entry:main" in z.read(entry).decode()
