"""Testing apps: `ProcessorTester` runs a processor in memory, `SqlAppTester` a SQL app.

`millrace.testing.processor` holds the in-memory processor tester, which needs neither Spark
nor Kafka; `millrace.testing.sql` the SQL-app tester, which runs apps on the real bus and
Spark. Each name here is loaded from its module on first use, so importing `ProcessorTester`
does not load PySpark.

Example:
    >>> from millrace.testing import ProcessorTester
    >>> from millrace.testing import SqlAppTester
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from millrace.testing.processor import ProcessorTester
    from millrace.testing.sql import SqlAppResult, SqlAppTester

_ON_FIRST_USE = {
    "ProcessorTester": "millrace.testing.processor",
    "SqlAppResult": "millrace.testing.sql",
    "SqlAppTester": "millrace.testing.sql",
}

__all__ = ["ProcessorTester", "SqlAppResult", "SqlAppTester"]


def __getattr__(name: str) -> object:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'millrace.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
