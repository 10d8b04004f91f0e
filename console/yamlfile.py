"""YAML loading that can say which file line a value came from, for one-sentence errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from console.records import Invalid

M = TypeVar("M", bound=BaseModel)

# libyaml's parser when PyYAML has it (about 10x faster; the same nodes, marks and errors)
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigError(ValueError):
    """A file a user wrote is wrong; the message is one sentence with file and line."""


Where = Callable[[Sequence[Any]], str]


def load_yaml(text: str, source: str) -> tuple[Any, Where]:
    """Parse YAML; return (data, where) where ``where(path)`` gives "source:line" for a key path."""
    try:
        loader = SafeLoader(text)
        try:
            root = loader.get_single_node()
            if root is not None:
                _check_aliases(root, source)
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{at}: not valid YAML ({problem}); check the indentation and quoting there."
        ) from None
    if root is not None:
        _check_duplicates(root, source)

    def where(path: Sequence[Any]) -> str:
        node = root
        line = node.start_mark.line if node is not None else 0
        for part in path:
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if str(key.value) == str(part):
                        line = key.start_mark.line
                        node = value
                        break
                else:
                    break
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(part, int)
                and 0 <= part < len(node.value)
            ):
                node = node.value[part]
                line = node.start_mark.line
            else:
                break
        return f"{source}:{line + 1}"

    return data, where


MAX_NODES = 100_000  # values a file may expand to through its aliases


def _check_aliases(root: yaml.Node, source: str) -> None:
    """Refuse a document whose aliases refer to themselves (it never ends) or expand past
    MAX_NODES values (an alias bomb), in one walk that stops at the budget."""
    seen = 0
    stack: list[tuple[yaml.Node, frozenset[int]]] = [(root, frozenset())]
    while stack:
        node, above = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ConfigError(
                f"{source}:{node.start_mark.line + 1}: its aliases expand to more than "
                f"{MAX_NODES:,} values; write the values out instead of nesting aliases."
            )
        if id(node) in above:
            raise ConfigError(
                f"{source}:{node.start_mark.line + 1}: a YAML alias refers to the value that "
                "holds it, which never ends; write the value out."
            )
        if isinstance(node, yaml.MappingNode):
            inside = above | {id(node)}
            for key, value in node.value:
                stack.append((key, inside))
                stack.append((value, inside))
        elif isinstance(node, yaml.SequenceNode):
            inside = above | {id(node)}
            stack.extend((item, inside) for item in node.value)


def _check_duplicates(node: yaml.Node, source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            k = str(key.value)
            if k in seen:
                raise ConfigError(
                    f"{source}:{key.start_mark.line + 1}: key {k!r} appears twice "
                    f"(first on line {seen[k] + 1}); keep one."
                )
            seen[k] = key.start_mark.line
            _check_duplicates(value, source)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, source)


def config_error(
    exc: Invalid, where: Where, prefix: Sequence[Any] = (), fix: str = ""
) -> ConfigError:
    """One sentence from a value that does not fit its field, with file:line."""
    loc = tuple(prefix) + exc.loc
    dotted = ".".join(str(p) for p in (loc[:-1] if exc.unknown else loc)) or "(top level)"
    if exc.unknown:
        fix = fix or "check its spelling against the example in config/"
    text = f"{where(loc)}: {dotted}: {exc.msg}"
    return ConfigError(text + (f"; {fix}." if fix else "."))


def load_entries(
    text: str, source: str, cls: type[M], what: str = "names to entries"
) -> dict[str, M]:
    """A YAML mapping of names to ``cls`` entries (the shipped catalogues, a user's additions),
    each checked; the first problem is one sentence with file:line."""
    data, where = load_yaml(text, source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of {what}.")
    out: dict[str, M] = {}
    for name, body in data.items():
        try:
            out[str(name)] = cls.model_validate(body)
        except ValidationError as exc:
            raise config_error(Invalid.of(exc), where, (name,)) from None
    return out
