"""A SQL app run once over an event-time range: of the bus (`run --batch`) or of the archives.

`run_sql_app_batch` runs an app's queries once over the records of its inputs whose event
times are in a range, writing the same result tables (merged by key, so a range can be run
again) and streams as its streaming run; `select_outputs` keeps the outputs a backfill names;
`decoded_archive` is an input's whole archive decoded as the app reads it
(`millrace sql --app`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.apps.sql.result_tables import ResultTableWriter
from millrace.apps.sql.running import insert_key_column, with_insert_ids
from millrace.config.workspace import Workspace
from millrace.engine.streams import read_batch
from millrace.engine.writes import write_batch
from millrace.errors import WarehouseError
from millrace.sql.checks import require_output_streams
from millrace.sql.compiler import compile_app
from millrace.sql.parser import InputTable, SqlApp
from millrace.warehouse.archive import RecordSource, read_archive

# Event times that every record falls between: the whole archive, for a decoded view.
_EARLIEST_MS = -62_135_596_800_000  # 0001-01-01
_LATEST_MS = 253_402_300_800_000  # 10000-01-01


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
    source: RecordSource = "bus",
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
    require_output_streams(workspace, app)
    compiled = compile_app(
        spark, workspace, app, time_range=(start_ms, end_ms), batch_source=source
    )
    tables: dict[str, int] = {}
    streams: dict[str, int] = {}
    for stream, records in compiled.inserts.items():
        streams[stream] = _write_once(
            with_insert_ids(records, app.name, stream),
            functools.partial(
                write_batch, workspace=workspace, stream=stream, key=insert_key_column(records)
            ),
        )
    for table in app.tables:
        rows = compiled.tables[table.name]
        if table.query.windows:
            rows = rows.where(
                (F.col("window_start") >= F.timestamp_millis(F.lit(start_ms)))
                & (F.col("window_end") <= F.timestamp_millis(F.lit(end_ms)))
            )
        writer = ResultTableWriter(workspace, app.name, table)
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


def decoded_archive(spark: SparkSession, workspace: Workspace, source: InputTable) -> DataFrame:
    """Every archived record of input `source`, decoded by the code of a live read.

    Records that do not decode are left out, and not routed anywhere.
    """
    return read_batch(
        spark,
        workspace,
        source.stream,
        source.schema,
        time=source.time,
        start_ms=_EARLIEST_MS,
        end_ms=_LATEST_MS,
        route_dead_letters=False,
        kafka_records=read_archive(spark, workspace, source.stream),
    ).records


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
