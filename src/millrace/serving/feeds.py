"""Serving tables fed from streams: registering a table and running its feed (Laser's deploy).

`create_stream_table` registers a table whose rows come from a stream; `start_table_feed`
starts the streaming query that feeds it. The feed reads the stream through
`millrace.engine.streams.read_stream`, so records that are not JSON objects or do not fit the
table's columns go to `<stream>.dlq` and are counted, and so do records whose key column is
missing or null (they cannot be stored). Each micro-batch is upserted by key from the
executors (`millrace.serving.sink.write_table`), so a micro-batch that Spark runs again
after a failure leaves the table right. The feed's checkpoint is
`<workspace>/checkpoints/table.<name>/feed`; `delete_stream_table` removes it with the table.

The order of a key's updates is the stream's: keep one key's updates in one bucket (publish
them with the key as routing key), and the last update published is the value the table holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery

from millrace.bus.streams import require_stream
from millrace.config.storage import delete_tree
from millrace.config.workspace import Workspace
from millrace.engine.dead_letter_routing import dead_letter_records, write_dead_letters
from millrace.engine.streams import StreamInput, read_stream
from millrace.engine.triggers import records_cap
from millrace.errors import TableSpecError
from millrace.serving.sink import write_table
from millrace.serving.tables import TableSpec, create_table, describe_table, drop_table


@dataclass
class TableFeed:
    """A running feed: its streaming query, its input, and what it has written this run.

    `rows_written` counts the rows upserted since the start (a row written again after a
    restart counts again); `keyless` the records sent to `<stream>.dlq` for lacking a key.
    """

    spec: TableSpec
    query: StreamingQuery
    source: StreamInput
    counts: dict[str, int]

    @property
    def rows_written(self) -> int:
        """Rows upserted since the start."""
        return self.counts["rows"]

    @property
    def keyless(self) -> int:
        """Records routed to the dead-letter stream for lacking a key, since the start."""
        return self.counts["keyless"]

    @property
    def dead_letters(self) -> int:
        """Records of the stream routed to its dead-letter stream by this run."""
        return self.source.dead_letter_count + self.keyless

    def process_all_available(self) -> None:
        """Block until the feed has written every record there is, and routed the bad ones."""
        self.query.processAllAvailable()
        self.source.wait_for_dead_letters(self.query)

    def await_termination(self) -> None:
        """Block until the query stops; with `available_now` it stops once caught up."""
        self.query.awaitTermination()
        self._finish()

    def stop(self) -> None:
        """Stop the feed once its running micro-batch is done."""
        self.query.stop()
        self._finish()

    def _finish(self) -> None:
        self.source.wait_for_dead_letters(self.query)
        self.source.close()


def feed_app_name(table: str) -> str:
    """The app name of a table's feed: its checkpoints live under `checkpoints/<this>/`."""
    return f"table.{table}"


def create_stream_table(
    workspace: Workspace,
    name: str,
    stream: str,
    *,
    keys: Sequence[tuple[str, str]],
    values: Sequence[tuple[str, str]],
    ttl_ms: int | None = None,
) -> TableSpec:
    """Register table `name` fed from `stream`; the same spec again is a no-op.

    Raises `StreamNotFoundError` for a missing stream and `TableSpecError` for bad columns,
    a column named like the stream's time field, or a table of that name with another spec.
    """
    require_stream(workspace.settings, stream)
    time_field = workspace.settings.events_time_field
    if time_field in [column for column, _ in (*keys, *values)]:
        raise TableSpecError(
            f"table {name!r}: column {time_field!r} is the stream's event-time field",
            hint="events.time_field is read as the event time; serve another column",
        )
    spec = TableSpec(name, tuple(keys), tuple(values), ttl_ms, stream, f"stream {stream}")
    return create_table(workspace.settings, spec)


def start_table_feed(
    spark: SparkSession,
    workspace: Workspace,
    name: str,
    *,
    available_now: bool = False,
    max_records_per_batch: int | None = None,
) -> TableFeed:
    """Start the streaming query that feeds table `name` from its stream.

    It resumes from its checkpoint, so starting it again after a stop (or in another process,
    such as a deployed app) goes on where it stopped. With `available_now` it stops once it
    has written what the stream holds. `max_records_per_batch` caps the records of each
    micro-batch (by default `engine.triggers.records_cap`'s). Raises `TableNotFoundError` for
    an unknown table and `TableSpecError` for a table that no stream feeds.
    """
    settings = workspace.settings
    spec = describe_table(settings, name)
    if spec.stream is None:
        raise TableSpecError(
            f"serving table {name!r} is not fed from a stream ({spec.feeder or 'by apps'})",
            hint="its rows come from the apps that write it; a feed needs --from-stream",
        )
    app = feed_app_name(name)
    schema = ", ".join(f"`{column}` {kind}" for column, kind in spec.keys + spec.values)
    source = read_stream(
        spark,
        workspace,
        app,
        spec.stream,
        schema,
        time=settings.events_time_field,
        max_records_per_batch=records_cap(settings, max_records_per_batch, None),
    )
    # Filled by the micro-batches, which may start before `start()` returns.
    counts = {"rows": 0, "keyless": 0}

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            missing = F.lit(False)
            for column in spec.key_names:
                missing = missing | F.col(f"`{column}`").isNull()
            keyless = batch.where(missing)
            count = write_dead_letters(
                workspace, spec.stream or "", _keyless_letters(keyless, spec)
            )
            counts["keyless"] += count
            counts["rows"] += write_table(batch.where(~missing), spec, settings.redis)
        finally:
            batch.unpersist()

    writer = (
        source.records.writeStream.queryName(f"{app}.feed")
        .foreachBatch(write)
        .option("checkpointLocation", str(workspace.checkpoint(app, "feed")))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    # The read's dead-letter router stops if the query does not start.
    with ExitStack() as started:
        started.callback(source.close)
        feed = TableFeed(spec, writer.start(), source, counts)
        started.pop_all()
    return feed


def delete_stream_table(workspace: Workspace, name: str) -> int:
    """Drop table `name` (rows and spec) and its feed's checkpoint; the rows removed.

    Stop its feed first: a feed still running would write rows again.
    """
    removed = drop_table(workspace.settings, name)
    delete_tree(workspace.app_checkpoints(feed_app_name(name)))
    return removed


def _keyless_letters(rows: DataFrame, spec: TableSpec) -> DataFrame:
    """Dead letters for records without a key: the reason, where they were, their columns."""
    original = F.to_json(F.struct(*(F.col(f"`{column}`") for column in spec.columns)))
    return dead_letter_records(
        rows,
        spec.stream or "",
        error=F.lit(
            f"serving table {spec.name}: key column(s) {', '.join(spec.key_names)} missing or null"
        ),
        original=original,
        original_base64=F.base64(original.cast("binary")),
    )
