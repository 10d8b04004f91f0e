"""--format json on every reading command, each checked against the schema `inferdeck schema`
prints (an independent validator: jsonschema, Draft 2020-12); the shell completion scripts load
in bash and complete; the man page renders without a warning. The fleet's commands are checked
beside a real Prometheus in test_fleet.py, the timeline's in test_timeline.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime

import jsonschema
import pytest

from console.out.schemas import KINDS, schema
from tests.conftest import ROOT


def valid(doc: object, kind: str) -> None:
    """``doc`` holds to `inferdeck schema KIND` (raises with the path of the first fault)."""
    jsonschema.Draft202012Validator(schema(kind)).validate(doc)


def _inferdeck(*args: str, tmp_path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        cwd=ROOT,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_schema_is_a_valid_json_schema():
    for kind in KINDS:
        jsonschema.Draft202012Validator.check_schema(schema(kind))


def test_check_json_says_what_the_plugin_lines_say_for_the_same_frame():
    from console.figures.plan import Plan
    from console.frame import Concern
    from console.out.checkplugin import check_doc, check_lines, perf_text, perfdata
    from tests.frames import node_frame

    frame = node_frame()
    burning = Concern(
        severity="critical", source="alert", subject="chat", message="KV cache 97% full",
        rule="kv", since=datetime(2026, 12, 6, 2, 0, tzinfo=UTC),
    )  # fmt: skip
    ok = frame.model_copy(update={"status": "ok"})
    for f in (ok, ok.model_copy(update={"verdict": [burning], "status": "critical"})):
        plan = Plan()
        doc = check_doc(f, plan, notes=["a late engine"])
        lines = check_lines(f, plan)
        as_json = json.loads(doc.model_dump_json(by_alias=True))
        valid(as_json, "check")
        assert doc.first_line == lines[0].split(" | ")[0]
        assert " ".join(perf_text(p) for p in doc.perfdata) == perfdata(f, plan)
        assert doc.exit_code == {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}[f.status]
        assert [c.message for c in doc.verdict] == [c.message for c in f.verdict]
        assert doc.notes == [*lines[1 + len(f.verdict) :], "a late engine"]
        # every perfdata figure, by engine and figure, with the value the text says
        for p in doc.perfdata:
            assert p.label == f"{p.engine} {p.figure}"
            shown = re.search(re.escape(f"'{p.label}'=") + r"([-0-9.]+|U)", lines[0])
            assert shown is not None
            assert (shown.group(1) == "U") == (p.value is None)
    unknown = check_doc(frame.model_copy(update={"status": "unknown"}), Plan())
    assert unknown.exit_code == 3 and unknown.perfdata == [] and "UNKNOWN" in unknown.first_line
    with pytest.raises(jsonschema.ValidationError):  # the schema can fail
        valid({**as_json, "status": "fine"}, "check")


@pytest.mark.slow
@pytest.mark.integration
def test_every_node_command_prints_json_that_holds_to_its_schema(tmp_path):
    check = _inferdeck("check", "--demo", "--wait", "1", "--format", "json", tmp_path=tmp_path)
    doc = json.loads(check.stdout)
    valid(doc, "check")
    assert check.returncode == doc["exit_code"] and doc["first_line"].startswith("INFERDECK ")
    assert {p["engine"] for p in doc["perfdata"]} == {"llama-70b", "llama-8b-a", "llama-8b-b"}

    show = _inferdeck("mig", "show", "--demo", "--format", "json", tmp_path=tmp_path)
    doc = json.loads(show.stdout)
    valid(doc, "mig-show")
    text = _inferdeck("mig", "show", "--demo", tmp_path=tmp_path).stdout.splitlines()
    assert len(doc["gpus"]) == len(text) == 4
    for g, line in zip(doc["gpus"], text, strict=True):
        assert line.startswith(f"GPU {g['index']} ") and g["layout"] in line
        assert ",".join(f"{p['profile']}@{p['start']}" for p in g["placements"]) in line

    lay = _inferdeck("mig", "layouts", "1", "--demo", "--format", "json", tmp_path=tmp_path)
    doc = json.loads(lay.stdout)
    valid(doc, "mig-layouts")
    rows = _inferdeck("mig", "layouts", "1", "--demo", tmp_path=tmp_path).stdout.splitlines()[1:]
    assert len(doc["layouts"]) == len(rows) and sum(la["current"] for la in doc["layouts"]) == 1
    for la, row in zip(doc["layouts"], rows, strict=True):
        assert row.startswith("*" if la["current"] else " ") and la["layout"] in row

    plan = _inferdeck("plan", "--demo", "--format", "json", tmp_path=tmp_path)
    valid(json.loads(plan.stdout), "plan")
    snap = _inferdeck("snapshot", "--demo", "--wait", "1", "--format", "json", tmp_path=tmp_path)
    valid(json.loads(snap.stdout), "frame")
    for kind in KINDS:  # every schema prints as JSON from the command line
        out = _inferdeck("schema", kind, tmp_path=tmp_path)
        assert out.returncode == 0 and json.loads(out.stdout) == json.loads(
            json.dumps(schema(kind))
        )


def _bash_complete(script: str, *words: str) -> list[str]:
    """What bash offers for the command line ``words`` (the last one being typed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    probe = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMPREPLY=();"
        ' _inferdeck; printf "%s\\n" "${COMPREPLY[@]}"; complete -p inferdeck >&2'
    )
    out = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0 and "complete -o default -F _inferdeck inferdeck" in out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_bash_completion_loads_and_completes_every_command_and_choice():
    from console.cli import _parser
    from console.completion import commands, script

    bash = script("bash", _parser(), "0")
    assert _bash_complete(bash, "inferdeck", "sn") == ["snapshot"]
    # an option's value is not a command: 'demo' here is the simulated GPUs', not `inferdeck demo`
    assert _bash_complete(bash, "inferdeck", "--simulate-gpus", "demo", "sn") == ["snapshot"]
    assert _bash_complete(bash, "inferdeck", "snapshot", "--format", "") == ["json", "md"]
    assert _bash_complete(bash, "inferdeck", "check", "--format", "j") == ["json"]
    assert "layouts" in _bash_complete(bash, "inferdeck", "mig", "")
    assert _bash_complete(bash, "inferdeck", "mig", "show", "--f") == ["--format"]
    assert _bash_complete(bash, "inferdeck", "schema", "fleet") == ["fleet-check", "fleet-snapshot"]
    assert _bash_complete(bash, "inferdeck", "completion", "") == ["--help", "bash", "fish", "zsh"]
    # every command of the parser, at its place
    root = commands(_parser())
    for c in root.children:
        assert c.path[-1] in _bash_complete(bash, "inferdeck", c.path[-1][:2]), c.path
    # zsh's is bash's through bashcompinit; fish's names every command
    assert bash in script("zsh", _parser(), "0")
    fish = script("fish", _parser(), "0")
    for c in root.children:
        assert f"-a {c.path[-1]} " in fish
    assert "-l format -x -a 'text json'" in fish


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_the_man_page_renders_without_a_warning_and_names_every_command_and_option():
    from console.cli import _parser
    from console.completion import _walk, commands, script

    page = script("man", _parser(), "0.1.0")
    out = subprocess.run(
        ["groff", "-ww", "-man", "-Tutf8"], input=page, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    text = re.sub(r".\x08", "", out.stdout).replace("‐\n", "").replace("‐", "-")
    for c in _walk(commands(_parser()))[1:]:
        assert "inferdeck " + " ".join(c.path) in text
        for o in c.options:
            assert o.flags == ["-h", "--help"] or all(f in text for f in o.flags), (c.path, o)
