from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("INFERDECK_FIXTURES", ROOT / "tests" / "fixtures" / "metrics"))


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"metric fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(autouse=True)
def _state_apart(tmp_path_factory, monkeypatch):
    """Every test writes its state (MIG journal, bundles, locks) apart from the user's and from
    the other tests'."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
