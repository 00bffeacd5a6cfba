"""Typed answers: a route encodes a record type, the CLI decodes the same type.

A command through a server gets back the very records (dataclasses, datetimes, tuples)
it would have read from the database itself, so one view function prints both, and
the output is identical either way. pydantic (FastAPI's own) does the encoding; the
served OpenAPI description carries each answer's schema.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Hashable
from typing import Any, TypeVar, cast

from pydantic import ConfigDict, TypeAdapter

T = TypeVar("T")


#: Modules whose names records refer to only under TYPE_CHECKING (a circle of imports
#: at run time): their names resolve such references when an adapter is built.
FORWARD_MODULES = ("promptlab.audit.report",)


#: Infinities and NaN (a comparison's open interval, an SRM statistic) as the strings
#: "Infinity", "-Infinity" and "NaN": JSON has no such numbers, and null would not decode.
WIRE_CONFIG = ConfigDict(ser_json_inf_nan="strings")


@functools.cache
def _adapter(typ: Any) -> TypeAdapter[Any]:
    # `| None`: a config may not be given for a dataclass itself, but reaches it inside a
    # union; a record's JSON is the same.
    adapter: TypeAdapter[Any] = TypeAdapter(typ | None, config=WIRE_CONFIG)
    if not adapter.pydantic_complete:
        names: dict[str, Any] = {}
        for module in FORWARD_MODULES:
            names.update(vars(importlib.import_module(module)))
        adapter.rebuild(force=True, _types_namespace=names)
    return adapter


def to_wire(typ: Any, value: Any) -> bytes:
    """`value` (of type `typ`) as JSON."""
    return _adapter(typ).dump_json(value)


def from_wire(typ: type[T], data: Any) -> T:
    """The `typ` record a route answered with, from its parsed JSON."""
    decoded: T = _adapter(cast("Hashable", typ)).validate_python(data)
    return decoded


def wire_data(typ: Any, value: Any) -> Any:
    """`value`, a `typ` record, as the JSON-able data `to_wire` would write (a job's
    result: the client decodes it with `from_wire` as it would the answer itself)."""
    return _adapter(typ).dump_python(value, mode="json")
