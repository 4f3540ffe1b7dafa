"""Writing a processor operator's output rows: productions and dead letters to Kafka or Redis.

An `OutputWriter` takes the output rows (`millrace.apps.processors.rows`) of each
micro-batch of a streaming run (`millrace.apps.processors.streaming`) or of a whole batch run
(`millrace.apps.processors.batch`), writes the productions and dead letters to Kafka in the
Spark job that runs the operator, each with its deterministic id in its `id` header (and a
production its event time in its `time` header), upserts the productions to serving tables
(`table:<name>`) into Redis, hands the buckets' timer reports to the driver, and counts the
rows of each kind.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession
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
from millrace.engine.session import kafka_on_datasource_v1
from millrace.engine.writes import bucket_by_id
from millrace.errors import ProcessorError, ServingError
from millrace.processor.lookups import TABLE_PREFIX
from millrace.records import ID_HEADER, TIME_HEADER
from millrace.serving.sink import write_table
from millrace.serving.tables import describe_table

_KINDS = (PRODUCTION, DEAD_LETTER, *NOT_WRITTEN)
_PRODUCED = "produced"


class OutputWriter:
    """Writes one processor's output rows, micro-batch after micro-batch, in one Spark job each.

    The column expressions of the counts and of the write are built once, at construction
    (in the driver, with Spark running), and reused by every micro-batch: built anew each
    time, one Py4J call at a time, they made a 500 ms micro-batch about 30 ms longer
    (benchmarks/latency.py at 2,000 records a second, before and after).
    `streams` remembers the bucket count of each output stream found, so each is looked up
    once. With `writer`, productions carry that processor's name in their `writer` header,
    since its markers then tell their progress (`millrace.engine.output_watermark`). A
    streaming run keeps one for its query; a batch run makes one for its one write.
    """

    def __init__(
        self, spark: SparkSession, workspace: Workspace, name: str, *, writer: str | None = None
    ) -> None:
        _require_kafka_on_v2(spark, name)
        self.workspace = workspace
        self.name = name
        self.streams: dict[str, int] = {}
        kind = F.col("kind")
        self._counts = [
            *(F.count_if(kind == counted).alias(counted) for counted in _KINDS),
            # collect_set and collect_list leave out the nulls: the rows of the other kinds.
            F.collect_set(F.when(kind == PRODUCTION, F.col("stream"))).alias(_PRODUCED),
            *(
                F.collect_list(F.when(kind == report, F.struct("key", "value"))).alias(report)
                for report in (CLOCK, TIMERS)
            ),
        ]
        self._written = ~kind.isin(*NOT_WRITTEN)
        self._production = kind == PRODUCTION
        self._known = self._written_before()
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
        """Write the operator's output rows `batch` to Kafka; the rows of each kind.

        One Spark job runs the operator into Spark's cache and writes the dead letters and
        the productions to streams this writer has written to before, observing as it goes
        (Spark's `observe`) the rows of each kind, the streams produced to and the buckets'
        timer reports: a job of its own for the counts made each micro-batch of a processor
        at 2,000 records a second 40 to 95 ms longer (benchmarks/latency.py, before and
        after). The productions to streams met for the first time, and to serving tables
        (`table:<name>`, upserted into Redis), are written from the cache afterwards, once the
        streams are found: an output stream that does not exist stops the app before anything
        is written to it (what the micro-batch wrote to the other streams is written again,
        with the same ids, when it runs again). A production without a key goes to a bucket
        chosen by its id (`bucket_by_id`). `on_clock` is given the buckets' earliest
        processing-time timers the batch reports; `on_timers`, once the batch is written,
        their earliest event-time timers and the streams the batch produced to.
        """
        observation = Observation()
        batch.persist()
        try:
            self._write(batch.observe(observation, *self._counts).where(self._known))
            counts = observation.get
            produced = set(counts[_PRODUCED])
            if on_clock is not None and counts[CLOCK]:
                on_clock(_reports_of(counts[CLOCK]))
            tables = _write_table_productions(self.name, self.workspace, batch, produced)
            new = produced - tables - set(self.streams)
            if new:
                self._require_streams(new)
                self._write(batch.where(self._production & F.col("stream").isin(*new)))
            if on_timers is not None:
                on_timers(_reports_of(counts[TIMERS]), produced - tables)
            return {counted: counts[counted] for counted in _KINDS}
        finally:
            batch.unpersist()

    def _write(self, rows: DataFrame) -> None:
        """Write the rows that are written (not reports) to their streams' Kafka buckets."""
        kafka.write(
            rows.where(self._written).select(
                self._topic, "key", "value", self._headers, self._partition
            ),
            self.workspace.settings,
        )

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
            self._known = self._written_before()

    def _written_before(self) -> Column:
        """Whether the micro-batch's job writes a row: all but productions to new streams."""
        return ~self._production | F.col("stream").isin(*self.streams)


def _require_kafka_on_v2(spark: SparkSession, name: str) -> None:
    """Refuse a session whose Kafka writes are DataSource V1, unlike those `spark_config` makes.

    The metrics a V1 write observes never arrive: `OutputWriter.write` would wait for them
    forever, in the processor's first micro-batch.
    """
    if kafka_on_datasource_v1(spark):
        raise ProcessorError(
            f"processor {name!r} cannot run on this Spark session: it writes Kafka through "
            "DataSource V1 (spark.sql.sources.useV1SourceList lists kafka)",
            hint="start Spark with millrace.engine.session.spark_session, or take kafka out "
            "of spark.sql.sources.useV1SourceList",
        )


def _reports_of(reports: list[Row]) -> dict[int, int | None]:
    """The buckets' timer reports: each bucket's earliest timer, None for none."""
    return {int(report["key"]): _int_or_none(report["value"]) for report in reports}


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
