"""Serving tables seen from processors: `ctx.lookup` and `ctx.produce_to_table`.

`ctx.lookup(table, key)` reads a row of a serving table through the lookup source in force:
on Spark, `ServingLookups` (Redis, with the executor's cache of bounded age); in
`ProcessorTester`, `MemoryTables` (dicts you give). A missing key gives None.

A processor that names the record field each table is looked up by, in its class attribute
`lookups = {"classifications": "dimension_id"}`, gets the keys of a whole bucket's
micro-batch fetched in one round trip before its callbacks run (`prefetch`); its
`ctx.lookup` calls then hit the executor's cache. Without it, each `ctx.lookup` that misses
the cache is one round trip.

`ctx.produce_to_table(table, row)` is a production whose stream is `table:<name>`
(`TABLE_PREFIX`): the runtime upserts it into the serving table instead of writing a stream.

Example:
    >>> class Enricher(Processor):  # doctest: +SKIP
    ...     lookups = {"classifications": "dimension_id"}
    ...     def on_record(self, key, record, ctx):
    ...         row = ctx.lookup("classifications", record["dimension_id"])
    ...         ctx.produce("enriched", {**record, "topic": row and row["topic"]})
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from millrace.config.settings import Settings
from millrace.errors import ProcessorError, ServingError
from millrace.serving.tables import TableSpec, describe_table, lookup_rows

TABLE_PREFIX = "table:"
"""The stream name prefix of productions to serving tables: `table:<name>`."""


class LookupSource(Protocol):
    """Where `ctx.lookup` reads serving tables from."""

    def get(self, table: str, key: Any) -> dict[str, Any] | None:
        """The row of `table` with key `key`, or None."""
        ...

    def prefetch(self, table: str, keys: Iterable[Any]) -> None:
        """Read the rows of `keys` at once, so that the `get` calls that follow hit a cache."""
        ...


class MemoryTables:
    """Serving tables held in dicts: table -> key -> row. For `ProcessorTester`.

    Example:
        >>> MemoryTables({"cls": {"d1": {"topic": "cats"}}}).get("cls", "d1")
        {'topic': 'cats'}
    """

    def __init__(self, tables: Mapping[str, Mapping[Any, Mapping[str, Any]]]) -> None:
        self.tables = {name: dict(rows) for name, rows in tables.items()}

    def get(self, table: str, key: Any) -> dict[str, Any] | None:
        """The row of `table` with key `key`, or None; `ProcessorError` for an unknown table."""
        rows = self.tables.get(table)
        if rows is None:
            raise _unknown(table, sorted(self.tables))
        row = rows.get(tuple(key) if isinstance(key, list) else key)
        return None if row is None else dict(row)

    def prefetch(self, table: str, keys: Iterable[Any]) -> None:
        """Nothing to fetch: the rows are in memory."""
        if table not in self.tables:
            raise _unknown(table, sorted(self.tables))


class ServingLookups:
    """Serving tables in Redis at `url`, through each executor's cache of age `max_age_s`.

    Example:
        >>> ServingLookups(settings.redis, 10.0).get("classifications", "d1")  # doctest: +SKIP
        {'dimension_id': 'd1', 'topic': 'cats'}
    """

    def __init__(self, url: str, max_age_s: float) -> None:
        self.url = url
        self.max_age_s = max_age_s
        self._specs: dict[str, TableSpec] = {}

    def get(self, table: str, key: Any) -> dict[str, Any] | None:
        """The row of `table` with key `key`, or None."""
        return lookup_rows(self.url, self._spec(table), [key], max_age_s=self.max_age_s)[0]

    def prefetch(self, table: str, keys: Iterable[Any]) -> None:
        """Read the rows of `keys` not in the cache, in one MGET."""
        lookup_rows(self.url, self._spec(table), list(keys), max_age_s=self.max_age_s)

    def _spec(self, table: str) -> TableSpec:
        spec = self._specs.get(table)
        if spec is None:
            spec = self._specs[table] = _described(self.url, table)
        return spec

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "max_age_s": self.max_age_s, "_specs": {}}


_source: LookupSource | None = None


@contextmanager
def using(source: LookupSource | None) -> Iterator[None]:
    """Make `source` the lookup source of the callbacks run inside the block."""
    global _source
    previous, _source = _source, source
    try:
        yield
    finally:
        _source = previous


def use(source: LookupSource | None) -> None:
    """Make `source` the lookup source of this process from now on (a Spark worker's)."""
    global _source
    _source = source


def lookup(table: str, key: Any) -> dict[str, Any] | None:
    """The row of serving table `table` with key `key` from the source in force, or None."""
    if _source is None:
        raise ProcessorError(
            f"ctx.lookup({table!r}, ...) has no serving tables to read here",
            hint="on Spark the runtime provides them; in ProcessorTester pass tables={...}",
        )
    return _source.get(table, key)


def prefetch(lookups: Mapping[str, str], values: Iterable[Mapping[str, Any]]) -> None:
    """Fetch, per table of `lookups` (table -> record field), the keys the records hold."""
    if _source is None or not lookups:
        return
    records = list(values)
    for table, field in lookups.items():
        keys = {record.get(field) for record in records} - {None}
        if keys:
            _source.prefetch(table, keys)


def require_tables(url: str, tables: Iterable[str]) -> None:
    """`ProcessorError` unless every table exists in the Redis at `url` (checked at start)."""
    for table in tables:
        _described(url, table)


def _described(url: str, table: str) -> TableSpec:
    try:
        return describe_table(Settings(redis_url=url), table)
    except ServingError as error:
        raise ProcessorError(error.message, hint=error.hint) from None


def _unknown(table: str, known: list[str]) -> ProcessorError:
    return ProcessorError(
        f"serving table {table!r} does not exist",
        hint=f"known tables: {', '.join(known) or 'none'}; give the tester tables={{...}}",
    )
