"""Writing a SQL app's result table: its rows in Delta, its serving table, its `emit` stream.

A result table is a Delta table under `<workspace>/tables/<app>/<table>` (written through
`millrace.warehouse.delta`), read by `millrace query`, the HTTP API and the demo
(`millrace.warehouse.result_tables`). Mode `final` appends each window once, when the
watermark closes it; mode `updates` merges every change by the table's key (its window
bounds and group columns); the files a merge replaced are deleted once `tables.keep_removed`
has passed. A table that names a serving table (`serve`) upserts its rows into
it, and one that names an `emit` stream writes them there too, each row with an id naming the
result, so that a re-run writes the same ids.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.engine.delivery import run_without_writing
from millrace.engine.writes import write_batch
from millrace.errors import ServingError, SqlError, WarehouseError
from millrace.serving.sink import write_table
from millrace.serving.tables import TableSpec, create_table
from millrace.sql.parser import ResultTable, group_key_columns
from millrace.warehouse.delta import (
    delete_replaced_files,
    newest_commit_metadata,
    spark_append,
    spark_merge,
)

_log = logging.getLogger(__name__)
# Files replaced within `tables.keep_removed` stay; those before are deleted this often (or
# as often as that span, if shorter), so a table holds at most two such spans of them.
_DELETE_REPLACED_EVERY_S = 300.0


class ResultTableWriter:
    """Writes a result table's rows, per micro-batch or per batch run, to Delta and its emit."""

    def __init__(
        self,
        workspace: Workspace,
        app: str,
        table: ResultTable,
        *,
        marked_by: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.app = app
        self.table = table
        self.marked_by = marked_by
        """The app whose markers tell the progress of the emitted rows (`write_batch`'s writer)."""
        self.location = workspace.result_table(app, table.name)
        self.keys = group_key_columns(table.query)
        self.serving: TableSpec | None = None
        self._appended: int | None = None
        """The micro-batch this writer last appended; before its first, read from the table."""
        self._deleted_replaced_at: float | None = None

    def serve(self, rows: DataFrame) -> None:
        """Register the serving table of `serve = '...'`, its columns taken from `rows`.

        The key is the result table's (window bounds and group columns), the values its other
        columns. Raises `SqlError` when a serving table of that name has other columns.
        """
        if self.table.serve is None:
            return
        types = {field.name: field.dataType.simpleString().upper() for field in rows.schema}
        spec = TableSpec(
            self.table.serve,
            tuple((key, types[key]) for key in self.keys),
            tuple((name, kind) for name, kind in types.items() if name not in self.keys),
            parse_duration_ms(self.table.ttl, what="ttl") if self.table.ttl else None,
            None,
            f"sql app {self.app}",
        )
        try:
            self.serving = create_table(self.workspace.settings, spec)
        except ServingError as error:
            raise SqlError(
                f"{self.table.position}: serve = {self.table.serve!r}: {error.message}",
                hint=error.hint,
            ) from None

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write micro-batch `batch_id` of a streaming run: Delta, serving table and `emit`."""
        batch.persist()
        try:
            if self.table.mode == "final":
                if self._appended is None:
                    self._appended = self._last_appended()
                last = self._appended
                if last is not None and batch_id < last:
                    # A batch recomputed after `millrace rollback`: its windows may be in the
                    # table already, so they are merged by key rather than appended twice.
                    self._merge(batch)
                elif last != batch_id:
                    spark_append(batch, self.location, metadata=f"{self._marker}{batch_id}")
                    self._appended = batch_id
                else:
                    run_without_writing(batch)
            else:
                self._merge(batch)
            if self.serving is not None:
                write_table(batch, self.serving, self.workspace.settings.redis)
            if self.table.emit is not None:
                revision = batch_id if self.table.mode == "updates" else None
                self._emit(batch, self.table.emit, revision)
        finally:
            batch.unpersist()
        self._delete_replaced_files()

    def _delete_replaced_files(self) -> None:
        """Delete the files that newer versions replaced `tables.keep_removed` ago.

        Every merge replaces the files it changes, and Delta keeps the old ones for readers
        of older versions until a VACUUM: without one, a table written every second grows
        by thousands of files an hour. A failure is logged, and the app goes on.
        """
        keep_ms = self.workspace.settings.keep_removed_ms
        now = time.monotonic()
        last = self._deleted_replaced_at
        if last is not None and now - last < min(_DELETE_REPLACED_EVERY_S, keep_ms / 1000):
            return
        self._deleted_replaced_at = now
        try:
            delete_replaced_files(self.location, keep_ms)
        except WarehouseError as error:
            _log.warning("replaced files of %s not deleted: %s", self.location, error.message)

    @property
    def _marker(self) -> str:
        return f"millrace:{self.app}.{self.table.name}:batch:"

    def _last_appended(self) -> int | None:
        """The micro-batch last appended to the table, None when none was.

        A batch is run again when the app stopped after appending it but before Spark
        recorded it as done. Each append carries the batch id in its commit's metadata, and
        the newest such commit is read outside Spark: Delta's own `txnAppId`/`txnVersion`
        check costs seconds per batch, as it rebuilds the log's state in Spark jobs.
        """
        metadata = newest_commit_metadata(self.location, self._marker)
        return None if metadata is None else int(metadata.removeprefix(self._marker))

    def write_range(self, rows: DataFrame) -> None:
        """Merge the results of a batch run by key, and emit them with the ids of 'final'."""
        self._merge(rows)
        if self.serving is not None:
            write_table(rows, self.serving, self.workspace.settings.redis)
        if self.table.emit is not None:
            self._emit(rows, self.table.emit, None)

    def _merge(self, batch: DataFrame) -> None:
        spark_merge(batch, self.location, self.keys)

    def _emit(self, batch: DataFrame, stream: str, revision: int | None) -> None:
        # The id names what the row is the result of, so writing it again gives the same id;
        # a streaming 'updates' table adds its micro-batch as the revision, as each batch may
        # revise a result.
        keys = [F.col(key).cast("string") for key in self.keys]
        parts: list[Column] = [F.lit(self.app), F.lit(self.table.name), *keys]
        if revision is not None:
            parts.append(F.lit(str(revision)))
        write_batch(
            batch,
            self.workspace,
            stream,
            key=F.concat_ws("|", *keys) if keys else None,
            record_id=F.concat_ws(":", *parts),
            writer=self.marked_by,
        )
