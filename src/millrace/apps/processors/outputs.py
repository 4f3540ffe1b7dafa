"""Writing a processor operator's output rows: productions and dead letters to Kafka or Redis.

An `OutputWriter` takes the output rows (`millrace.apps.processors.rows`) of each
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


class OutputWriter:
    """Writes one processor's output rows, micro-batch after micro-batch, each in one Kafka write.

    The column expressions of the counts and of the write are built once, at construction
    (in the driver, with Spark running), and reused by every micro-batch: built anew each
    time, one Py4J call at a time, they made a 500 ms micro-batch about 30 ms longer
    (benchmarks/latency.py at 2,000 records a second, before and after).
    `streams` remembers the bucket count of each output stream found, so each is looked up
    once. With `writer`, productions carry that processor's name in their `writer` header,
    since its markers then tell their progress (`millrace.engine.output_watermark`). A
    streaming run keeps one for its query; a batch run makes one for its one write.
    """

    def __init__(self, workspace: Workspace, name: str, *, writer: str | None = None) -> None:
        self.workspace = workspace
        self.name = name
        self.streams: dict[str, int] = {}
        self._counts = (
            F.count(F.lit(1)).alias("count"),
            # collect_list leaves out the nulls: the rows of the other kinds.
            F.collect_list(
                F.when(F.col("kind").isin(CLOCK, TIMERS), F.struct("key", "value"))
            ).alias("reports"),
        )
        self._written = ~F.col("kind").isin(*NOT_WRITTEN)
        self._topic = F.col("stream").alias("topic")
        self._headers = _headers(writer).alias("headers")
        self._partition = _partition(self.streams)

    def write(
        self,
        batch: DataFrame,
        *,
        on_clock: Callable[[dict[int, int | None]], None] | None = None,
        on_timers: Callable[[dict[int, int | None], set[str]], None] | None = None,
    ) -> dict[str, int]:
        """Write the operator's output rows `batch` to Kafka in one write; the rows of each kind.

        Two Spark jobs: the first runs the operator into Spark's cache and counts the rows of
        each kind and stream, collecting the buckets' timer reports in the same job (jobs of
        their own for those cost 50 to 150 ms each); the second is the write. An output
        stream that does not exist fails the write before anything is written. A production
        without a key goes to a bucket chosen by its id (`bucket_by_id`). `on_clock` is given
        the buckets' earliest processing-time timers the batch reports; `on_timers`, once the
        batch is written, their earliest event-time timers and the streams the batch
        produced to.
        """
        batch.persist()
        try:
            counts = batch.groupBy("kind", "stream").agg(*self._counts).collect()
            totals = dict.fromkeys((PRODUCTION, DEAD_LETTER, *NOT_WRITTEN), 0)
            for row in counts:
                totals[row["kind"]] += row["count"]
            if on_clock is not None and totals[CLOCK]:
                on_clock(_reports_of(counts, CLOCK))
            produced = {row["stream"] for row in counts if row["kind"] == PRODUCTION}
            tables = _write_table_productions(self.name, self.workspace, batch, produced)
            self._require_streams(produced - tables)
            if totals[DEAD_LETTER] or produced - tables:
                written = batch.where(self._written)
                if tables:
                    written = written.where(~F.col("stream").isin(*tables))
                kafka.write(
                    written.select(self._topic, "key", "value", self._headers, self._partition),
                    self.workspace.settings,
                )
            if on_timers is not None:
                on_timers(_reports_of(counts, TIMERS), produced - tables)
            return totals
        finally:
            batch.unpersist()

    def _require_streams(self, produced: set[str]) -> None:
        """Look up the output streams not met before; a worker's error for a missing one."""
        new = sorted(produced - set(self.streams))
        for stream in new:
            try:
                self.streams[stream] = require_processor_stream(
                    self.workspace, stream, f"output of processor {self.name!r}"
                )
            except ProcessorError as error:
                raise RuntimeError(worker_error_text(error)) from None
        if new:
            self._partition = _partition(self.streams)


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


def _partition(stream_buckets: dict[str, int]) -> Column:
    """The Kafka bucket of each output row, for the streams of `stream_buckets`.

    A production without a key goes to a bucket chosen by its id (`bucket_by_id`); null
    leaves the choice to Kafka's producer.
    """
    if stream_buckets:
        pairs = (F.lit(part) for pair in sorted(stream_buckets.items()) for part in pair)
        buckets = F.create_map(*pairs)[F.col("stream")]
    else:
        buckets = F.lit(None).cast("int")
    return bucket_by_id(F.col("id"), F.col("key"), buckets).alias("partition")
