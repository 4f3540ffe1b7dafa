"""Writing a processor operator's output rows: productions and dead letters to Kafka or Redis.

`write_output_rows` takes the output rows (`millrace.apps.processors.rows`) of one
micro-batch of a streaming run (`millrace.apps.processors.streaming`) or of a whole batch run
(`millrace.apps.processors.batch`), writes the productions and dead letters in one Kafka
write, each with its deterministic id in its `id` header (and a production its event time in
its `time` header), upserts the productions to serving tables (`table:<name>`) into Redis,
hands the buckets' timer reports to the driver, and counts the rows of each kind.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.apps.processors.errors import require_processor_stream, worker_error_text
from millrace.apps.processors.rows import (
    CLOCK,
    DEAD_LETTER,
    NOT_WRITTEN,
    PRODUCTION,
    TIMERS,
)
from millrace.bus.markers import WRITER_HEADER
from millrace.config.workspace import Workspace
from millrace.engine import kafka
from millrace.engine.writes import bucket_by_id
from millrace.errors import ProcessorError, ServingError
from millrace.processor.lookups import TABLE_PREFIX
from millrace.records import ID_HEADER, TIME_HEADER
from millrace.serving.sink import write_table
from millrace.serving.tables import describe_table


def write_output_rows(
    workspace: Workspace,
    name: str,
    stream_buckets: dict[str, int],
    batch: DataFrame,
    *,
    on_clock: Callable[[dict[int, int | None]], None] | None = None,
    on_timers: Callable[[dict[int, int | None], set[str]], None] | None = None,
) -> dict[str, int]:
    """Write the operator's output rows to Kafka in one write; the rows of each kind.

    Two Spark jobs: the first runs the operator into Spark's cache and counts the rows of
    each kind and stream, collecting the buckets' timer reports in the same job (jobs of
    their own for those cost 50 to 150 ms each); the second is the write. An output stream
    that does not exist fails the write before anything is written; `stream_buckets`
    remembers the bucket count of each stream found, so each is looked up once. A production
    without a key goes to a bucket chosen by its id (`bucket_by_id`). `on_clock` is given the
    buckets' earliest processing-time timers the batch reports; `on_timers`, once the batch
    is written, their earliest event-time timers and the streams the batch produced to; with
    it, productions carry the processor's name in their `writer` header, since its markers
    then tell their progress (`millrace.engine.output_watermark`).
    """
    batch.persist()
    try:
        counts = (
            batch.groupBy("kind", "stream")
            .agg(
                F.count(F.lit(1)).alias("count"),
                # collect_list leaves out the nulls: the rows of the other kinds.
                F.collect_list(
                    F.when(F.col("kind").isin(CLOCK, TIMERS), F.struct("key", "value"))
                ).alias("reports"),
            )
            .collect()
        )
        totals = dict.fromkeys((PRODUCTION, DEAD_LETTER, *NOT_WRITTEN), 0)
        for row in counts:
            totals[row["kind"]] += row["count"]
        if on_clock is not None and totals[CLOCK]:
            on_clock(_reports_of(counts, CLOCK))
        produced = {row["stream"] for row in counts if row["kind"] == PRODUCTION}
        tables = _write_table_productions(name, workspace, batch, produced)
        for stream in sorted(produced - tables - set(stream_buckets)):
            try:
                stream_buckets[stream] = require_processor_stream(
                    workspace, stream, f"output of processor {name!r}"
                )
            except ProcessorError as error:
                raise RuntimeError(worker_error_text(error)) from None
        if totals[DEAD_LETTER] or produced - tables:
            written = batch.where(~F.col("kind").isin(*NOT_WRITTEN))
            if tables:
                written = written.where(~F.col("stream").isin(*tables))
            kafka.write(
                written.select(
                    F.col("stream").alias("topic"),
                    "key",
                    "value",
                    _headers(name if on_timers is not None else None).alias("headers"),
                    bucket_by_id(F.col("id"), F.col("key"), _bucket_counts(stream_buckets)).alias(
                        "partition"
                    ),
                ),
                workspace.settings,
            )
        if on_timers is not None:
            on_timers(_reports_of(counts, TIMERS), produced - tables)
        return totals
    finally:
        batch.unpersist()


def _reports_of(counts: list[Row], kind: str) -> dict[int, int | None]:
    """The buckets' timer reports of `kind`: each bucket's earliest timer, None for none."""
    return {
        int(report["key"]): _int_or_none(report["value"])
        for row in counts
        if row["kind"] == kind
        for report in row["reports"]
    }


def _headers(writer: str | None) -> Column:
    """An output row's headers: its id; for a production, its event time when it has one.

    With `writer`, a production names that processor as its writer too.
    """
    id_header = F.struct(F.lit(ID_HEADER).alias("key"), F.col("id").cast("binary").alias("value"))
    written_by = [
        F.struct(F.lit(WRITER_HEADER).alias("key"), F.lit(writer).cast("binary").alias("value"))
    ]
    if writer is None:
        written_by = []
    time_header = F.struct(
        F.lit(TIME_HEADER).alias("key"), F.col("time").cast("binary").alias("value")
    )
    production = F.col("kind") == PRODUCTION
    return (
        F.when(~production, F.array(id_header))
        .when(F.col("time").isNull(), F.array(id_header, *written_by))
        .otherwise(F.array(id_header, *written_by, time_header))
    )


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)


def _write_table_productions(
    name: str, workspace: Workspace, batch: DataFrame, produced: set[str]
) -> set[str]:
    """Upsert the productions to serving tables (`table:<name>`); their stream names."""
    tables = {stream for stream in produced if stream.startswith(TABLE_PREFIX)}
    for stream in sorted(tables):
        try:
            spec = describe_table(workspace.settings, stream.removeprefix(TABLE_PREFIX))
        except ServingError as error:
            failure = ProcessorError(
                f"processor {name!r} produced to {error.message}",
                hint=error.hint,
            )
            raise RuntimeError(worker_error_text(failure)) from None
        schema = ", ".join(f"`{column}` {kind}" for column, kind in spec.keys + spec.values)
        rows = batch.where(F.col("stream") == stream).select(
            F.from_json("value", schema).alias("row")
        )
        write_table(rows.select("row.*"), spec, workspace.settings.redis)
    return tables


def _bucket_counts(stream_buckets: dict[str, int]) -> Column:
    """Each row's stream's bucket count, from `stream_buckets`; null for another stream."""
    if not stream_buckets:
        return F.lit(None).cast("int")
    pairs = (F.lit(part) for pair in sorted(stream_buckets.items()) for part in pair)
    return F.create_map(*pairs)[F.col("stream")]
