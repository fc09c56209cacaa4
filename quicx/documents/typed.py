"""
Documents as attrs classes: written as JSON-ready dicts, read back leniently.

A document class is an attrs class whose fields are the document's keys, in
the order they are written; a field is another document class, a tuple of
them (a JSON list), a dict of plain values, a plain value (C{str}, C{int},
C{float}, C{bool}), or any of these or C{None}.  L{as_json} writes one as
the dict C{json.dumps} takes (every key, C{None} as C{null}); L{read} makes
one of what C{json.loads} gave, as a reader of another version's document
must: a key it does not know is left out, a missing key takes its field's
default (a field without a default is required), and a value of the wrong
kind raises L{DocumentError} naming its key.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

T = TypeVar("T")


class DocumentError(ValueError):
    """A document that cannot be read as its class: says which key and why."""


def as_json(document: Any) -> dict[str, Any]:
    """
    C{document} (an instance of a document class) as a JSON-ready dict, keys
    in field order, its tuples as lists.
    """
    return {name: _json(getattr(document, name)) for name in _fields(type(document))}


def _json(value: Any) -> Any:
    if attrs.has(type(value)):
        return as_json(value)
    if isinstance(value, tuple | list):
        return [_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _json(item) for key, item in value.items()}
    return value


def read(cls: type[T], data: object, where: str = "") -> T:
    """
    C{data} (what C{json.loads} gave) as a C{cls}: unknown keys ignored,
    missing ones defaulted.

    @param where: the key path of C{data} in its document, for the errors.
    @raise DocumentError: a required key is missing, or a value is of the wrong kind.
    """
    if not isinstance(data, Mapping):
        raise DocumentError(f"{where or 'the document'} is not an object")
    values = {}
    for name, (kind, required) in _fields(cls).items():
        path = f"{where}.{name}" if where else name
        if name in data:
            values[name] = _value(kind, data[name], path)
        elif required:
            raise DocumentError(f"{path} is missing")
    return cls(**values)


def _fields(cls: type) -> dict[str, tuple[Any, bool]]:
    """Each field of document class C{cls}: its resolved type, and whether it is required."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _FIELDS[cls] = {
            field.name: (hints[field.name], field.default is attrs.NOTHING)
            for field in attrs.fields(cls)
        }
    return found


_FIELDS: dict[type, dict[str, tuple[Any, bool]]] = {}
"""L{_fields}' answers, by class (document classes are few, and never forgotten)."""


def _value(kind: Any, value: object, where: str) -> Any:
    """C{value} read as a C{kind}."""
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is types.UnionType or origin is typing.Union:
        if value is None and type(None) in arguments:
            return None
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return _value(inner, value, where)
    if kind is Any:
        return value
    if attrs.has(kind):
        return read(kind, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise DocumentError(f"{where} is not a list")
        return tuple(
            _value(arguments[0], item, f"{where}[{index}]") for index, item in enumerate(value)
        )
    if origin is dict:
        if not isinstance(value, dict):
            raise DocumentError(f"{where} is not an object")
        return {key: _value(arguments[1], item, f"{where}.{key}") for key, item in value.items()}
    if not _is(kind, value):
        raise DocumentError(f"{where} is not {_NAMES[kind]}: {value!r:.40}")
    return value


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _is(kind: type, value: object) -> bool:
    """Whether C{value} is a C{kind} as JSON gives it (an int is a number; a bool no int)."""
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)
