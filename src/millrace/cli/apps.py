"""CLI verbs for SQL apps: `millrace check`, `millrace run` (or `run --batch`), `millrace query`."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import click
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.records import event_time_ms
from millrace.bus.streams import dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.engine.progress import late_rows
from millrace.engine.session import spark_session, stop_spark_session
from millrace.engine.user_code import ship_with_tasks
from millrace.errors import PublishError
from millrace.processor.loading import is_processor_target, load_processor
from millrace.runtime.processor_batch import run_processor_batch
from millrace.runtime.processors import start_processor_app
from millrace.runtime.sql_apps import (
    RunningApp,
    explain_sql_app,
    query_result_table,
    run_sql_app_batch,
    start_sql_app,
)
from millrace.sql.parser import SqlApp, load_app

_PROGRESS_EVERY_S = 2.0


@click.command()
@click.argument("app_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(app_file: Path) -> None:
    """Validate the SQL app in APP_FILE against the bus and print its Spark plans."""
    app = load_app(app_file)
    workspace = Workspace.locate().require_initialized()
    try:
        plans = explain_sql_app(spark_session(workspace.settings, app.name), workspace, app)
    finally:
        stop_spark_session()
    for output, plan in plans.items():
        click.echo(f"== {output} ==\n{plan}")
    click.echo(f"{app_file}: app {app.name!r} is valid")


@click.command()
@click.argument("app")
@click.option("--available-now", is_flag=True, help="Process what the inputs hold now, then stop.")
@click.option(
    "--batch", is_flag=True, help="Run once over the event times from --from to --to, then stop."
)
@click.option(
    "--from", "start", help="With --batch: the first event time, ISO-8601 or epoch ms (or s)."
)
@click.option("--to", "end", help="With --batch: the end of the range, not included.")
def run(app: str, available_now: bool, batch: bool, start: str | None, end: str | None) -> None:
    """Run APP in the foreground, printing progress, until Ctrl-C.

    APP is a SQL app's file, or a processor as module:Class or path/to/file.py:Class.
    With --batch, run the app once over the records of its inputs whose event time is from
    --from up to --to, into the same result tables and streams, and print what it wrote.
    """
    processor = is_processor_target(app) and not Path(app).exists()
    app_file = Path(app)
    if not processor and not app_file.is_file():
        raise click.UsageError(
            f"no file {app!r}: give a SQL app's file, or a processor as module:Class"
        )
    if not batch:
        if start is not None or end is not None:
            raise click.UsageError("--from and --to go with --batch")
        if processor:
            _run_processor(app, available_now)
        else:
            _run_streaming(app_file, available_now)
        return
    if available_now:
        raise click.UsageError("use --batch or --available-now, not both")
    if start is None or end is None:
        raise click.UsageError("--batch needs --from and --to, such as --from 2026-01-01T00:00:00Z")
    start_ms, end_ms = _epoch_ms("--from", start), _epoch_ms("--to", end)
    if start_ms >= end_ms:
        raise click.UsageError(f"--to ({end}) must come after --from ({start})")
    if processor:
        _run_processor_batch(app, start_ms, end_ms)
    else:
        _run_batch(app_file, start_ms, end_ms)


@click.command()
@click.argument("table")
@click.option("--where", "conditions", multiple=True, help="COLUMN=VALUE; may be repeated.")
@click.option("--last", type=int, help="Only the last N windows.")
def query(table: str, conditions: tuple[str, ...], last: int | None) -> None:
    """Print rows of a SQL app's result table TABLE, named APP.TABLE, as JSON lines."""
    app, _, name = table.partition(".")
    if not name:
        raise click.UsageError(f"name the table as APP.TABLE, got {table!r}")
    where = {}
    for condition in conditions:
        column, equals, value = condition.partition("=")
        if not equals:
            raise click.UsageError(f"--where takes COLUMN=VALUE, got {condition!r}")
        where[column] = value
    workspace = Workspace.locate().require_initialized()
    try:
        rows = query_result_table(
            spark_session(workspace.settings, "millrace-query"),
            workspace,
            app,
            name,
            where=where,
            last=last,
        )
    finally:
        stop_spark_session()
    for row in rows:
        click.echo(json.dumps(row, default=str, ensure_ascii=False))


def _run_streaming(app_file: Path, available_now: bool) -> None:
    app = load_app(app_file)
    workspace = Workspace.locate().require_initialized()
    spark = spark_session(workspace.settings, app.name)
    try:
        running = start_sql_app(spark, workspace, app, available_now=available_now)
        click.echo(f"app {app.name!r} running: {len(running.queries)} queries (Ctrl-C stops)")
        seen: dict[str, int] = {}
        while any(query.isActive for query in running.queries):
            _echo_progress(running, seen)
            time.sleep(_PROGRESS_EVERY_S)
        running.await_termination()
        # The last batches may have ended after the last look: their lines give the totals.
        _echo_progress(running, seen)
        _echo_dead_letters(app, running.dead_letters())
    except KeyboardInterrupt:
        click.echo("stopping...")
    finally:
        stop_spark_session()


def _run_processor(target: str, available_now: bool) -> None:
    processor = load_processor(target)
    ship_with_tasks(sys.modules[processor.__module__])
    workspace = Workspace.locate().require_initialized()
    spark = spark_session(workspace.settings, processor.name)
    try:
        running = start_processor_app(spark, workspace, processor, available_now=available_now)
        click.echo(f"processor {processor.name!r} running (Ctrl-C stops)")
        seen: dict[str, int] = {}
        while running.query.isActive:
            _echo_query_progress(running.query, seen)
            time.sleep(_PROGRESS_EVERY_S)
        running.await_termination()
        _echo_query_progress(running.query, seen)
        click.echo(
            f"{_count(running.productions, 'production')}, "
            f"{_count(running.late, 'late record')} dropped, "
            f"{_count(running.dead_letters, 'dead letter')}"
        )
    except KeyboardInterrupt:
        click.echo("stopping...")
    finally:
        stop_spark_session()


def _run_processor_batch(target: str, start_ms: int, end_ms: int) -> None:
    processor = load_processor(target)
    ship_with_tasks(sys.modules[processor.__module__])
    workspace = Workspace.locate().require_initialized()
    try:
        result = run_processor_batch(
            spark_session(workspace.settings, processor.name),
            workspace,
            processor,
            start_ms=start_ms,
            end_ms=end_ms,
        )
    finally:
        stop_spark_session()
    click.echo(f"processor {processor.name!r} ran over {_iso(start_ms)} to {_iso(end_ms)}")
    click.echo(
        f"{_count(result.productions, 'production')}, {_count(result.dead_letters, 'dead letter')}"
    )


def _run_batch(app_file: Path, start_ms: int, end_ms: int) -> None:
    app = load_app(app_file)
    workspace = Workspace.locate().require_initialized()
    try:
        result = run_sql_app_batch(
            spark_session(workspace.settings, app.name),
            workspace,
            app,
            start_ms=start_ms,
            end_ms=end_ms,
        )
    finally:
        stop_spark_session()
    click.echo(f"app {app.name!r} ran over {_iso(start_ms)} to {_iso(end_ms)}")
    for table, rows in result.tables.items():
        click.echo(f"table {table}: {_count(rows, 'row')} merged")
    for stream, records in result.streams.items():
        click.echo(f"stream {stream}: {_count(records, 'record')} written")
    _echo_dead_letters(app, result.dead_letters)


def _echo_dead_letters(app: SqlApp, dead_letters: dict[str, int]) -> None:
    for source in app.inputs:
        if dead_letters.get(source.name):
            click.echo(
                f"input {source.name}: {_count(dead_letters[source.name], 'bad record')} "
                f"routed to {dead_letter_stream(source.stream)}"
            )


def _epoch_ms(option: str, text: str) -> int:
    """`text` read as a record's time is: ISO-8601 (UTC without an offset) or an epoch number."""
    value: str | int = int(text) if text.isascii() and text.isdigit() else text
    try:
        time_ms = event_time_ms({option: value}, option)
    except PublishError:
        time_ms = None
    if time_ms is None:
        raise click.BadParameter(
            f"{text!r} is neither an ISO-8601 time such as 2026-01-01T00:00:00Z nor epoch "
            "milliseconds",
            param_hint=option,
        )
    return time_ms


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _iso(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _echo_progress(running: RunningApp, seen: dict[str, int]) -> None:
    """Print the progress of each query that finished a micro-batch since `seen` was updated."""
    for query in running.queries:
        late = late_rows(query) if query in running.tables.values() else None
        _echo_query_progress(query, seen, late)


def _echo_query_progress(
    query: StreamingQuery, seen: dict[str, int], late: int | None = None
) -> None:
    progress = query.lastProgress
    if progress and seen.get(query.name) != progress["batchId"]:
        seen[query.name] = progress["batchId"]
        click.echo(_progress_line(query.name, progress, late))


def _progress_line(name: str, progress: dict, late: int | None) -> str:
    watermark = progress.get("eventTime", {}).get("watermark", "-")
    rate = progress.get("processedRowsPerSecond", 0.0)
    line = (
        f"{name}: batch {progress['batchId']}, {progress['numInputRows']} rows "
        f"({rate:.0f}/s), watermark {watermark}"
    )
    return line if late is None else f"{line}, {_count(late, 'late row')} dropped"
