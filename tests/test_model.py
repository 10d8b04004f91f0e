"""console/model.py: the records under the Frame and the config files. Checking what a user wrote
(types, bounds, unknown and missing keys, validators, key paths), and writing records back out
(JSON floats, UTC as Z, null for infinities, only the fields a report was given)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest

from console.model import Field, Invalid, Model, field_validator, model_validator


class Part(Model, checked=True):
    size: int = Field(gt=0)
    share: float = Field(0.5, ge=0, le=1)
    tags: list[str] = Field(default_factory=list, min_length=0)


class Whole(Model, frozen=False, checked=True):
    name: str
    kind: Literal["a", "b"] = "a"
    parts: list[Part] = Field(default_factory=list)
    by_name: dict[str, Part] = Field(default_factory=dict)
    span: tuple[float, float] | None = None
    either: str | Part | None = None
    count: int | float = 0
    when: datetime | None = None
    schema_: str = Field("w/1", alias="schema")
    secret: str | None = Field(None, exclude=True, repr=False)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("give a name")
        return v.strip()

    @model_validator(mode="after")
    def _two(self) -> None:
        if len(self.parts) > 2:
            raise ValueError("at most two parts")


class Report(Model, keeps_set=True):
    a: float | None = None
    b: float | None = None


class Row(Model):
    x: float | None = None
    ys: list[float] = Field(default_factory=list)
    at: datetime | None = None


@pytest.mark.parametrize(
    ("data", "loc", "msg"),
    [
        ({}, ("name",), "is required"),
        ({"name": "n", "nmae": 1}, ("nmae",), "unknown key 'nmae'"),
        ({"name": 3}, ("name",), "must be text"),
        ({"name": " "}, ("name",), "give a name"),
        ({"name": "n", "kind": "c"}, ("kind",), "must be one of 'a', 'b'"),
        (
            {"name": "n", "parts": [{"size": 1}, {"size": 0}]},
            ("parts", 1, "size"),
            "greater than 0",
        ),
        ({"name": "n", "parts": [{"size": 1, "share": 1.5}]}, ("parts", 0, "share"), "at most 1"),
        ({"name": "n", "parts": [{"size": 1.5}]}, ("parts", 0, "size"), "must be a whole number"),
        ({"name": "n", "parts": [{"size": True}]}, ("parts", 0, "size"), "a whole number"),
        ({"name": "n", "parts": {"size": 1}}, ("parts",), "must be a list"),
        ({"name": "n", "by_name": {"x": {"sise": 1}}}, ("by_name", "x", "sise"), "unknown key"),
        ({"name": "n", "span": [1]}, ("span",), "must list 2 items"),
        ({"name": "n", "either": 5}, ("either",), "must be text or a mapping of keys"),
        ({"name": "n", "when": "yesterday"}, ("when",), "a date and time"),
        ({"name": "n", "parts": [{"size": 1}] * 3}, (), "at most two parts"),
        ([1, 2], (), "must be a mapping of keys"),
    ],
)
def test_a_value_that_does_not_fit_names_its_key_path(data, loc, msg):
    with pytest.raises(Invalid) as info:
        Whole.model_validate(data)
    assert info.value.loc == loc
    assert msg in info.value.msg
    assert info.value.unknown == ("unknown key" in msg)


def test_values_are_converted_as_their_fields_say():
    w = Whole.model_validate(
        {
            "name": " n ",
            "parts": [{"size": 2.0, "share": 1}],
            "by_name": {"p": {"size": 3}},
            "span": [1, 2.5],
            "either": {"size": 4},
            "count": 7,
            "when": "2026-12-01T10:00:00Z",
            "schema": "w/2",
        }
    )
    assert w.name == "n"  # the field validator's rewrite
    assert w.parts == [Part(size=2, share=1.0)] and type(w.parts[0].size) is int
    assert type(w.parts[0].share) is float
    assert w.by_name["p"].size == 3 and w.span == (1.0, 2.5) and type(w.span[0]) is float
    assert w.either == Part(size=4)
    assert w.count == 7 and type(w.count) is int  # int | float keeps an int
    assert w.when == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert w.schema_ == "w/2"
    assert Whole.model_validate({"name": "n", "either": "text"}).either == "text"


def test_checked_constructors_check_and_frozen_records_refuse_changes():
    with pytest.raises(Invalid, match="greater than 0"):
        Part(size=0)
    with pytest.raises(Invalid, match="is required"):
        Part()
    p = Part(size=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.size = 2  # type: ignore[misc]
    w = Whole(name="n")
    w.name = "m"  # config records may be changed (the CLI's flags override the file)
    assert w.name == "m"
    r = Row(x=1)  # unchecked: code builds these with the right types
    assert r.x == 1


def test_record_defaults_are_not_shared():
    class Holder(Model, frozen=False):
        part: Part = Part(size=1)
        tags: list[str] = Field(default_factory=list)

    a, b = Holder(), Holder()
    assert a.part == b.part and a.part is not b.part
    a.tags.append("x")
    assert b.tags == []


def test_json_dump_writes_floats_utc_and_null_for_infinities():
    r = Row(x=3, ys=[1, 2.5, float("inf")], at=datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC))
    assert r.model_dump_json() == ('{"x":3.0,"ys":[1.0,2.5,null],"at":"2026-12-01T10:00:05Z"}')
    assert r.model_dump() == {"x": 3, "ys": [1, 2.5, float("inf")], "at": r.at}
    east = Row(at=datetime(2026, 12, 1, 10, tzinfo=timezone(timedelta(hours=2))))
    assert east.model_dump(mode="json")["at"] == "2026-12-01T10:00:00+02:00"
    assert json.loads(Row(x=float("nan")).model_dump_json())["x"] is None


def test_dump_keys_aliases_exclusions_and_defaults():
    w = Whole(name="n", secret="pw", span=(1.0, 2.0))
    plain = w.model_dump()
    assert "secret" not in plain and plain["schema_"] == "w/1" and plain["span"] == (1.0, 2.0)
    js = w.model_dump(mode="json", by_alias=True, exclude={"parts"})
    assert js["schema"] == "w/1" and "parts" not in js and js["span"] == [1.0, 2.0]
    assert "pw" not in repr(w)
    assert w.model_dump(exclude_defaults=True) == {"name": "n", "span": (1.0, 2.0)}
    assert Whole.model_validate(w.model_dump(mode="json", by_alias=True)) == w.model_copy(
        update={"secret": None}
    )


def test_a_report_dumps_only_the_fields_it_was_given():
    r = Report(a=None)
    assert r.model_dump() == {"a": None}  # null: could not be computed; b absent: not applicable
    assert r.model_fields_set == {"a"}
    assert r.model_copy(update={"b": 2.0}).model_dump() == {"a": None, "b": 2.0}
    assert Report.model_validate({"b": 1}).model_dump(mode="json") == {"b": 1.0}
    assert Row().model_fields_set == {"x", "ys", "at"}


def test_copy_replaces_fields_and_keeps_the_original():
    r = Row(x=1.0, ys=[1.0])
    c = r.model_copy(update={"x": 2.0})
    assert (r.x, c.x, c.ys) == (1.0, 2.0, [1.0]) and type(c) is Row
    assert r == Row(x=1.0, ys=[1.0]) and r != c
