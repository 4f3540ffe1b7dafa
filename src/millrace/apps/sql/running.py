"""Running a SQL app: its streaming queries, its result tables, and reading those tables.

Each `INSERT INTO STREAM` becomes a query writing the derived stream. Each `CREATE TABLE`
becomes a query that keeps the results in a Delta table under `<workspace>/tables/<app>/`,
where `millrace query` (and later the serving layer) reads them, and that also writes them to
the `emit` stream when the table names one, and upserts them into the serving table that
`serve` names. Mode `final` appends each window once, when the watermark closes it; mode
`updates` merges every change by the table's key. A running app
counts, per result table, the rows dropped for coming after the watermark closed their window.
Its queries keep their state in the store the app names (`state_store`, memory by default).
When every input has a lateness, the app publishes its output watermark to the streams it
writes (`millrace.engine.output_watermark`), so that their readers need no lateness of their
own for the order it writes in.

`run_sql_app_batch` runs the same app once over an event-time range of its inputs, writing
the same tables (merged by key, so a range can be run again) and streams; `select_outputs`
keeps the outputs a backfill names.

Semantics (docs/semantics.md): an insert's records get ids derived from their input records'
(`with_insert_ids`), and a table's emitted rows ids naming the result, so a re-run writes the
same ids; `exactly_once` apps read their inputs without copies (`engine.read_stream`),
`at_least_once` apps with them, and `at_most_once` apps mark each micro-batch before writing
it and do not write a marked one again (`engine.delivery.AtMostOnce`).
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from delta.tables import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.streams import require_stream
from millrace.config.durations import parse_duration_ms
from millrace.config.storage import StoragePath, listing
from millrace.config.workspace import Workspace
from millrace.engine.delivery import AtMostOnce, run_without_writing
from millrace.engine.disk_full import disk_full_error
from millrace.engine.metrics import publish_metrics
from millrace.engine.output_watermark import OutputWatermark
from millrace.engine.progress import late_rows, watch
from millrace.engine.session import checkpoint_state_store, state_store
from millrace.engine.streams import StreamInput, write_batch, write_stream
from millrace.engine.triggers import Trigger
from millrace.errors import ServingError, SqlError, StreamNotFoundError, WarehouseError
from millrace.serving.sink import write_table
from millrace.serving.tables import TableSpec, create_table
from millrace.sql.compiler import CompiledApp, compile_app, group_key_columns
from millrace.sql.parser import ResultTable, SqlApp
from millrace.warehouse.delta import newest_commit_metadata


@dataclass
class RunningApp:
    """The queries of a started SQL app, one per output, and its inputs.

    `tables` holds the query of each result table (also in `queries`), by table name;
    `inputs` the streaming read of each input table, which routes its bad records;
    `markers` what publishes the app's output watermark, when it does (`publishes_markers`).
    """

    app: SqlApp
    workspace: Workspace
    queries: list[StreamingQuery] = field(default_factory=list)
    tables: dict[str, StreamingQuery] = field(default_factory=dict)
    inputs: dict[str, StreamInput] = field(default_factory=dict)
    markers: OutputWatermark | None = None

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

    def _surfacing(self, wait: Callable[[], Any]) -> None:
        try:
            wait()
        except StreamingQueryException as error:
            raise disk_full_error(error, self.workspace, self.app.name) or error from None

    def stop(self) -> None:
        """Stop every query of the app, once its running micro-batch is done."""
        for query in self.queries:
            query.stop()
        self._finish()

    def dead_letters(self) -> dict[str, int]:
        """Bad records routed to the dead-letter stream so far, by input table name."""
        return {name: source.dead_letter_count for name, source in self.inputs.items()}

    def _wait_for_dead_letters(self) -> None:
        for source in self.inputs.values():
            source.wait_for_dead_letters(*self.queries)

    def _finish(self) -> None:
        self._wait_for_dead_letters()
        for source in self.inputs.values():
            source.close()
        if self.markers is not None:
            self.markers.close()
            self.markers = None

    def late_rows(self) -> dict[str, int]:
        """Rows each result table's query dropped as later than the watermark, by table name.

        The watermark (the input's largest event time seen, minus its `LATENESS`) moves
        between micro-batches. The first micro-batch that starts with it past a window's end
        closes the window, and the window's records that come in later micro-batches are
        dropped. The counts are those so far, or all of them once the app has stopped; see
        `millrace.engine.progress.late_rows` for how Spark counts an aggregation's rows.
        """
        return {name: late_rows(query) for name, query in self.tables.items()}


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

    `max_records_per_batch` caps the records each micro-batch reads from an input; `trigger`
    sets when micro-batches run (`available_now` is short for `Trigger("available-now")`).
    """
    _require_output_streams(workspace, app)
    if trigger is not None:
        for table in app.tables:
            # Checked before any query starts, so that none is left running.
            trigger.check(f"{app.name}.table.{table.name}", foreach_batch=True)
    watch(spark)
    publish_metrics(spark, workspace, app.name)
    compiled = compile_app(
        spark,
        workspace,
        app,
        max_records_per_batch=max_records_per_batch,
        idle_ticks=not available_now and (trigger is None or trigger.kind != "available-now"),
    )
    running = RunningApp(app, workspace, inputs=compiled.inputs)
    with state_store(spark, app.state_store):
        _start_queries(running, compiled, workspace, available_now, trigger)
    if publishes_markers(app):
        outputs = _outputs(app)
        running.markers = OutputWatermark(
            workspace,
            app.name,
            {query: outputs[query.name] for query in running.queries if query.name in outputs},
        )
    return running


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
    root = workspace.checkpoints_dir / app.name
    for checkpoint in listing(root):
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
        writer = _ResultTableWriter(workspace, app.name, table, marked_by=marked_by)
        writer.serve(compiled.tables[table.name])
        write = writer.write_batch
        if app.semantics == "at_most_once":
            once = AtMostOnce(workspace.checkpoint(app.name, f"table.{table.name}") / _MARKS)
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


@dataclass(frozen=True)
class BatchRun:
    """What a batch run of a SQL app wrote: rows per result table, records per stream.

    `streams` counts the records of each `INSERT INTO STREAM` and each table's `emit`;
    `dead_letters` the bad records routed per input table, over the whole read.
    """

    app: SqlApp
    tables: dict[str, int]
    streams: dict[str, int]
    dead_letters: dict[str, int]


def run_sql_app_batch(
    spark: SparkSession,
    workspace: Workspace,
    app: SqlApp,
    *,
    start_ms: int,
    end_ms: int,
    source: str = "bus",
) -> BatchRun:
    """Run `app` once over its inputs' records with event times in `[start_ms, end_ms)`.

    Result tables get the windows that lie entirely inside the range: a window cut by an
    edge would hold only part of its records, so it is left out (align the range to the
    windows to get them all). A table without windows gets every group of the range. Rows are
    merged into the table that the streaming run keeps, by the table's key, and emitted with
    the ids of mode 'final': running a range again leaves the table as it was, and a reader
    can drop the emitted records it has seen. Each `INSERT INTO STREAM` writes the records
    of the range, keeping the input records' ids. Unlike a streaming run, records that came
    later than the input's lateness are counted. Times are epoch milliseconds.
    `source="warehouse"` reads the inputs from their archives (a backfill) instead of the bus.
    """
    _require_output_streams(workspace, app)
    compiled = compile_app(
        spark, workspace, app, time_range=(start_ms, end_ms), batch_source=source
    )
    tables: dict[str, int] = {}
    streams: dict[str, int] = {}
    for stream, records in compiled.inserts.items():
        streams[stream] = _write_once(
            with_insert_ids(records, app.name, stream),
            functools.partial(
                write_batch, workspace=workspace, stream=stream, key=_key_column(records)
            ),
        )
    for table in app.tables:
        rows = compiled.tables[table.name]
        if table.query.windows:
            rows = rows.where(
                (F.col("window_start") >= F.timestamp_millis(F.lit(start_ms)))
                & (F.col("window_end") <= F.timestamp_millis(F.lit(end_ms)))
            )
        writer = _ResultTableWriter(workspace, app.name, table)
        writer.serve(rows)
        tables[table.name] = _write_once(rows, writer.write_range)
        if table.emit is not None:
            streams[table.emit] = streams.get(table.emit, 0) + tables[table.name]
    dead_letters = {name: source.dead_letter_count for name, source in compiled.inputs.items()}
    return BatchRun(app, tables, streams, dead_letters)


def select_outputs(app: SqlApp, into: Sequence[str]) -> SqlApp:
    """`app` keeping only the outputs `into` names: result tables and output streams.

    A table is kept when it or the stream it emits to is named; an `INSERT INTO STREAM`
    when its stream is named. Raises `WarehouseError` when `into` names nothing, or an
    output the app does not have, listing those it has (a backfill's `--into`).

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
        >>> kept = select_outputs(app, ["superbowl_posts"])
        >>> kept.tables, [insert.stream for insert in kept.inserts]
        ((), ['superbowl_posts'])
    """
    if not into:
        raise WarehouseError(
            f"no output of app {app.name!r} to backfill was named",
            hint=f"name some with --into; app {app.name!r} has: {_output_names(app)}",
        )
    names = set(into)
    tables = tuple(table for table in app.tables if {table.name, table.emit} & names)
    inserts = tuple(insert for insert in app.inserts if insert.stream in names)
    known = {table.name for table in app.tables} | {insert.stream for insert in app.inserts}
    known |= {table.emit for table in app.tables if table.emit is not None}
    unknown = sorted(names - known)
    if unknown:
        raise WarehouseError(
            f"app {app.name!r} has no result table or output stream {unknown[0]!r}",
            hint=f"--into takes one of: {_output_names(app)}",
        )
    return replace(app, tables=tables, inserts=inserts)


def _output_names(app: SqlApp) -> str:
    names = [table.name for table in app.tables] + [insert.stream for insert in app.inserts]
    names += [table.emit for table in app.tables if table.emit is not None]
    return ", ".join(dict.fromkeys(names)) or "(no outputs)"


def explain_sql_app(spark: SparkSession, workspace: Workspace, app: SqlApp) -> dict[str, str]:
    """The Spark plan of each output of `app` (result tables and inserts), without running it.

    Compiling checks everything a run would: input and output streams, functions, columns.
    A plan is Spark's parsed and analyzed logical plans: Spark optimizes a streaming query and
    picks its physical plan only once the query starts.
    """
    _require_output_streams(workspace, app)
    compiled = compile_app(spark, workspace, app, route_dead_letters=False)
    outputs = {
        f"table {name} ({compiled.plans[name]})": frame for name, frame in compiled.tables.items()
    }
    outputs |= {f"insert into stream {name}": frame for name, frame in compiled.inserts.items()}
    plans = {}
    for name, frame in outputs.items():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            frame.explain(mode="extended")
        # In place of the plans a streaming query gets only when it starts, explain() prints
        # "AnalysisException: Queries with streaming sources must be executed with
        # writeStream.start()", which reads as a failure.
        logical, _, _ = printed.getvalue().partition("== Optimized Logical Plan ==")
        plans[name] = logical.rstrip() + "\n"
    return plans


def result_table_path(workspace: Workspace, app: str, table: str) -> StoragePath:
    """Where the Delta table of result table `table` of app `app` lives."""
    return workspace.tables_dir / app / table


def query_result_table(
    spark: SparkSession,
    workspace: Workspace,
    app: str,
    table: str,
    *,
    where: dict[str, str] | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of a result table, filtered by column equality, from its `last` windows.

    Filter values are compared as values (never pasted into SQL). Raises `SqlError` for an
    unknown table or column.
    """
    path = result_table_path(workspace, app, table)
    if not DeltaTable.isDeltaTable(spark, str(path)):
        raise SqlError(
            f"no result table {app}.{table} (nothing at {path})",
            hint="check the names; the table appears once the app has written its first results",
        )
    rows = spark.read.format("delta").load(str(path))
    for column, value in (where or {}).items():
        if column not in rows.columns:
            raise SqlError(
                f"result table {app}.{table} has no column {column!r}",
                hint=f"its columns: {', '.join(rows.columns)}",
            )
        rows = rows.where(F.col(column).cast("string") == F.lit(value))
    if last is not None and "window_start" in rows.columns:
        latest = rows.select("window_start").distinct().orderBy(F.desc("window_start")).limit(last)
        rows = rows.join(latest, "window_start")
    order = [name for name in ("window_start", "window_end") if name in rows.columns]
    if order:
        rows = rows.orderBy(*order)
    return [row.asDict(recursive=True) for row in rows.collect()]


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


def _key_column(records: DataFrame) -> Column | None:
    name = insert_key(records)
    return None if name is None else F.col(name)


# The folder, under a query's checkpoint, of the batch marks of semantics 'at_most_once'.
_MARKS = "at_most_once"


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
    once = AtMostOnce(checkpoint / _MARKS)

    def write(batch: DataFrame, batch_id: int) -> None:
        if not once.write(
            batch_id,
            lambda: write_batch(batch, workspace, stream, key=_key_column(batch), writer=marked_by),
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


class _ResultTableWriter:
    """Writes a result table's rows, per micro-batch or per batch run, to Delta and its emit."""

    def __init__(
        self,
        workspace: Workspace,
        app: str,
        table: ResultTable,
        *,
        marked_by: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.app = app
        self.table = table
        self.marked_by = marked_by
        """The app whose markers tell the progress of the emitted rows (`write_batch`'s writer)."""
        self.location = result_table_path(workspace, app, table.name)
        self.path = str(self.location)
        self.keys = group_key_columns(table.query)
        self.serving: TableSpec | None = None
        self._appended: int | None = None
        """The micro-batch this writer last appended; before its first, read from the table."""

    def serve(self, rows: DataFrame) -> None:
        """Register the serving table of `serve = '...'`, its columns taken from `rows`.

        The key is the result table's (window bounds and group columns), the values its other
        columns. Raises `SqlError` when a serving table of that name has other columns.
        """
        if self.table.serve is None:
            return
        types = {field.name: field.dataType.simpleString().upper() for field in rows.schema}
        spec = TableSpec(
            self.table.serve,
            tuple((key, types[key]) for key in self.keys),
            tuple((name, kind) for name, kind in types.items() if name not in self.keys),
            parse_duration_ms(self.table.ttl, what="ttl") if self.table.ttl else None,
            None,
            f"sql app {self.app}",
        )
        try:
            self.serving = create_table(self.workspace.settings, spec)
        except ServingError as error:
            raise SqlError(
                f"{self.table.position}: serve = {self.table.serve!r}: {error.message}",
                hint=error.hint,
            ) from None

    def write_batch(self, batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if self.table.mode == "final":
                if self._appended is None:
                    self._appended = self._last_appended()
                last = self._appended
                if last is not None and batch_id < last:
                    # A batch recomputed after `millrace rollback`: its windows may be in the
                    # table already, so they are merged by key rather than appended twice.
                    self._merge(batch)
                elif last != batch_id:
                    (
                        batch.write.format("delta")
                        .mode("append")
                        .option("userMetadata", f"{self._marker}{batch_id}")
                        .save(self.path)
                    )
                    self._appended = batch_id
                else:
                    run_without_writing(batch)
            else:
                self._merge(batch)
            if self.serving is not None:
                write_table(batch, self.serving, self.workspace.settings.redis)
            if self.table.emit is not None:
                revision = batch_id if self.table.mode == "updates" else None
                self._emit(batch, self.table.emit, revision)
        finally:
            batch.unpersist()

    @property
    def _marker(self) -> str:
        return f"millrace:{self.app}.{self.table.name}:batch:"

    def _last_appended(self) -> int | None:
        """The micro-batch last appended to the table, None when none was.

        A batch is run again when the app stopped after appending it but before Spark
        recorded it as done. Each append carries the batch id in its commit's metadata, and
        the newest such commit is read outside Spark: Delta's own `txnAppId`/`txnVersion`
        check costs seconds per batch, as it rebuilds the log's state in Spark jobs.
        """
        metadata = newest_commit_metadata(self.location, self._marker)
        return None if metadata is None else int(metadata.removeprefix(self._marker))

    def write_range(self, rows: DataFrame) -> None:
        """Merge the results of a batch run by key, and emit them with the ids of 'final'."""
        self._merge(rows)
        if self.serving is not None:
            write_table(rows, self.serving, self.workspace.settings.redis)
        if self.table.emit is not None:
            self._emit(rows, self.table.emit, None)

    def _merge(self, batch: DataFrame) -> None:
        spark = batch.sparkSession
        if not DeltaTable.isDeltaTable(spark, self.path):
            # The first rows make the table: nothing to merge them with, and a merge costs
            # several Spark jobs more than a write.
            batch.write.format("delta").save(self.path)
            return
        matches = " AND ".join(f"t.`{key}` <=> u.`{key}`" for key in self.keys) or "false"
        (
            DeltaTable.forPath(spark, self.path)
            .alias("t")
            .merge(batch.alias("u"), matches)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    def _emit(self, batch: DataFrame, stream: str, revision: int | None) -> None:
        # The id names what the row is the result of, so writing it again gives the same id;
        # a streaming 'updates' table adds its micro-batch as the revision, as each batch may
        # revise a result.
        keys = [F.col(key).cast("string") for key in self.keys]
        parts: list[Column] = [F.lit(self.app), F.lit(self.table.name), *keys]
        if revision is not None:
            parts.append(F.lit(str(revision)))
        write_batch(
            batch,
            self.workspace,
            stream,
            key=F.concat_ws("|", *keys) if keys else None,
            record_id=F.concat_ws(":", *parts),
            writer=self.marked_by,
        )


def _write_once(rows: DataFrame, write: Callable[[DataFrame], None]) -> int:
    """Hand `rows` to `write` computed once, not once per action of `write`; their count."""
    rows.persist()
    try:
        count = rows.count()
        if count:
            write(rows)
        return count
    finally:
        rows.unpersist()


def _require_output_streams(workspace: Workspace, app: SqlApp) -> None:
    outputs = [(insert.stream, insert.position) for insert in app.inserts]
    outputs += [(table.emit, table.position) for table in app.tables if table.emit is not None]
    for stream, position in outputs:
        try:
            require_stream(workspace.settings, stream)
        except StreamNotFoundError as error:
            raise SqlError(f"{position}: output {error.message}", hint=error.hint) from None
