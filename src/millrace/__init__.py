"""millrace: realtime data processing on Kafka and Spark, for Python teams.

The bus's `Publisher`, `publish` and `Reader` are loaded on first use, so that importing
the processor API (or `millrace.records`) does not load the Kafka client.

Example:
    >>> from millrace import publish
    >>> publish.__module__
    'millrace.bus.publisher'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from millrace.errors import MillraceError
from millrace.processor import (
    Count,
    Input,
    ListState,
    MapState,
    Max,
    Min,
    Processor,
    Sum,
    TopK,
    ValueState,
)
from millrace.records import Record

if TYPE_CHECKING:
    from millrace.bus.publisher import Publisher, publish
    from millrace.bus.reader import Reader

_ON_FIRST_USE = {
    "Publisher": "millrace.bus.publisher",
    "publish": "millrace.bus.publisher",
    "Reader": "millrace.bus.reader",
}

__all__ = [
    "Count",
    "Input",
    "ListState",
    "MapState",
    "Max",
    "MillraceError",
    "Min",
    "Processor",
    "Publisher",
    "Reader",
    "Record",
    "Sum",
    "TopK",
    "ValueState",
    "publish",
]


def __getattr__(name: str) -> object:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'millrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
