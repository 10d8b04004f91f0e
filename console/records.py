"""The two kinds of pydantic record, and pydantic's validation errors as one sentence.

``Record``: a part of the Frame or of a shipped catalogue — frozen, compared by value, unknown keys
refused. ``UserFile``: a part of a file a user writes (config, plan, engine profiles) — the same,
but its validators may rewrite fields after reading. Both check every value when built; ``Invalid``
names the first problem of a ``ValidationError`` by its key path, in the words the config errors
use (``yamlfile.config_error`` adds file:line).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class Record(BaseModel):
    """A frozen record: built by keyword, every value checked, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)


class UserFile(BaseModel):
    """A part of a file a user wrote: unknown keys refused, fields settable by its validators."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


# pydantic's error types in the words a config error uses ("<key path>: <words>")
_WORDS = {
    "missing": "is required",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping of keys",
    "model_type": "must be a mapping of keys",
    "model_attributes_type": "must be a mapping of keys",
    "datetime_type": "must be a date and time",
    "datetime_parsing": "must be a date and time",
    "datetime_from_date_parsing": "must be a date and time",
}
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


class Invalid(ValueError):
    """A value that does not fit its field: ``loc`` is its key path, ``msg`` says what is wrong,
    ``unknown`` marks a key the record does not have."""

    def __init__(self, loc: tuple[Any, ...], msg: str, unknown: bool = False) -> None:
        super().__init__(f"{'.'.join(str(p) for p in loc) or '(top level)'}: {msg}")
        self.loc, self.msg, self.unknown = loc, msg, unknown

    @classmethod
    def of(cls, exc: ValidationError) -> Invalid:
        """The first problem pydantic found, in one sentence: an unknown key before anything else
        (a misspelt key is also a missing one; the spelling is what to fix)."""
        errors = exc.errors(include_url=False)
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc, kind, ctx = _path(err["loc"]), err["type"], err.get("ctx") or {}
        if kind == "extra_forbidden":
            return cls(loc, f"unknown key {str(loc[-1])!r}" if loc else "unknown key", True)
        if kind == "value_error":
            error = ctx.get("error")
            return cls(loc, str(error) if error is not None else err["msg"])
        if kind == "literal_error":
            return cls(loc, f"must be one of {ctx.get('expected', '')}".replace(" or ", ", "))
        if kind in _BOUNDS:
            key, words = _BOUNDS[kind]
            return cls(loc, f"must be {words} {ctx.get(key, 0):g}")
        if kind in ("too_short", "too_long") and "min_length" in ctx and kind == "too_short":
            least = ctx["min_length"]
            return cls(loc, f"must list at least {least} item{'s' if least != 1 else ''}")
        if kind == "too_long" or kind == "too_short":
            return cls(loc, f"must list {ctx.get('max_length', ctx.get('min_length'))} items")
        return cls(loc, _WORDS.get(kind, err["msg"][:1].lower() + err["msg"][1:]))


def _path(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """A key path without the union branches pydantic names in it (``str``, ``function-after``)."""
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _BRANCHES)))


_BRANCHES = frozenset({"str", "int", "float", "bool", "list", "dict", "tuple", "none"})


def validate(cls: type[M], data: Any) -> M:
    """``cls`` read from plain data, or ``Invalid`` naming the first problem."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise Invalid.of(exc) from None
