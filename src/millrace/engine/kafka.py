"""Spark's Kafka readers and writers: the one place that assembles them.

Every Spark read of a stream and every Spark write to one goes through here, connected as
`millrace.bus.client_config.spark_kafka_options` says, with record headers read (they carry
a record's id, time, writer and watermark) unless asked otherwise, so that a source or a
sink reads the same way wherever an app, a router, a ticker or the archive uses it:

- `read_stream`: a streaming read of a stream, every bucket by one source;
- `read_range`: a batch read of a fixed range of offsets;
- `read_now`: a batch read of every record a stream holds now, fixed at the call;
- `stream_writer` and `write`: a streaming query's Kafka sink, and a batch write.
"""

from __future__ import annotations

import json
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

from millrace.bus.client_config import spark_kafka_options
from millrace.bus.streams import describe_stream
from millrace.config.settings import Settings

StartingOffsets = Literal["earliest", "latest"]
"""Where a streaming read without a checkpoint starts: a stream's first records, or its end."""

_STREAM_LINGER_MS = "5"
# A task's read of a bucket ends with a fetch past the range it reads, which the broker holds
# for Kafka's `fetch.max.wait.ms` (500 ms by default) waiting for records not yet there: half
# a second per bucket and micro-batch, 18 s of a 64-bucket read that took 3 s at 10 ms.
_READER_FETCH_WAIT_MS = "10"


def read_stream(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    starting_offsets: StartingOffsets = "earliest",
    max_records_per_batch: int | None = None,
    fail_on_data_loss: bool = True,
    headers: bool = True,
) -> DataFrame:
    """`stream`'s records as a streaming DataFrame of Kafka's columns.

    All its buckets are read by the one source. `max_records_per_batch` caps what each
    micro-batch reads over all the buckets; `fail_on_data_loss=False` skips records that the
    stream's retention removed before they were read, instead of stopping the query;
    `headers=False` leaves the `headers` column out (millrace's control streams carry none).
    """
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings))
        .option("kafka.fetch.max.wait.ms", _READER_FETCH_WAIT_MS)
        .option("subscribe", stream)
        .option("startingOffsets", starting_offsets)
    )
    if headers:
        reader = reader.option("includeHeaders", "true")
    if max_records_per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_records_per_batch)
    if not fail_on_data_loss:
        reader = reader.option("failOnDataLoss", "false")
    return reader.load()


def read_range(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """The records of `stream` from `starts` (default: its first) up to `ends`, in batch.

    `starts` and `ends` give an offset per bucket; with `starts`, only its buckets are read.
    `fail_on_data_loss=False` skips the records that the stream's retention removed.
    """
    reader = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(settings))
        .option("kafka.fetch.max.wait.ms", _READER_FETCH_WAIT_MS)
    )
    if starts is None:
        reader = reader.option("subscribe", stream).option("startingOffsets", "earliest")
    else:
        reader = reader.option("assign", json.dumps({stream: sorted(starts)})).option(
            "startingOffsets", _offsets_json(stream, starts)
        )
    reader = reader.option("endingOffsets", _offsets_json(stream, ends))
    if not fail_on_data_loss:
        reader = reader.option("failOnDataLoss", "false")
    return reader.option("includeHeaders", "true").load()


def read_now(spark: SparkSession, settings: Settings, stream: str) -> DataFrame:
    """Every record `stream` holds now, in batch: from its first to its end at this call.

    The end offsets are fixed here, not at each action, so that everything derived from the
    read (dead letters, results, outputs) comes from the same records. Raises
    `StreamNotFoundError` for a stream that does not exist.
    """
    ends = {
        bucket.bucket: bucket.end_offset for bucket in describe_stream(settings, stream).buckets
    }
    return read_range(spark, settings, stream, ends=ends)


def stream_writer(records: DataFrame, settings: Settings) -> DataStreamWriter:
    """The Kafka sink of a streaming query writing `records` (topic, key, value, headers...).

    The caller names the query, its output mode, checkpoint and trigger. The producer waits
    up to 5 ms to fill a batch, which a sink writing every micro-batch at once gains from.
    """
    return (
        records.writeStream.format("kafka")
        .options(**spark_kafka_options(settings))
        .option("kafka.linger.ms", _STREAM_LINGER_MS)
    )


def write(records: DataFrame, settings: Settings, *, topic: str | None = None) -> None:
    """Write `records`, a DataFrame that is not streaming, to Kafka.

    Each row names its topic in a `topic` column, unless `topic` names one for all.
    """
    # Kafka's batch sink is Spark's DataSource V2 sink (`spark_config`), which appends only.
    writer = records.write.format("kafka").mode("append").options(**spark_kafka_options(settings))
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.save()


def _offsets_json(stream: str, offsets: dict[int, int]) -> str:
    return json.dumps({stream: {str(bucket): offset for bucket, offset in offsets.items()}})
