"""Typed records: the Frame's parts and the config files' shapes.

A ``Model`` subclass gets a keyword-only constructor when it is defined, and is frozen unless it
says ``frozen=False``. Code builds records with their constructor, unchecked; what comes from outside
(a file a user wrote, a recording) goes through ``model_validate``, which checks every value
against its annotation and bounds, refuses unknown keys, runs the class's validators, and names the
first problem by its key path (``Invalid``). ``model_dump`` gives plain data back: in JSON mode a
float field holds a float, datetimes read as ISO 8601 with ``Z`` for UTC, and infinities and NaN
are null.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import types
import typing
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, Union

M = TypeVar("M", bound="Model")
MISSING: Any = dataclasses.MISSING
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("gt", operator.gt, "greater than"),
    ("ge", operator.ge, "at least"),
    ("lt", operator.lt, "less than"),
    ("le", operator.le, "at most"),
)


class Invalid(ValueError):
    """A value that does not fit its field: ``loc`` is its key path, ``msg`` says what is wrong,
    ``unknown`` marks a key the record does not have."""

    def __init__(self, loc: tuple[Any, ...], msg: str, unknown: bool = False) -> None:
        super().__init__(f"{'.'.join(str(p) for p in loc) or '(top level)'}: {msg}")
        self.loc, self.msg, self.unknown = loc, msg, unknown


class FieldInfo:
    """One field: its default (or the factory that makes one), bounds, key and whether dumps and
    reprs show it."""

    __slots__ = ("default", "default_factory", "metadata", "repr")

    def __init__(
        self,
        default: Any,
        default_factory: Any,
        metadata: dict[str, Any],
        repr: bool,  # noqa: A002 - the word dataclasses use
    ) -> None:
        self.default, self.default_factory = default, default_factory
        self.metadata, self.repr = metadata, repr


def Field(  # noqa: N802 - reads as the declaration it is
    default: Any = MISSING,
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    min_length: int | None = None,
    alias: str | None = None,
    exclude: bool = False,
    repr: bool = True,  # noqa: A002 - the word dataclasses use
) -> Any:
    """A field with a default, bounds (numbers), a least length (lists), a key it is read and
    written under (``alias``), or kept out of dumps (``exclude``)."""
    meta = {
        k: v
        for k, v in (
            ("gt", gt),
            ("ge", ge),
            ("lt", lt),
            ("le", le),
            ("min_length", min_length),
            ("alias", alias),
        )
        if v is not None
    }
    if exclude:
        meta["exclude"] = True
    return FieldInfo(default, default_factory, meta, repr)


class _Check:
    """A validator: of the named fields' values, or (no names) of the whole record."""

    def __init__(self, func: Callable[..., Any], names: tuple[str, ...] = ()) -> None:
        self.func, self.names = func, names


def field_validator(*names: str) -> Callable[[Any], Any]:
    """``@field_validator("url") @classmethod def f(cls, v)``: checks or rewrites a value read by
    ``model_validate`` (a ValueError names the field)."""

    def deco(method: Any) -> Any:
        return _Check(method.__func__ if isinstance(method, classmethod) else method, names)

    return deco


def model_validator(mode: Literal["after"]) -> Callable[[Any], Any]:
    """``@model_validator(mode="after") def f(self)``: checks a whole record ``model_validate`` built
    (a ValueError names the record)."""

    def deco(method: Any) -> Any:
        return _Check(method)

    return deco


class Model:
    """Base of every record: built by keyword, compared by value, frozen unless it says not."""

    model_fields: ClassVar[dict[str, FieldInfo]] = {}
    _frozen: ClassVar[bool] = True
    _keeps_set: ClassVar[bool] = False
    _checked: ClassVar[bool] = False
    _hints: ClassVar[dict[str, Any] | None] = None
    _floats: ClassVar[frozenset[str]] = frozenset()
    _checks: ClassVar[list[_Check]] = []
    _keys: ClassVar[dict[str, str]] = {}  # the key each field is read under -> its name
    _fill: ClassVar[Callable[[Model, dict[str, Any]], None]]

    if TYPE_CHECKING:  # each record's own __init__ takes its fields by keyword

        def __init__(self, **given: Any) -> None: ...

    def __init_subclass__(
        cls,
        frozen: bool | None = None,
        keeps_set: bool | None = None,
        checked: bool | None = None,
        **kw: Any,
    ) -> None:
        """``frozen=False``: fields may be set. ``keeps_set``: remembers which fields were given
        (a dump holds only those). ``checked``: the constructor checks as ``model_validate`` does
        (the shapes of files users write)."""
        super().__init_subclass__(**kw)
        if frozen is not None:
            cls._frozen = frozen
        if keeps_set is not None:
            cls._keeps_set = keeps_set
        if checked is not None:
            cls._checked = checked
        fields = dict(cls.model_fields)
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name, MISSING)
            if isinstance(value, FieldInfo):
                f = value
            elif isinstance(value, Model):  # a record as default: each instance gets its own copy
                f = FieldInfo(MISSING, value.model_copy, {}, True)
            else:
                f = FieldInfo(value, MISSING, {}, True)
            fields[name] = f
            if value is not MISSING:
                delattr(cls, name)
        cls.model_fields = fields
        cls.__hash__ = _hash if cls._frozen else None  # type: ignore[assignment]
        if cls._frozen:
            cls.__setattr__ = _refuse  # type: ignore[assignment]
            cls.__delattr__ = _refuse  # type: ignore[assignment]
        cls._hints = None
        built = _make_init(fields)

        def fill(self: Model, given: dict[str, Any]) -> None:
            built(self, **given)
            if cls._keeps_set:
                object.__setattr__(self, "_fields_set", frozenset(given))

        cls._fill = fill
        if cls._keeps_set or cls._checked:

            def __init__(self: Model, **given: Any) -> None:
                if cls._checked:
                    _record(cls, given, (), self)
                else:
                    fill(self, given)

            cls.__init__ = __init__  # type: ignore[method-assign]
        else:
            cls.__init__ = built  # type: ignore[method-assign]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine, theirs = self.__dict__, other.__dict__
        return all(mine[n] == theirs[n] for n in self.model_fields)

    def __repr__(self) -> str:
        shown = (f"{n}={self.__dict__[n]!r}" for n, f in self.model_fields.items() if f.repr)
        return f"{type(self).__qualname__}({', '.join(shown)})"

    # --- reading -------------------------------------------------------------------------------

    @classmethod
    def _types(cls) -> dict[str, Any]:
        """Field annotations, resolved once (after the module defining them has loaded)."""
        if cls._hints is None:
            cls._checks = [
                c for b in reversed(cls.__mro__) for c in vars(b).values() if isinstance(c, _Check)
            ]
            hints = typing.get_type_hints(cls)
            cls._hints = {name: hints[name] for name in cls.model_fields}
            cls._floats = frozenset(n for n, t in cls._hints.items() if _holds_float(t))
            cls._keys = {f.metadata.get("alias", n): n for n, f in cls.model_fields.items()}
        return cls._hints

    @classmethod
    def model_validate(cls: type[M], data: Any) -> M:
        """A record from plain data, every value checked (``Invalid`` names the first problem)."""
        return _record(cls, data, ())

    @property
    def model_fields_set(self) -> frozenset[str]:
        """The fields given when the record was made (every field, unless the class keeps them)."""
        got: frozenset[str] | None = self.__dict__.get("_fields_set")
        return frozenset(self.model_fields) if got is None else got

    def model_copy(self: M, update: dict[str, Any] | None = None) -> M:
        """A copy with ``update``'s fields replaced (unchecked)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        if update:
            new.__dict__.update(update)
            if "_fields_set" in new.__dict__:
                new.__dict__["_fields_set"] = self.model_fields_set | update.keys()
        return new

    # --- writing -------------------------------------------------------------------------------

    def model_dump(
        self,
        *,
        mode: Literal["python", "json"] = "python",
        exclude: Iterable[str] = (),
        exclude_defaults: bool = False,
        by_alias: bool = False,
    ) -> dict[str, Any]:
        """Plain data: nested records as dicts; ``mode="json"`` as ``model_dump_json`` writes it."""
        out: dict[str, Any] = _dump(
            self, mode == "json", frozenset(exclude), exclude_defaults, by_alias
        )
        return out

    def model_dump_json(self, *, indent: int | None = None, by_alias: bool = False) -> str:
        data = self.model_dump(mode="json", by_alias=by_alias)
        if indent is None:
            return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return json.dumps(data, ensure_ascii=False, indent=indent)


def _make_init(fields: dict[str, FieldInfo]) -> Callable[..., None]:
    """The constructor of a record with these fields: keyword-only, defaults and factories
    applied, values stored as given (it runs every poll for every record: nothing else)."""
    env: dict[str, Any] = {"MISSING": MISSING}
    params, values = [], []
    for i, (name, f) in enumerate(fields.items()):
        if f.default is not MISSING:
            env[f"d{i}"] = f.default
            params.append(f"{name}=d{i}")
            values.append(f"{name}={name}")
        elif f.default_factory is not MISSING:
            env[f"f{i}"] = f.default_factory
            params.append(f"{name}=MISSING")
            values.append(f"{name}=f{i}() if {name} is MISSING else {name}")
        else:
            params.append(name)
            values.append(f"{name}={name}")
    star = ", *, " + ", ".join(params) if params else ""
    src = f"def __init__(self{star}):\n    self.__dict__.update({', '.join(values)})\n"
    exec(src, env)  # noqa: S102 - the source is built above from field names only
    init: Callable[..., None] = env["__init__"]
    return init


def _hash(self: Model) -> int:
    return hash(tuple(self.__dict__[n] for n in self.model_fields))


def _refuse(self: Model, name: str, *value: Any) -> None:
    raise dataclasses.FrozenInstanceError(
        f"cannot change {name!r}: {type(self).__name__} is frozen"
    )


# --- checking plain data against annotations ---------------------------------------------------


def _record(cls: type[M], data: Any, loc: tuple[Any, ...], into: M | None = None) -> M:
    """``data`` checked against ``cls`` into a new record (or ``into``, from its constructor)."""
    if isinstance(data, cls) and into is None:
        return data
    if not isinstance(data, dict):
        raise Invalid(loc, "must be a mapping of keys")
    types_ = cls._types()
    fields, names = cls.model_fields, cls._keys
    given: dict[str, Any] = {}
    for key, value in data.items():
        name = names.get(key, key) if isinstance(key, str) else key
        if name not in types_:
            raise Invalid((*loc, key), f"unknown key {str(key)!r}", unknown=True)
        at = (*loc, key)
        v = _value(types_[name], value, at)
        _bounds(fields[name].metadata, v, at)
        given[name] = v
    for name, f in fields.items():
        if name not in given and f.default is MISSING and f.default_factory is MISSING:
            raise Invalid((*loc, f.metadata.get("alias", name)), "is required")
    for check in cls._checks:
        for name in check.names:
            if name in given:
                try:
                    given[name] = check.func(cls, given[name])
                except ValueError as exc:
                    raise Invalid((*loc, name), str(exc)) from None
    obj = object.__new__(cls) if into is None else into
    cls._fill(obj, given)
    for check in cls._checks:
        if not check.names:
            try:
                check.func(obj)  # checks, or rewrites fields in place
            except ValueError as exc:
                raise Invalid(loc, str(exc)) from None
    return obj


def _bounds(meta: Any, v: Any, loc: tuple[Any, ...]) -> None:
    if not meta or v is None:
        return
    for key, ok, words in _BOUNDS:
        bound = meta.get(key)
        if bound is not None and not ok(v, bound):
            raise Invalid(loc, f"must be {words} {bound:g}")
    least = meta.get("min_length")
    if least is not None and len(v) < least:
        raise Invalid(loc, f"must list at least {least} item{'s' if least != 1 else ''}")


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is float:
        return "a number"
    if tp is int:
        return "a whole number"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "text"
    if tp is datetime:
        return "a date and time"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return "a list"
    if origin is dict or (isinstance(tp, type) and issubclass(tp, Model)):
        return "a mapping of keys"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp) if a is not type(None))
    return getattr(tp, "__name__", str(tp))


def _value(tp: Any, v: Any, loc: tuple[Any, ...]) -> Any:
    if tp is Any:
        return v
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if v is None:
            if type(None) in args:
                return None
            raise Invalid(loc, f"must be {_describe(tp)}")
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _value(options[0], v, loc)
        for a in options:  # the first that takes it as it is, then the first that converts it
            if isinstance(a, type) and type(v) is a:
                return v
        for a in options:
            try:
                return _value(a, v, loc)
            except Invalid:
                continue
        raise Invalid(loc, f"must be {_describe(tp)}")
    ok = True
    if tp is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        v = float(v) if ok else v
    elif tp is int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif tp is bool or tp is str:
        ok = isinstance(v, tp)
    elif tp is datetime:
        if isinstance(v, str):
            try:
                v = datetime.fromisoformat(v)
            except ValueError:
                ok = False
        ok = ok and isinstance(v, datetime)
    elif origin is Literal:
        ok = v in typing.get_args(tp) and not isinstance(v, bool)
    elif origin is list or origin is tuple:
        ok = isinstance(v, (list, tuple))
        if ok:
            args = typing.get_args(tp)
            if origin is list:
                return [_value(args[0], x, (*loc, i)) for i, x in enumerate(v)]
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_value(args[0], x, (*loc, i)) for i, x in enumerate(v))
            if len(v) != len(args):
                raise Invalid(loc, f"must list {len(args)} items")
            return tuple(
                _value(a, x, (*loc, i)) for i, (a, x) in enumerate(zip(args, v, strict=True))
            )
    elif origin is dict:
        ok = isinstance(v, dict)
        if ok:
            kt, vt = typing.get_args(tp)
            return {_value(kt, k, (*loc, k)): _value(vt, x, (*loc, k)) for k, x in v.items()}
    elif isinstance(tp, type) and issubclass(tp, Model):
        return _record(tp, v, loc)
    elif isinstance(tp, type):
        ok = isinstance(v, tp)
    if not ok:
        raise Invalid(loc, f"must be {_describe(tp)}")
    return v


def _holds_float(tp: Any) -> bool:
    """Whether a field's values hold floats anywhere (so a JSON dump writes ints there as 1.0)."""
    if tp is float:
        return True
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (Union, types.UnionType) and int in args:
        return False  # int | float keeps an int as it came
    return any(_holds_float(a) for a in args)


# --- plain data out ----------------------------------------------------------------------------


def _dump(m: Model, js: bool, exclude: frozenset[str], defaults: bool, alias: bool) -> Any:
    cls = type(m)
    if js:
        cls._types()  # which fields hold floats
    given = m.__dict__.get("_fields_set")
    out: dict[str, Any] = {}
    for name, f in cls.model_fields.items():
        if (
            name in exclude
            or f.metadata.get("exclude")
            or (given is not None and name not in given)
        ):
            continue
        v = m.__dict__[name]
        if defaults and v == _default(f):
            continue
        key = f.metadata.get("alias", name) if alias else name
        out[key] = _plain(v, js, defaults, alias, js and name in cls._floats)
    return out


def _default(f: FieldInfo) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _plain(v: Any, js: bool, defaults: bool, alias: bool, floats: bool) -> Any:
    if isinstance(v, Model):
        return _dump(v, js, frozenset(), defaults, alias)
    if isinstance(v, float):
        return None if js and not math.isfinite(v) else v
    if isinstance(v, int) and floats and not isinstance(v, bool):
        return float(v)
    if isinstance(v, list) or (js and isinstance(v, tuple)):
        return [_plain(x, js, defaults, alias, floats) for x in v]
    if isinstance(v, tuple):
        return tuple(_plain(x, js, defaults, alias, floats) for x in v)
    if isinstance(v, dict):
        return {(str(k) if js else k): _plain(x, js, defaults, alias, floats) for k, x in v.items()}
    if js and isinstance(v, datetime):
        text = v.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    return v
