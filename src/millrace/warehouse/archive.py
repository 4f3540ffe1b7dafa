"""Archiving streams into the warehouse, and reading the archives back.

`start_archive` runs a streaming query that copies a stream's records, as the bus stored
them, into its Delta table in the warehouse (see `millrace.warehouse.layout`). Delta's
streaming sink commits each micro-batch with the query's id and batch id, and the checkpoint
records the Kafka offsets of each batch, so a job that is stopped or killed and started again
writes every record exactly once. `read_archive` reads an archive table as Kafka's own batch
reader would read the stream; `archive_view` presents it for people, with text values.
"""

from __future__ import annotations

from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery

from millrace.bus.streams import require_stream
from millrace.config.workspace import ARCHIVE_APP, Workspace
from millrace.engine import kafka
from millrace.engine.event_time import carried_time, event_time_column
from millrace.engine.headers import record_id_column
from millrace.engine.low_watermark import marker_columns
from millrace.engine.triggers import records_cap
from millrace.warehouse.delta import spark_read, spark_stream_writer, spark_version
from millrace.warehouse.layout import ARCHIVE_COLUMNS, EVENT_DATE, require_archive


def start_archive(
    spark: SparkSession,
    workspace: Workspace,
    stream: str,
    *,
    available_now: bool = False,
    time_field: str | None = None,
    max_records_per_batch: int | None = None,
) -> StreamingQuery:
    """Start the query `_archive.<stream>` that writes `stream` exactly-once to its archive.

    It starts where its checkpoint left off, or at the first record the stream keeps. With
    `available_now` it stops once it has archived what the stream holds when it starts.
    `time_field` names the value's field that holds the event time (by default the
    `events.time_field` setting, which the publisher uses too): its UTC date is the record's
    `event_date`; without the field, the date of the time its `time` header carries, else of
    its arrival; the date it reached the bus when it holds no readable time.
    `max_records_per_batch` caps the records of each micro-batch (by default
    `engine.triggers.records_cap`'s). A record the bus dropped
    (its retention passed) before the job archived it stops the query with Spark's data-loss
    error, rather than leaving a silent gap in the archive.
    """
    require_stream(workspace.settings, stream)
    raw = kafka.read_stream(
        spark,
        workspace.settings,
        stream,
        max_records_per_batch=records_cap(workspace.settings, max_records_per_batch, None),
    )
    time_field = time_field or workspace.settings.events_time_field
    raw_time = F.get_json_object(F.col("value").cast("string"), f"$.{time_field}")
    event_time = event_time_column(
        raw_time, F.coalesce(carried_time(F.col("headers")), F.col("timestamp"))
    )
    # A watermark marker is no record (`millrace.bus.markers`): it is not archived.
    marker_ms = marker_columns(F.col("value"), F.col("headers"))[0]
    records = raw.where(marker_ms.isNull()).select(
        *ARCHIVE_COLUMNS[:-1],
        F.to_date(F.coalesce(event_time, F.col("timestamp"))).alias(EVENT_DATE),
    )
    writer = (
        spark_stream_writer(records, partition_by=EVENT_DATE)
        .queryName(f"{ARCHIVE_APP}.{stream}")
        .option("checkpointLocation", str(workspace.archive_checkpoint(stream)))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start(str(workspace.archive(stream)))


def read_archive(spark: SparkSession, workspace: Workspace, stream: str) -> DataFrame:
    """The archived records of `stream`, with the columns of Kafka's reader (and `event_date`).

    The read is fixed to the table's version when it is called, so every action on the
    DataFrame sees the same records while the archive job goes on writing. Raises
    `WarehouseError` when the stream has no archive.
    """
    path = require_archive(workspace, stream)
    return spark_read(spark, path, version=spark_version(spark, path))


RecordSource = Literal["bus", "warehouse"]
"""Where a batch run reads its inputs' records: the bus, or their archives (a backfill)."""


def read_records(
    spark: SparkSession, workspace: Workspace, stream: str, source: RecordSource
) -> DataFrame:
    """Every record of `stream` as Kafka's batch reader gives them, from the bus or its archive.

    From the bus, what the stream holds now (`millrace.engine.kafka.read_now`); from the
    warehouse, its archive as `read_archive` gives it. Raises `StreamNotFoundError` for a
    stream the bus does not have, and `WarehouseError` for one without an archive.
    """
    if source == "warehouse":
        return read_archive(spark, workspace, stream)
    return kafka.read_now(spark, workspace.settings, stream)


def archive_view(spark: SparkSession, workspace: Workspace, stream: str) -> DataFrame:
    """The archive of `stream` for reading by people: text key and value, id, bucket, time.

    Columns: `record_id`, `key` and `value` as strings (so `get_json_object` and `from_json`
    work on `value`), `headers` as a map of strings, `bucket`, `offset`, `timestamp` (the
    record's bus time) and `event_date`.
    """
    return read_archive(spark, workspace, stream).select(
        record_id_column().alias("record_id"),
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.map_from_entries(
            F.transform(
                "headers",
                lambda header: F.struct(header["key"], header["value"].cast("string")),
            )
        ).alias("headers"),
        F.col("partition").alias("bucket"),
        "offset",
        "timestamp",
        EVENT_DATE,
    )
