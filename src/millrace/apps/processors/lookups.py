"""The lookup source of processors on Spark: serving tables in Redis, through a cache.

`ServingLookups` is the `millrace.processor.lookups.LookupSource` the processor runtimes hand
the execution core; `require_tables` checks at start that the tables a processor declares
exist. The core itself reads no Redis: it gets its source passed in.
"""

from __future__ import annotations

from collections.abc import Iterable

from millrace.config.settings import Settings
from millrace.errors import ProcessorError, ServingError
from millrace.records import JsonObject
from millrace.serving.tables import TableSpec, describe_table, lookup_rows


class ServingLookups:
    """Serving tables in Redis at `url`, through each executor's cache of age `max_age_s`.

    It travels to Spark's executors by pickle, without its table descriptions, which each
    executor reads again on first use.
    """

    def __init__(self, url: str, max_age_s: float) -> None:
        self.url = url
        self.max_age_s = max_age_s
        self._specs: dict[str, TableSpec] = {}

    def get(self, table: str, key: object) -> JsonObject | None:
        """The row of `table` with key `key`, or None."""
        return lookup_rows(self.url, self._spec(table), [key], max_age_s=self.max_age_s)[0]

    def prefetch(self, table: str, keys: Iterable[object]) -> None:
        """Read the rows of `keys` not in the cache, in one MGET."""
        lookup_rows(self.url, self._spec(table), list(keys), max_age_s=self.max_age_s)

    def _spec(self, table: str) -> TableSpec:
        spec = self._specs.get(table)
        if spec is None:
            spec = self._specs[table] = _described(self.url, table)
        return spec

    def __getstate__(self) -> dict[str, object]:
        return {"url": self.url, "max_age_s": self.max_age_s, "_specs": {}}


def require_tables(url: str, tables: Iterable[str]) -> None:
    """`ProcessorError` unless every table exists in the Redis at `url` (checked at start)."""
    for table in tables:
        _described(url, table)


def _described(url: str, table: str) -> TableSpec:
    try:
        return describe_table(Settings(redis_url=url), table)
    except ServingError as error:
        raise ProcessorError(error.message, hint=error.hint) from None
