"""Serving tables seen from processors: `ctx.lookup` and `ctx.produce_to_table`.

`ctx.lookup(table, key)` reads a row of a serving table through the `LookupSource` the
runtime hands the execution core (`run_batch(..., lookups=...)`): on Spark,
`millrace.apps.processors.lookups.ServingLookups` (Redis, with the executor's cache of
bounded age); in `ProcessorTester`, `MemoryTables` (dicts you give). A missing key gives None.
There is no process-wide source: a micro-batch run without one has no tables to read.

A processor that names the record field each table is looked up by, in its class attribute
`lookups = {"classifications": "dimension_id"}`, gets the keys of a whole bucket's
micro-batch fetched in one round trip before its callbacks run (`prefetch`); its
`ctx.lookup` calls then hit the executor's cache. Without it, each `ctx.lookup` that misses
the cache is one round trip.

`ctx.produce_to_table(table, row)` is a production whose stream is `table:<name>`
(`TABLE_PREFIX`): the runtime upserts it into the serving table instead of writing a stream.

Example:
    >>> from millrace.processor import Input, Processor
    >>> from millrace.processor.execution import run_batch
    >>> from millrace.records import Record
    >>> class Enricher(Processor):
    ...     name = "enricher"
    ...     inputs = [Input("events", key="dimension_id")]
    ...     lookups = {"classifications": "dimension_id"}
    ...     def on_record(self, key, record, ctx):
    ...         row = ctx.lookup("classifications", record["dimension_id"])
    ...         ctx.produce("enriched", {**record, "topic": row and row["topic"]})
    >>> tables = MemoryTables({"classifications": {"d1": {"topic": "cats"}}})
    >>> event = Record("events", 0, 0, None, None, 1000, {"dimension_id": "d1"})
    >>> outcome = run_batch(Enricher(), {}, [event], watermark_ms=None, processing_time_ms=0,
    ...                     lookups=tables)
    >>> outcome.productions[0].value
    {'dimension_id': 'd1', 'topic': 'cats'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from millrace.errors import ProcessorError
from millrace.records import JsonObject

TABLE_PREFIX = "table:"
"""The stream name prefix of productions to serving tables: `table:<name>`."""

Tables = Mapping[str, Mapping[Any, Mapping[str, object]]]  # Any: keys of the user's type
"""Serving tables given in dicts: table -> key -> row."""


class LookupSource(Protocol):
    """Where `ctx.lookup` reads serving tables from."""

    def get(self, table: str, key: object) -> JsonObject | None:
        """The row of `table` with key `key`, or None."""
        ...

    def prefetch(self, table: str, keys: Iterable[object]) -> None:
        """Read the rows of `keys` at once, so that the `get` calls that follow hit a cache."""
        ...


class MemoryTables:
    """Serving tables held in dicts: table -> key -> row. For `ProcessorTester`.

    Example:
        >>> MemoryTables({"cls": {"d1": {"topic": "cats"}}}).get("cls", "d1")
        {'topic': 'cats'}
    """

    def __init__(self, tables: Tables) -> None:
        self.tables = {name: dict(rows) for name, rows in tables.items()}

    def get(self, table: str, key: object) -> JsonObject | None:
        """The row of `table` with key `key`, or None; `ProcessorError` for an unknown table."""
        rows = self.tables.get(table)
        if rows is None:
            raise _unknown(table, sorted(self.tables))
        row = rows.get(tuple(key) if isinstance(key, list) else key)
        return None if row is None else dict(row)

    def prefetch(self, table: str, keys: Iterable[object]) -> None:
        """Nothing to fetch: the rows are in memory."""
        if table not in self.tables:
            raise _unknown(table, sorted(self.tables))


def lookup(source: LookupSource | None, table: str, key: object) -> JsonObject | None:
    """The row of serving table `table` with key `key` from `source`, or None.

    Example:
        >>> lookup(MemoryTables({"cls": {"d1": {"topic": "cats"}}}), "cls", "d9") is None
        True
    """
    if source is None:
        raise ProcessorError(
            f"ctx.lookup({table!r}, ...) has no serving tables to read here",
            hint="on Spark the runtime provides them; in ProcessorTester pass tables={...}",
        )
    return source.get(table, key)


def prefetch(
    source: LookupSource | None,
    lookups: Mapping[str, str],
    values: Iterable[Mapping[str, object]],
) -> None:
    """Fetch from `source`, per table of `lookups` (table -> record field), the keys `values` hold.

    Example:
        >>> prefetch(MemoryTables({"cls": {}}), {"cls": "dimension_id"}, [{"dimension_id": "d1"}])
    """
    if source is None or not lookups:
        return
    records = list(values)
    for table, field in lookups.items():
        keys = {record.get(field) for record in records} - {None}
        if keys:
            source.prefetch(table, keys)


def _unknown(table: str, known: list[str]) -> ProcessorError:
    return ProcessorError(
        f"serving table {table!r} does not exist",
        hint=f"known tables: {', '.join(known) or 'none'}; give the tester tables={{...}}",
    )
