"""Delta I/O: millrace's Delta tables read without Spark (delta-rs), and by Spark.

This module is the one place that opens a Delta table. Spark writes millrace's Delta tables
(result tables, archives) and reads them in its jobs through the `spark_` functions at the
end, which load Spark's Delta client on first use, so that the readers without a JVM do not:
`millrace query`, the HTTP service and the demo's live view read rows with delta-rs (the
`deltalake` package), and a SQL app's driver reads which micro-batch it last appended from
the commits' metadata and deletes the files that newer versions replaced. `is_delta_table`
is the one test of whether a folder holds a table.

A scan takes a pyarrow filter and the columns it needs, so delta-rs skips the files and row
groups whose statistics rule rows out and reads only what matches. A table under `hdfs://`
is read whole by delta-rs's own engine instead and filtered in memory: pyarrow has no
filesystem of its own for HDFS without a JVM, and one of Python callbacks aborts the reading
process at exit (`millrace.config.storage.arrow_filesystem`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from millrace.config.storage import StoragePath, arrow_filesystem, delta_storage_options
from millrace.errors import WarehouseError

if TYPE_CHECKING:
    # Only a type here; importing pyarrow.dataset loads pandas, which `millrace ps` must not.
    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

# Reader features of Delta's protocol that leave a data file's rows as Parquet reads them.
_PLAIN_PARQUET_FEATURES = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
# How many of the newest commits are read first for a commit's metadata: the one looked for
# is nearly always among them, and a table's whole history can be thousands of commits.
_RECENT_COMMITS = 32


class DeltaSnapshot:
    """The latest version of one Delta table, as `open_delta_table` found it.

    Example:
        >>> from deltalake import write_deltalake
        >>> rows = pa.table({"category": ["movies", "music", "movies"], "n": [3, 1, 2]})
        >>> write_deltalake(str(tmp_path / "per_5min"), rows)
        >>> snapshot = open_delta_table(tmp_path / "per_5min")
        >>> import pyarrow.dataset as ds
        >>> snapshot.scan(ds.field("category") == "movies").num_rows
        2
    """

    def __init__(self, path: StoragePath, table: DeltaTable) -> None:
        self.path = path
        self._table = table
        self._rows: pa.Table | None = None

    @functools.cached_property
    def _dataset(self) -> ds.Dataset | None:
        """The table as pyarrow's dataset, None under `hdfs://` (see the module).

        Made on first use: pyarrow's datasets import pandas, which `millrace sql` need not.
        """
        filesystem = arrow_filesystem(self.path)
        return None if filesystem is None else self._table.to_pyarrow_dataset(filesystem=filesystem)

    @property
    def schema(self) -> pa.Schema:
        """The table's columns as pyarrow types (Delta's timestamps as UTC microseconds)."""
        if self._dataset is not None:
            return self._dataset.schema
        # pyarrow takes any schema of Arrow's C interface (delta-rs gives arro3's); its stubs
        # know only fields.
        return pa.schema(self._table.schema().to_arrow())  # type: ignore[arg-type]

    def file_maxima(self, column: str) -> list[Any]:  # Any: the column's values, of its type
        """Each data file's greatest value of `column`, as the statistics in the log record it.

        Files whose statistics leave the column out are left out; Spark records them for the
        first 32 columns. Times come as UTC datetimes.

        Example:
            >>> from deltalake import write_deltalake
            >>> write_deltalake(str(tmp_path / "counts"), pa.table({"n": [3, 1, 2]}))
            >>> open_delta_table(tmp_path / "counts").file_maxima("n")
            [3]
        """
        files = self._add_actions()
        if f"max.{column}" not in files.column_names:
            return []
        return [value for value in files.column(f"max.{column}").to_pylist() if value is not None]

    @property
    def size_bytes(self) -> int:
        """The bytes of the table's data files, as its log records them."""
        files = self._add_actions()
        return sum(int(size or 0) for size in files.column("size_bytes").to_pylist())

    def parquet_files(self) -> list[str] | None:
        """The paths of the table's data files, when reading them as Parquet gives its rows.

        That is for a table in a local folder whose protocol asks a reader for nothing beyond
        Parquet (no deletion vectors, no column mapping); None otherwise, and the rows are read
        through `arrow_rows`. Partition columns are in the paths, as `name=value` folders.

        Example:
            >>> from deltalake import write_deltalake
            >>> write_deltalake(str(tmp_path / "counts"), pa.table({"n": [3, 1, 2]}))
            >>> [file] = open_delta_table(tmp_path / "counts").parquet_files()
            >>> Path(file).suffix
            '.parquet'
        """
        protocol = self._table.protocol()
        features = set(protocol.reader_features or ())
        plain = protocol.min_reader_version == 1 or (
            protocol.min_reader_version == 3 and features <= _PLAIN_PARQUET_FEATURES
        )
        if not (plain and isinstance(self.path, Path)):
            return None
        return [
            unquote(urlparse(uri).path) if "://" in uri else uri for uri in self._table.file_uris()
        ]

    @property
    def partition_columns(self) -> list[str]:
        """The table's partition columns, whose values are in its files' folders."""
        return list(self._table.metadata().partition_columns)

    def arrow_rows(self) -> ds.Dataset | pa.Table:
        """The rows for an engine that reads Arrow (DuckDB), in the types of `schema`.

        A dataset, from which the engine reads the files and columns its filters leave;
        under `hdfs://` every row, read once by delta-rs's own engine (see the module).

        Example:
            >>> from deltalake import write_deltalake
            >>> write_deltalake(str(tmp_path / "counts"), pa.table({"n": [3, 1, 2]}))
            >>> open_delta_table(tmp_path / "counts").arrow_rows().count_rows()
            3
        """
        try:
            return self._dataset if self._dataset is not None else self._all_rows()
        except (DeltaError, OSError, pa.ArrowException) as error:
            raise _unreadable(self.path, error) from None

    def scan(
        self, where: ds.Expression | None = None, *, columns: list[str] | None = None
    ) -> pa.Table:
        """The rows that match `where` (every row without it), with `columns` (or all).

        Example:
            >>> from deltalake import write_deltalake
            >>> rows = pa.table({"window_start": [1, 2], "n": [1, 5]})
            >>> write_deltalake(str(tmp_path / "counts"), rows)
            >>> snapshot = open_delta_table(tmp_path / "counts")
            >>> import pyarrow.dataset as ds
            >>> snapshot.scan(ds.field("n") > 1, columns=["window_start"]).to_pylist()
            [{'window_start': 2}]
        """
        try:
            if self._dataset is not None:
                return self._dataset.to_table(columns=columns, filter=where)
            rows = self._all_rows()
            matching = rows if where is None else rows.filter(where)
            return matching if columns is None else matching.select(columns)
        except (DeltaError, OSError, pa.ArrowException) as error:
            raise _unreadable(self.path, error) from None

    def _add_actions(self) -> pa.Table:
        """The log's entry of each data file: its path, size, partition values, statistics."""
        # Read as a stream: `pa.table` asks first whether it was given pandas' DataFrame, and
        # that imports pandas, more than the rest of `millrace sql` takes to answer.
        return pa.RecordBatchReader.from_stream(
            self._table.get_add_actions(flatten=True)
        ).read_all()

    def _all_rows(self) -> pa.Table:
        """Every row, read once by delta-rs's own engine, in the types of `schema`."""
        if self._rows is None:
            schema = self.schema
            self._rows = pa.table(self._table.scan()).select(schema.names).cast(schema)
        return self._rows


def open_delta_table(path: StoragePath) -> DeltaSnapshot | None:
    """The latest version of the Delta table at `path`; None when there is no table there.

    Raises `WarehouseError` for a table this reader cannot read (a log or files it cannot
    parse, or a feature of the Delta protocol that delta-rs does not implement).

    Example:
        >>> open_delta_table(Path("/nowhere")) is None
        True
    """
    if not is_delta_table(path):
        return None
    try:
        return DeltaSnapshot(path, _delta_table(path))
    except (DeltaError, OSError, pa.ArrowException) as error:
        raise _unreadable(path, error) from None


def is_delta_table(path: StoragePath) -> bool:
    """Whether `path` holds a Delta table with at least one commit.

    Example:
        >>> is_delta_table(Path("/nowhere"))
        False
    """
    if not path.is_dir():
        return False
    try:
        return DeltaTable.is_deltatable(str(path), _storage_options(path))
    except (DeltaError, OSError) as error:
        raise _unreadable(path, error) from None


def newest_commit_metadata(path: StoragePath, prefix: str) -> str | None:
    """The `userMetadata` of the newest commit of the table at `path` that starts with `prefix`.

    None when there is no table, or no commit has such metadata. Spark writes a commit's
    metadata from the writer's `userMetadata` option.

    Example:
        >>> from deltalake import CommitProperties, write_deltalake
        >>> batch_41 = {"userMetadata": "millrace:top_events.per_5min:batch:41"}
        >>> write_deltalake(str(tmp_path / "per_5min"), pa.table({"n": [1]}),
        ...                 commit_properties=CommitProperties(custom_metadata=batch_41))
        >>> newest_commit_metadata(tmp_path / "per_5min", "millrace:top_events.per_5min:batch:")
        'millrace:top_events.per_5min:batch:41'
    """
    if not is_delta_table(path):
        return None
    try:
        table = _delta_table(path)
        for limit in (_RECENT_COMMITS, None):
            commits = table.history(limit)
            for commit in commits:
                metadata = commit.get("userMetadata") or ""
                if metadata.startswith(prefix):
                    return metadata
            if len(commits) < _RECENT_COMMITS:
                return None
    except (DeltaError, OSError) as error:
        raise _unreadable(path, error) from None
    return None


def delete_replaced_files(path: StoragePath, older_than_ms: int) -> int:
    """Delete the files of the Delta table at `path` that versions replaced; how many.

    Those replaced more than `older_than_ms` ago (rounded up to whole hours) go: Delta's
    VACUUM, run by delta-rs in milliseconds where Spark's runs jobs for seconds. A reader of
    a version older than that may then find its files gone. Raises `WarehouseError` when the
    table cannot be read or changed.

    Example:
        >>> from deltalake import write_deltalake
        >>> write_deltalake(str(tmp_path / "t"), pa.table({"n": [1]}))
        >>> write_deltalake(str(tmp_path / "t"), pa.table({"n": [2]}), mode="overwrite")
        >>> delete_replaced_files(tmp_path / "t", 0)
        1
    """
    if not is_delta_table(path):
        return 0
    hours = -(-older_than_ms // 3_600_000)
    try:
        # `full`: also the files no version names, which Spark's merges leave behind too.
        deleted = _delta_table(path).vacuum(
            retention_hours=hours, dry_run=False, enforce_retention_duration=False, full=True
        )
    except (DeltaError, OSError) as error:
        raise _unreadable(path, error) from None
    return len(deleted)


def _delta_table(path: StoragePath) -> DeltaTable:
    return DeltaTable(str(path), storage_options=_storage_options(path))


def _storage_options(path: StoragePath) -> dict[str, str] | None:
    """delta-rs's options to reach `path`: None on the disk, the S3 endpoint and keys on S3."""
    return None if isinstance(path, Path) else delta_storage_options(path.settings)


def _unreadable(path: StoragePath, error: Exception) -> WarehouseError:
    return WarehouseError(
        f"cannot read the Delta table at {path}: {error}",
        hint='Spark reads every Delta table: `millrace sql "SELECT * FROM <app>__<table>"`',
    )


def spark_read(spark: SparkSession, path: StoragePath, *, version: int | None = None) -> DataFrame:
    """The Delta table at `path` as a Spark DataFrame: its latest version, or `version`."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(path))


def spark_version(spark: SparkSession, path: StoragePath) -> int:
    """The latest version of the Delta table at `path`, as Spark's Delta client reads it."""
    # Loaded on use, here and below: the readers without Spark import this module.
    from delta.tables import DeltaTable as SparkDeltaTable

    newest = SparkDeltaTable.forPath(spark, str(path)).history(1).collect()[0]
    return int(newest["version"])


def spark_append(rows: DataFrame, path: StoragePath, *, metadata: str | None = None) -> None:
    """Append `rows` to the Delta table at `path` (made by the first append).

    `metadata` is the commit's `userMetadata`, which `newest_commit_metadata` reads back.
    """
    writer = rows.write.format("delta").mode("append")
    if metadata is not None:
        writer = writer.option("userMetadata", metadata)
    writer.save(str(path))


def spark_merge(rows: DataFrame, path: StoragePath, keys: Sequence[str]) -> None:
    """Merge `rows` into the Delta table at `path` by `keys`: update a match, insert the rest.

    Keys match when equal or both NULL. The first rows make the table: there is nothing to
    merge them with, and a merge costs several Spark jobs more than a write. No keys match
    no row, so every row is inserted.
    """
    from delta.tables import DeltaTable as SparkDeltaTable

    if not is_delta_table(path):
        rows.write.format("delta").save(str(path))
        return
    matches = " AND ".join(f"t.`{key}` <=> u.`{key}`" for key in keys) or "false"
    (
        SparkDeltaTable.forPath(rows.sparkSession, str(path))
        .alias("t")
        .merge(rows.alias("u"), matches)
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


def spark_stream_writer(records: DataFrame, *, partition_by: str | None = None) -> DataStreamWriter:
    """The Delta sink of a streaming query writing `records`, appending each micro-batch.

    Delta's sink commits each micro-batch with the query's id and batch id, so a batch run
    again after a crash is not written twice. The caller names the query, its checkpoint
    and trigger, and starts it on the table's path.
    """
    writer = records.writeStream.format("delta").outputMode("append")
    if partition_by is not None:
        writer = writer.partitionBy(partition_by)
    return writer
