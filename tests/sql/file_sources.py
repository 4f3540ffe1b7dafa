"""Running a SQL app over records a test gives, read from JSON files instead of the bus.

For the tests whose subject is what the compiler makes of an app (windows, aggregates,
lateness, functions, the errors it reports), not how an app reads and writes streams.
`run_from_files` writes each input table's records to files, one file per micro-batch,
compiles the app over them (`compile_app(..., sources=...)`), runs its result tables and
inserts on Spark until every file is read, and returns the rows each wrote: no topic, no
dead-letter routing, no Delta table. `compile_from_files` gives the compiled app over the
records as a batch, as a batch run (`run_sql_app_batch`) compiles it. Reading and writing
the bus (record ids, dead letters, record times, exactly-once) is tested through
`SqlAppTester` and the app runtime.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import StreamingQuery

from millrace.config.workspace import Workspace
from millrace.engine.progress import late_rows, watch
from millrace.engine.session import state_store
from millrace.engine.streams import RECORD_TIME
from millrace.records import event_time_ms
from millrace.sql.compiler import CompiledApp, compile_app
from millrace.sql.parser import InputTable, SqlApp, parse_app

CLOSING_ID = "closing"
"""The id of the record appended to each input to close the last windows: a day after the
latest record, past every window and lateness of the apps tested."""
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class FileRun:
    """What a run wrote: each result table's rows and each insert's records (without the
    closing record), by the names the app uses, and the rows each table dropped as late."""

    tables: dict[str, list[dict[str, Any]]]
    streams: dict[str, list[dict[str, Any]]]
    late_rows: dict[str, int]


def run_from_files(
    spark: SparkSession,
    workspace: Workspace,
    app: SqlApp | str,
    records: Mapping[str, Iterable[Mapping[str, Any]]],
    *,
    batch_size: int | None = None,
) -> FileRun:
    """Run `app` over `records` (input table name → events) as `SqlAppTester.run` does on
    streams.

    A closing record follows each input's events, so that 'final' tables write every window
    holding them. All of an input's records are one micro-batch, or, with `batch_size`,
    micro-batches of at most that many, in the order given. Raises the `SqlError` that
    compiling the app raises.

    Example:
        >>> run_from_files(spark, workspace, APP, {"clicks": clicks}).tables["sliding"]
        [{'window_start': datetime.datetime(2026, 1, 1, 0, 0), ...}, ...]
    """
    if isinstance(app, str):
        app = parse_app(app)
    folder = _run_folder(workspace, app)
    sources = {
        source.name: _streaming(spark, source, _write_batches(folder, source, records, batch_size))
        for source in app.inputs
    }
    compiled = compile_app(spark, workspace, app, sources=sources)
    watch(spark)
    tables: dict[str, list[dict[str, Any]]] = {name: [] for name in compiled.tables}
    streams: dict[str, list[dict[str, Any]]] = {name: [] for name in compiled.inserts}
    with state_store(spark, app.state_store):
        table_queries = {
            table.name: _collect(
                compiled.tables[table.name],
                "append" if table.mode == "final" else "update",
                folder / "checkpoints" / f"table.{table.name}",
                tables[table.name],
            )
            for table in app.tables
        }
        insert_queries = [
            _collect(rows, "append", folder / "checkpoints" / f"insert.{stream}", streams[stream])
            for stream, rows in compiled.inserts.items()
        ]
    for query in [*table_queries.values(), *insert_queries]:
        query.awaitTermination()
    return FileRun(
        tables,
        {name: _values(written) for name, written in streams.items()},
        {name: late_rows(query) for name, query in table_queries.items()},
    )


def compile_from_files(
    spark: SparkSession,
    workspace: Workspace,
    app: SqlApp | str,
    records: Mapping[str, Iterable[Mapping[str, Any]]],
    *,
    start_ms: int,
    end_ms: int,
) -> CompiledApp:
    """`app` compiled in batch over the `records` whose event time is in `[start_ms, end_ms)`.

    Example:
        >>> compile_from_files(spark, workspace, app, {"sales": sales}, start_ms=0, end_ms=1)
        CompiledApp(...)
    """
    if isinstance(app, str):
        app = parse_app(app)
    folder = _run_folder(workspace, app)
    sources = {}
    for source in app.inputs:
        read = spark.read.schema(_schema(source)).json(
            str(_write_batches(folder, source, records, None, closing=False))
        )
        times = F.col(source.time)
        sources[source.name] = _timed(read, source).where(
            (times >= F.timestamp_millis(F.lit(start_ms)))
            & (times < F.timestamp_millis(F.lit(end_ms)))
        )
    return compile_app(spark, workspace, app, time_range=(start_ms, end_ms), sources=sources)


def _run_folder(workspace: Workspace, app: SqlApp) -> Path:
    return workspace.root / "sql-file-sources" / f"{app.name}-{uuid.uuid4().hex[:8]}"


def _write_batches(
    folder: Path,
    source: InputTable,
    records: Mapping[str, Iterable[Mapping[str, Any]]],
    batch_size: int | None,
    *,
    closing: bool = True,
) -> Path:
    """Write the records of input `source` to a folder of its own, a file per micro-batch."""
    now_ms = int(time.time() * 1000)
    lines = [
        # A record without a time is dated by its arrival, as a stream's reader dates it.
        {**event, source.time: event_time_ms(event, source.time) or now_ms, "record_id": str(n)}
        for n, event in enumerate(records.get(source.name, ()))
    ]
    if closing and lines:
        latest = max(line[source.time] for line in lines)
        lines.append({source.time: latest + _DAY_MS, "record_id": CLOSING_ID})
    inputs = folder / "inputs" / source.name
    inputs.mkdir(parents=True)
    starts = range(0, len(lines), batch_size or max(len(lines), 1))
    first_s = time.time() - len(starts)
    for number, start in enumerate(starts):
        path = inputs / f"{number:06}.json"
        batch = lines[start : start + starts.step]
        path.write_text("".join(json.dumps(line) + "\n" for line in batch))
        # Spark's file source takes the oldest files first: their times set the order.
        os.utime(path, (first_s + number, first_s + number))
    return inputs


def _schema(source: InputTable) -> str:
    columns = [source.schema, f"`{source.time}` BIGINT", "record_id STRING"]
    return ", ".join(column for column in columns if column)


def _streaming(spark: SparkSession, source: InputTable, inputs: Path) -> DataFrame:
    read = spark.readStream.schema(_schema(source)).option("maxFilesPerTrigger", 1)
    return _timed(read.json(str(inputs)), source)


def _timed(records: DataFrame, source: InputTable) -> DataFrame:
    """`records` with their time column a TIMESTAMP, as the compiler takes an input's."""
    return records.withColumn(source.time, F.timestamp_millis(F.col(source.time)))


def _collect(
    rows: DataFrame, mode: str, checkpoint: Path, into: list[dict[str, Any]]
) -> StreamingQuery:
    """Start a query that adds every row `rows` writes to `into`; it stops at the end of input."""

    def add(batch: DataFrame, _: int) -> None:
        into.extend(row.asDict(recursive=True) for row in batch.collect())

    return (
        rows.writeStream.outputMode(mode)
        .foreachBatch(add)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _values(written: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An insert's rows as its stream's records would hold them: without the record's id and
    time columns, nor the closing record."""
    return [
        {name: value for name, value in row.items() if name not in ("record_id", RECORD_TIME)}
        for row in written
        if row.get("record_id") != CLOSING_ID
    ]
