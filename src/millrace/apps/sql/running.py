"""A SQL app's streaming run: its queries, started, watched and stopped.

Each `INSERT INTO STREAM` becomes a query writing the derived stream. Each `CREATE TABLE`
becomes a query that keeps the results in its result table (`millrace.apps.sql.result_tables`),
emitting them and serving them when the table says so. A running app counts, per result
table, the rows dropped for coming after the watermark closed their window. Its queries keep
their state in the store the app names (`state_store`, memory by default). When every input
has a lateness, the app publishes its output watermark to the streams it writes
(`millrace.engine.output_watermark`), so that their readers need no lateness of their own for
the order it writes in.

Semantics (docs/semantics.md): an insert's records get ids derived from their input records'
(`with_insert_ids`), and a table's emitted rows ids naming the result, so a re-run writes the
same ids; `exactly_once` apps read their inputs without copies (`engine.read_stream`),
`at_least_once` apps with them, and `at_most_once` apps mark each micro-batch before writing
it and do not write a marked one again (`engine.delivery.AtMostOnce`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery

from millrace.apps.progress_lines import QueryTotals, RoutedInput
from millrace.apps.sql.result_tables import ResultTableWriter
from millrace.config.storage import listing
from millrace.config.workspace import Workspace
from millrace.engine.delivery import AtMostOnce, run_without_writing
from millrace.engine.disk_full import disk_full_error
from millrace.engine.metrics import publish_metrics
from millrace.engine.output_watermark import OutputWatermark
from millrace.engine.progress import late_rows, watch
from millrace.engine.session import checkpoint_state_store, state_store
from millrace.engine.streams import StreamInput
from millrace.engine.triggers import Trigger, records_cap
from millrace.engine.user_code import failure_in_user_code
from millrace.engine.writes import write_batch, write_stream
from millrace.sql.checks import require_output_streams
from millrace.sql.compiler import CompiledApp, compile_app
from millrace.sql.parser import SqlApp


@dataclass
class RunningApp:
    """The queries of a started SQL app, one per output, and its inputs.

    `tables` holds the query of each result table (also in `queries`), by table name;
    `inputs` the streaming read of each input table, which routes its bad records; `notices`
    what its start has to say (`state_store_notices`). It is the app's `Streaming` handle
    (`millrace.apps.app`): leaving it as a context manager stops what it started.
    """

    app: SqlApp
    workspace: Workspace
    queries: list[StreamingQuery] = field(default_factory=list)
    tables: dict[str, StreamingQuery] = field(default_factory=dict)
    inputs: dict[str, StreamInput] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    _resources: ExitStack = field(default_factory=ExitStack)

    stopping = "stopping once the running micro-batches are done..."

    @property
    def started(self) -> str:
        """The line said once the queries run, and the notices of the start."""
        running = f"app {self.app.name!r} running: {len(self.queries)} queries (Ctrl-C stops)"
        return "\n".join([running, *(f"note: {notice}" for notice in self.notices)])

    def process_all_available(self) -> None:
        """Block until every query has processed, and every input routed, the data there is."""
        for query in self.queries:
            self._surfacing(query.processAllAvailable)
        self._wait_for_dead_letters()

    def await_termination(self) -> None:
        """Block until every query has stopped; with `available_now` they stop by themselves."""
        for query in self.queries:
            self._surfacing(query.awaitTermination)
        self._finish()

    def _surfacing(self, wait: Callable[[], object]) -> None:
        try:
            wait()
        except StreamingQueryException as error:
            raise (
                disk_full_error(error, self.workspace, self.app.name)
                or failure_in_user_code(error, self.app.name)
                or error
            ) from None

    def stop(self) -> None:
        """Stop every query of the app, once its running micro-batch is done."""
        for query in self.queries:
            query.stop()
        self._finish()

    def dead_letters(self) -> dict[str, int]:
        """Bad records routed to the dead-letter stream so far, by input table name."""
        return {name: source.dead_letter_count for name, source in self.inputs.items()}

    def summary(self, totals: Mapping[str, QueryTotals]) -> list[str]:
        """A line per query from the totals of its micro-batches, and per input its dead letters."""
        lines = [
            totals.get(query.name, QueryTotals()).summary(query.name) for query in self.queries
        ]
        dead_letters = self.dead_letters()
        return lines + [
            RoutedInput(source.name, source.stream, dead_letters.get(source.name, 0)).line()
            for source in self.app.inputs
        ]

    def _wait_for_dead_letters(self) -> None:
        for source in self.inputs.values():
            source.wait_for_dead_letters(*self.queries)

    def _finish(self) -> None:
        self._wait_for_dead_letters()
        self._resources.close()

    def late_rows(self) -> dict[str, int]:
        """Rows each result table's query dropped as later than the watermark, by table name.

        The watermark (the input's largest event time seen, minus its `LATENESS`) moves
        between micro-batches. The first micro-batch that starts with it past a window's end
        closes the window, and the window's records that come in later micro-batches are
        dropped. The counts are those so far, or all of them once the app has stopped; see
        `millrace.engine.progress.late_rows` for how Spark counts an aggregation's rows.
        """
        return {name: late_rows(query) for name, query in self.tables.items()}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Stop the queries still running and what the app started beside them."""
        _stop_active(self.queries)
        self._resources.close()


def start_sql_app(
    spark: SparkSession,
    workspace: Workspace,
    app: SqlApp,
    *,
    available_now: bool = False,
    max_records_per_batch: int | None = None,
    trigger: Trigger | None = None,
) -> RunningApp:
    """Compile `app` and start its queries; with `available_now` they stop at the end of input.

    `max_records_per_batch` caps the records each micro-batch reads from an input (by
    default the app's own cap, else `engine.triggers.records_cap`'s); `trigger` sets when
    micro-batches run (`available_now` is short for `Trigger("available-now")`).
    What a start that fails has started (queries, dead-letter routers, tickers) is stopped.
    """
    require_output_streams(workspace, app)
    max_records_per_batch = records_cap(
        workspace.settings, max_records_per_batch or app.max_records_per_batch, trigger
    )
    if trigger is not None:
        for table in app.tables:
            # Checked before any query starts, so that none is left running.
            trigger.check(f"{app.name}.table.{table.name}", foreach_batch=True)
    # Read before the start, which writes the store of a new checkpoint.
    notices = state_store_notices(workspace, app)
    watch(spark)
    publish_metrics(spark, workspace, app.name)
    with ExitStack() as started:
        compiled = compile_app(
            spark,
            workspace,
            app,
            max_records_per_batch=max_records_per_batch,
            idle_ticks=not available_now and (trigger is None or trigger.kind != "available-now"),
        )
        started.callback(compiled.close)
        running = RunningApp(app, workspace, inputs=compiled.inputs, notices=notices)
        started.callback(_stop_active, running.queries)
        with state_store(spark, app.state_store):
            _start_queries(running, compiled, workspace, available_now, trigger)
        if publishes_markers(app):
            outputs = _outputs(app)
            markers = OutputWatermark(
                workspace,
                app.name,
                {query: outputs[query.name] for query in running.queries if query.name in outputs},
            )
            started.callback(markers.close)
        running._resources = started.pop_all()
    return running


def _stop_active(queries: list[StreamingQuery]) -> None:
    for query in queries:
        if query.isActive:
            query.stop()


def publishes_markers(app: SqlApp) -> bool:
    """Whether `app` publishes its output watermark to the streams it writes.

    It does when every input has a `LATENESS`, so that every query has a watermark to
    promise (`millrace.engine.output_watermark`).

    Example:
        >>> from millrace.sql.parser import parse_app
        >>> app = parse_app(
        ...     "CREATE APPLICATION top_events; "
        ...     "CREATE INPUT TABLE events (event STRING, category STRING) "
        ...     "FROM STREAM('events_stream') TIME event_time LATENESS '30 seconds'; "
        ...     "CREATE TABLE top_events_5min AS "
        ...     "SELECT category, COUNT(*) AS n FROM events [5 minutes] GROUP BY category; "
        ...     "INSERT INTO STREAM('superbowl_posts') "
        ...     "SELECT * FROM events WHERE category = 'sports';"
        ... )
        >>> publishes_markers(app)
        True
    """
    return bool(app.inputs) and all(source.lateness is not None for source in app.inputs)


def _outputs(app: SqlApp) -> dict[str, set[str]]:
    """The streams each query of `app` writes, by query name."""
    outputs = {f"{app.name}.insert.{insert.stream}": {insert.stream} for insert in app.inserts}
    for table in app.tables:
        if table.emit is not None:
            outputs[f"{app.name}.table.{table.name}"] = {table.emit}
    return outputs


def state_store_notices(workspace: Workspace, app: SqlApp) -> list[str]:
    """A line for each of `app`'s checkpoints that keeps state in another store than it asks.

    Spark goes on with the store a checkpoint began on (`engine.session.state_store`), so
    such a query runs, on its old store; these lines say so, and how to move it.
    """
    notices = []
    for checkpoint in listing(workspace.app_checkpoints(app.name)):
        recorded = checkpoint_state_store(checkpoint)
        if (checkpoint / "state").is_dir() and recorded not in (None, app.state_store):
            notices.append(
                f"query {checkpoint.name} keeps its state in {recorded!r}, the store its "
                f"checkpoint began on; state_store = {app.state_store!r} applies to a new "
                f"checkpoint: `millrace restart {app.name} --fresh` starts one (docs/sql.md, "
                "State store)"
            )
    return notices


def _start_queries(
    running: RunningApp,
    compiled: CompiledApp,
    workspace: Workspace,
    available_now: bool,
    trigger: Trigger | None,
) -> None:
    """Start a query per insert and per result table of `compiled`, adding them to `running`."""
    app = running.app
    marked_by = app.name if publishes_markers(app) else None
    for stream, records in compiled.inserts.items():
        records = with_insert_ids(records, app.name, stream)
        if app.semantics == "at_most_once":
            running.queries.append(
                _insert_at_most_once(records, workspace, app.name, stream, available_now, marked_by)
            )
            continue
        running.queries.append(
            write_stream(
                records,
                workspace,
                app.name,
                f"insert.{stream}",
                stream,
                key=insert_key(records),
                available_now=available_now,
                trigger=trigger,
                marked=marked_by is not None,
            )
        )
    for table in app.tables:
        writer = ResultTableWriter(workspace, app.name, table, marked_by=marked_by)
        writer.serve(compiled.tables[table.name])
        write = writer.write_batch
        if app.semantics == "at_most_once":
            once = AtMostOnce(workspace.at_most_once_marks(app.name, f"table.{table.name}"))
            write = functools.partial(_once, once, writer.write_batch)
        query = (
            compiled.tables[table.name]
            .writeStream.queryName(f"{app.name}.table.{table.name}")
            .outputMode("append" if table.mode == "final" else "update")
            .foreachBatch(write)
            .option(
                "checkpointLocation", str(workspace.checkpoint(app.name, f"table.{table.name}"))
            )
        )
        if available_now:
            query = query.trigger(availableNow=True)
        elif trigger is not None:
            query = trigger.apply(query, f"{app.name}.table.{table.name}", foreach_batch=True)
        running.tables[table.name] = query.start()
        running.queries.append(running.tables[table.name])


def with_insert_ids(records: DataFrame, app: str, stream: str) -> DataFrame:
    """An insert's records with their deterministic ids: `<app>:<stream>:<input record's id>`.

    The input record's id is the one its writer gave it, or its place in its stream
    (`millrace.engine.streams.read_stream`), so a micro-batch run again, or a batch run over
    the same range, gives each record the id it had; an insert makes at most one record of
    each input record. A query that reads a join or a subquery cannot carry its input's id,
    and its records get random ids: readers cannot tell their copies apart.
    """
    if "record_id" not in records.columns:
        return records
    return records.withColumn(
        "record_id", F.concat_ws(":", F.lit(app), F.lit(stream), F.col("record_id"))
    )


def insert_key(records: DataFrame) -> str | None:
    """The column an insert's records are keyed by in Kafka: `record_key`, when selected.

    An insert's query chooses its output's Kafka key (which bucket each record lands in) by
    selecting a column named `record_key`, such as `concat(event, '|', topic) AS record_key`;
    `SELECT *` over an input keeps the input record's key. Like the other record columns, it
    is not part of the record's value. Without one, records have no key.
    """
    return "record_key" if "record_key" in records.columns else None


def insert_key_column(records: DataFrame) -> Column | None:
    """The column of `insert_key` as a Column, or None."""
    name = insert_key(records)
    return None if name is None else F.col(name)


def _insert_at_most_once(
    records: DataFrame,
    workspace: Workspace,
    app: str,
    stream: str,
    available_now: bool,
    marked_by: str | None,
) -> StreamingQuery:
    """An insert's query that writes each micro-batch at most once (`engine.delivery`)."""
    checkpoint = workspace.checkpoint(app, f"insert.{stream}")
    once = AtMostOnce(workspace.at_most_once_marks(app, f"insert.{stream}"))

    def write(batch: DataFrame, batch_id: int) -> None:
        if not once.write(
            batch_id,
            lambda: write_batch(
                batch, workspace, stream, key=insert_key_column(batch), writer=marked_by
            ),
        ):
            run_without_writing(batch)

    writer = (
        records.writeStream.queryName(f"{app}.insert.{stream}")
        .foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _once(
    once: AtMostOnce, write: Callable[[DataFrame, int], None], batch: DataFrame, batch_id: int
) -> None:
    if not once.write(batch_id, lambda: write(batch, batch_id)):
        run_without_writing(batch)
