"""Records are pydantic models: what a user wrote is checked field by field and the first problem
is one sentence naming its key path (``console.records.Invalid``); the Frame is written and read
back by pydantic (floats, UTC as Z, null for infinities, a report holds only the fields it was
given); ``inferdeck schema`` prints the JSON Schema of the config and of the Frame."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from pydantic import ValidationError

from console.cli import main
from console.frame import SCHEMA, Frame, Headroom, RangeReport
from console.records import Invalid, validate
from console.settings import Settings
from tests.frames import node_frame as demo_frame

SVC = {
    "name": "chat",
    "device": "0",
    "model": "llama-3.1-8b",
    "weight_bits": 16,
    "tokens_per_sequence": 4096,
    "concurrent_sequences": 8,
}


def _with(**kw: object) -> dict[str, object]:
    return {"services": [SVC | kw]}


@pytest.mark.parametrize(
    ("data", "loc", "msg"),
    [
        (
            {"services": [{k: v for k, v in SVC.items() if k != "device"}]},
            ("services", 0, "device"),
            "is required",
        ),
        (_with(weight_bitz=4), ("services", 0, "weight_bitz"), "unknown key 'weight_bitz'"),
        (_with(name=3), ("services", 0, "name"), "must be text"),
        (
            _with(concurrent_sequences=0),
            ("services", 0, "concurrent_sequences"),
            "must be greater than 0",
        ),
        (_with(weight_overhead=1.5), ("services", 0, "weight_overhead"), "must be at most 1"),
        (
            _with(tokens_per_sequence=4096.5),
            ("services", 0, "tokens_per_sequence"),
            "must be a whole number",
        ),
        (_with(kv_bits="many"), ("services", 0, "kv_bits"), "must be a number"),
        (_with(device="gpu zero"), ("services", 0, "device"), "is not a GPU index"),
        (_with(weights_gib=10), ("services", 0), "exactly one"),
        ({"services": {"name": "chat"}}, ("services",), "must be a list"),
        ({"discover": "maybe"}, ("discover",), "must be true or false"),
        ({"window": "soon"}, ("window",), "use a duration like 1m"),
        (
            {"engines": [{"url": "http://127.0.0.1:8000/metrics", "kind": "vlm"}]},
            ("engines", 0, "kind"),
            "unknown engine kind 'vlm'",
        ),
        (
            {"engines": [{"url": "http://127.0.0.1:8000/metrics", "url_auth": {}}]},
            ("engines", 0, "url_auth"),
            "unknown key 'url_auth'",
        ),
        ({"node": {"gpus": -1}}, ("node", "gpus"), "must be at least 0"),
        ({"alerts": {"kv": {"for_s": "soon"}}}, ("alerts", "kv", "for_s"), "must be a number"),
    ],
)
def test_a_value_that_does_not_fit_names_its_key_path(data, loc, msg):
    with pytest.raises(Invalid) as info:
        validate(Settings, data)
    assert info.value.loc == loc, info.value
    assert msg in info.value.msg, info.value
    assert info.value.unknown == ("unknown key" in msg)


def test_a_literal_lists_its_choices_and_a_bad_mapping_is_one_sentence():
    with pytest.raises(ValidationError) as info:
        Headroom.model_validate({"name": "kv", "state": "fine"})
    got = Invalid.of(info.value)
    assert (
        got.loc == ("state",) and got.msg == "must be one of 'ok', 'warning', 'critical', 'unknown'"
    )
    with pytest.raises(Invalid, match="must be a mapping of keys"):
        validate(Settings, [1, 2])


def test_parts_of_a_users_file_get_their_own_defaults_and_may_be_set():
    a, b = Settings(), Settings()
    assert a.alerts.kv == b.alerts.kv and a.alerts.kv is not b.alerts.kv
    a.alerts.kv.for_s = 99.0
    assert b.alerts.kv.for_s == 15.0
    with pytest.raises(ValidationError, match="frozen"):
        Headroom(name="kv").value = 1.0  # type: ignore[misc]


def test_json_writes_floats_utc_as_z_and_null_for_infinities():
    h = Headroom(name="kv", value=3, budget=float("inf"))
    assert json.loads(h.model_dump_json())["value"] == 3.0 and type(h.value) is float
    assert json.loads(h.model_dump_json())["budget"] is None
    f = demo_frame()
    text = f.to_json()
    assert json.loads(text)["schema"] == SCHEMA
    assert f.taken_at.utcoffset().total_seconds() == 0
    assert json.loads(text)["taken_at"].endswith("Z")


def test_a_report_dumps_only_the_fields_it_was_given():
    r = RangeReport(low=0.1, high=0.2, approx=None)
    assert r.model_dump() == {"low": 0.1, "high": 0.2, "approx": None}  # note absent: n/a
    assert r.model_copy(update={"note": "x"}).model_dump()["note"] == "x"


def test_a_frame_written_reads_back_equal():
    f = demo_frame()
    again = Frame.model_validate_json(f.to_json())
    assert again == f
    assert again.to_json() == f.to_json()


def test_schema_command_prints_the_config_and_frame_schemas(capsys):
    assert main(["schema", "config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["$schema"].startswith("https://json-schema.org/")
    assert {"engines", "services", "window", "alerts", "cost"} <= set(config["properties"])
    assert config["additionalProperties"] is False  # unknown keys are errors, as the console says
    assert "url_auth" not in json.dumps(config)  # never read from a file
    assert main(["schema", "frame"]) == 0
    frame = json.loads(capsys.readouterr().out)
    dumped = json.loads(demo_frame().to_json())
    assert set(dumped) <= set(frame["properties"])  # every key a snapshot writes is described
    engine = frame["$defs"]["Engine"]["properties"]
    assert set(dumped["engines"][0]) <= set(engine)


def test_a_catalogue_entry_that_does_not_fit_is_one_sentence_with_its_line():
    from console.gpucatalog import GpuModel, catalog
    from console.yamlfile import ConfigError, load_entries

    text = (resources.files("config") / "gpus.yaml").read_text(encoding="utf-8")
    assert load_entries(text, "config/gpus.yaml", GpuModel) == catalog()
    first = next(iter(catalog()))
    bad = text.replace("architecture: ", "architecure: ", 1)
    line = 1 + text[: text.index("architecture: ")].count("\n")
    with pytest.raises(ConfigError) as info:
        load_entries(bad, "config/gpus.yaml", GpuModel)
    assert str(info.value).startswith(
        f"config/gpus.yaml:{line}: {first}: unknown key 'architecure'"
    ), info.value
