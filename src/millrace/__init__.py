"""millrace: realtime data processing on Kafka and Spark, for Python teams.

Example:
    >>> from millrace import publish
    >>> publish("clicks", {"time": "2026-01-01T12:00:00Z", "page": "/"})  # doctest: +SKIP
"""

from millrace.bus.publisher import Publisher, publish
from millrace.bus.reader import Reader
from millrace.bus.records import Record
from millrace.errors import MillraceError
from millrace.processor import Input, ListState, MapState, Processor, ValueState

__all__ = [
    "Input",
    "ListState",
    "MapState",
    "MillraceError",
    "Processor",
    "Publisher",
    "Reader",
    "Record",
    "ValueState",
    "publish",
]
