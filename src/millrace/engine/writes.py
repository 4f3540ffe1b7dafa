"""Writing DataFrames back to the bus: a streaming query's output, or one batch of rows.

`write_stream` starts a query that writes a DataFrame to a stream, or to a stream named per
row; `write_batch` writes a DataFrame that is not streaming, such as one micro-batch. Each
record is a JSON object of the DataFrame's columns but the record's metadata
(`RECORD_COLUMNS`, `RECORD_TIME`), with its id in its `id` header and its event time in its
`time` header (`written_time`), which a reader takes when the value has no time field of its
name. A record without a key goes to a bucket chosen by its id (`bucket_by_id`), unless its
stream is named per row.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery

from millrace.bus.markers import WRITER_HEADER
from millrace.bus.streams import require_stream
from millrace.config.workspace import Workspace
from millrace.engine import kafka
from millrace.engine.streams import RECORD_COLUMNS, RECORD_TIME
from millrace.engine.triggers import Trigger
from millrace.records import ID_HEADER, TIME_HEADER


def write_stream(
    records: DataFrame,
    workspace: Workspace,
    app: str,
    query: str,
    stream: str | Column,
    *,
    key: str | None = None,
    output_mode: str = "append",
    available_now: bool = False,
    trigger: Trigger | None = None,
    marked: bool = False,
) -> StreamingQuery:
    """Start a query named `<app>.<query>` that writes `records` to a stream as JSON.

    `stream` is a stream name, or a column naming each row's stream (those streams must
    exist). `key` names the column used as the routing key. The value holds every column but
    the `RECORD_COLUMNS` and `RECORD_TIME`; the `id` header is the `record_id` column when
    there is one, and the `time` header the event time `written_time` gives each record.
    `trigger`, when given, sets when micro-batches run (`available_now` is its shorthand).
    `marked` says that app `app` publishes its output watermark to `stream` as markers
    (`millrace.engine.output_watermark`): each record then carries the app's name in its
    `writer` header, so that readers follow the markers rather than the records' times.
    """
    buckets = None
    if isinstance(stream, str):
        buckets = require_stream(workspace.settings, stream)
        stream = F.lit(stream)
    output = _as_kafka_records(records, stream, key, None, buckets, app if marked else None)
    writer = (
        kafka.stream_writer(output, workspace.settings)
        .queryName(f"{app}.{query}")
        .outputMode(output_mode)
        .option("checkpointLocation", str(workspace.checkpoint(app, query)))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger is not None:
        writer = trigger.apply(writer, f"{app}.{query}", foreach_batch=False)
    return writer.start()


def write_batch(
    records: DataFrame,
    workspace: Workspace,
    stream: str,
    *,
    key: Column | None = None,
    record_id: Column | None = None,
    writer: str | None = None,
) -> None:
    """Write a DataFrame that is not streaming, such as one micro-batch, to `stream`.

    `record_id` gives each record's id (default: the `record_id` column, else a random one);
    a deterministic id lets readers drop a batch written twice. `writer` names the app whose
    markers tell the records' progress, as `write_stream`'s `marked` does.
    """
    buckets = require_stream(workspace.settings, stream)
    kafka.write(
        _as_kafka_records(records, F.lit(stream), key, record_id, buckets, writer),
        workspace.settings,
    )


def _as_kafka_records(
    records: DataFrame,
    stream: Column,
    key: str | Column | None,
    record_id: Column | None,
    buckets: int | None,
    writer: str | None,
) -> DataFrame:
    """The columns Spark's Kafka sink writes: topic, key, JSON value, headers, and bucket.

    The headers are the id, the `writer` when given, and, when `written_time` finds one, the
    record's event time.

    The bucket is set for a record without a key when the stream's bucket count is known
    (`bucket_by_id`); a keyed record goes to its key's bucket. (A generated `uuid()` id is
    drawn again for the hash: as even a spread, not tied to the id.)
    """
    if record_id is None:
        record_id = F.col("record_id") if "record_id" in records.columns else F.expr("uuid()")
    if isinstance(key, str):
        key = F.col(key)
    value_columns = [name for name in records.columns if name not in (*RECORD_COLUMNS, RECORD_TIME)]
    headers = F.array(
        F.struct(F.lit(ID_HEADER).alias("key"), record_id.cast("binary").alias("value"))
    )
    if writer is not None:
        headers = F.array_append(
            headers,
            F.struct(
                F.lit(WRITER_HEADER).alias("key"), F.lit(writer).cast("binary").alias("value")
            ),
        )
    time = written_time(records)
    if time is not None:
        time_text = F.unix_millis(time).cast("string").cast("binary")
        timed = F.array_append(
            headers, F.struct(F.lit(TIME_HEADER).alias("key"), time_text.alias("value"))
        )
        headers = F.when(time.isNull(), headers).otherwise(timed)
    columns = [
        stream.alias("topic"),
        (key.cast("string") if key is not None else F.lit(None).cast("string")).alias("key"),
        F.to_json(F.struct(*value_columns)).alias("value"),
        headers.alias("headers"),
    ]
    if buckets is not None:
        columns.append(bucket_by_id(record_id, key, F.lit(buckets)).alias("partition"))
    return records.select(*columns)


def written_time(records: DataFrame) -> Column | None:
    """Each record's event time as a writer carries it: `RECORD_TIME`, else its window's.

    A windowed result's time is its window's last millisecond (`window_end` minus 1 ms, as
    in Beam and Flink): it falls in the same window downstream, and is not before the
    watermark that closed the window. None when `records` has neither column, and the
    records are then known by their arrival time.
    """
    types = dict(records.dtypes)
    if types.get(RECORD_TIME) == "timestamp":
        return F.col(RECORD_TIME)
    if types.get("window_end") == "timestamp":
        return F.timestamp_millis(F.unix_millis("window_end") - 1)
    return None


def bucket_by_id(record_id: Column, key: Column | None, buckets: Column) -> Column:
    """The bucket Kafka's sink is to write a record without a key to: a hash of its id.

    Null for a keyed record, which Kafka's producer places by its key's hash, and where
    `buckets` is null. Left to Kafka's producer, records without a key go to one bucket until
    its batch fills, and under load to the bucket with the shorter queue: tens of thousands
    in a row to one bucket were seen. A reader's watermark is the largest event time over all
    buckets, so the records of the bucket left behind would come late. Chosen by a hash of
    the record's id, each record's bucket is drawn anew, so the buckets advance together; and
    a copy that a re-run writes lands where its original did.
    """
    by_id = F.pmod(F.xxhash64(record_id), buckets).cast("int")
    unkeyed = F.lit(True) if key is None else key.isNull()
    return F.when(unkeyed, by_id)
