"""Archiving streams into the warehouse, and reading the archives back.

`start_archive` runs a streaming query that copies a stream's records, as the bus stored
them, into its Delta table in the warehouse (see `millrace.warehouse.layout`). Delta's
streaming sink commits each micro-batch with the query's id and batch id, and the checkpoint
records the Kafka offsets of each batch, so a job that is stopped or killed and started again
writes every record exactly once. `read_archive` reads an archive table as Kafka's own batch
reader would read the stream; `archive_view` presents it for people, with text values.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.client_config import spark_kafka_options
from millrace.bus.streams import require_stream
from millrace.config.workspace import Workspace
from millrace.engine.low_watermark import marker_columns
from millrace.warehouse.layout import (
    ARCHIVE_APP,
    ARCHIVE_COLUMNS,
    EVENT_DATE,
    archive_checkpoint,
    archive_path,
    require_archive,
)


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
    `max_records_per_batch` caps the records of each micro-batch. A record the bus dropped
    (its retention passed) before the job archived it stops the query with Spark's data-loss
    error, rather than leaving a silent gap in the archive.
    """
    require_stream(workspace.settings, stream)
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(workspace.settings))
        .option("subscribe", stream)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_records_per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_records_per_batch)
    # Imported here: `streams` reads archives through this module.
    from millrace.engine.streams import carried_time, event_time_column

    time_field = time_field or workspace.settings.events_time_field
    raw_time = F.get_json_object(F.col("value").cast("string"), f"$.{time_field}")
    event_time = event_time_column(
        raw_time, F.coalesce(carried_time(F.col("headers")), F.col("timestamp"))
    )
    raw = reader.load()
    # A watermark marker is no record (`millrace.bus.markers`): it is not archived.
    marker_ms = marker_columns(F.col("value"), F.col("headers"))[0]
    records = raw.where(marker_ms.isNull()).select(
        *ARCHIVE_COLUMNS[:-1],
        F.to_date(F.coalesce(event_time, F.col("timestamp"))).alias(EVENT_DATE),
    )
    writer = (
        records.writeStream.format("delta")
        .queryName(f"{ARCHIVE_APP}.{stream}")
        .outputMode("append")
        .partitionBy(EVENT_DATE)
        .option("checkpointLocation", str(archive_checkpoint(workspace, stream)))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start(str(archive_path(workspace, stream)))


def read_archive(spark: SparkSession, workspace: Workspace, stream: str) -> DataFrame:
    """The archived records of `stream`, with the columns of Kafka's reader (and `event_date`).

    The read is fixed to the table's version when it is called, so every action on the
    DataFrame sees the same records while the archive job goes on writing. Raises
    `WarehouseError` when the stream has no archive.
    """
    path = str(require_archive(workspace, stream))
    version = DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
    return spark.read.format("delta").option("versionAsOf", version).load(path)


def archive_view(spark: SparkSession, workspace: Workspace, stream: str) -> DataFrame:
    """The archive of `stream` for reading by people: text key and value, id, bucket, time.

    Columns: `record_id`, `key` and `value` as strings (so `get_json_object` and `from_json`
    work on `value`), `headers` as a map of strings, `bucket`, `offset`, `timestamp` (the
    record's bus time) and `event_date`.
    """
    # Imported here: `streams` reads archives through this module.
    from millrace.engine.streams import record_id_column

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
