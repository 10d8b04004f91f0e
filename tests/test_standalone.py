"""The repository stands alone: nothing tracked reads or points at a folder beside the checkout."""

from __future__ import annotations

import subprocess

from tests.conftest import FIXTURES, ROOT


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.splitlines() if p]


def mentions_outside(files: list[str], text_of) -> list[str]:
    needle = "../" + "shared"  # split so this file does not name it
    return [p for p in files if needle in text_of(p)]


def test_no_tracked_file_mentions_the_folder_beside_the_checkout():
    def text_of(p: str) -> str:
        try:
            return (ROOT / p).read_text(encoding="utf-8", errors="replace")
        except (IsADirectoryError, FileNotFoundError):
            return ""

    assert mentions_outside(_tracked(), text_of) == []


def test_the_check_catches_a_planted_mention():
    planted = {"a.py": "x = '../" + "shared/fixtures'", "b.md": "nothing here"}
    assert mentions_outside(list(planted), planted.__getitem__) == ["a.py"]


def test_fixtures_live_inside_the_project():
    assert FIXTURES.is_relative_to(ROOT)
    assert len(list(FIXTURES.glob("*.prom"))) >= 9
    assert (FIXTURES / "README.md").is_file()
