"""CLI verbs for the warehouse: `millrace archive`, `millrace backfill`, `millrace sql`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from millrace.cli.rows import cell, json_line
from millrace.cli.times import epoch_ms
from millrace.config.workspace import ARCHIVE_APP, Workspace
from millrace.errors import QueryTooBigError
from millrace.warehouse.layout import streams_marked_for_archive

if TYPE_CHECKING:
    from millrace.warehouse.adhoc_query import QueryResult

_PROGRESS_EVERY_S = 2.0


@click.command()
@click.argument("streams", nargs=-1)
@click.option("--all", "all_marked", is_flag=True, help="Every stream created with --archive.")
@click.option("--available-now", is_flag=True, help="Archive what the streams hold now, then stop.")
@click.option(
    "--time",
    "time_field",
    help="The value's field holding the event time, for event_date (default: events.time_field).",
)
def archive(
    streams: tuple[str, ...], all_marked: bool, available_now: bool, time_field: str | None
) -> None:
    """Archive STREAMS exactly-once into the warehouse, until Ctrl-C.

    Each stream's records go, as the bus stored them, to the Delta table
    <workspace>/warehouse/<stream>, partitioned by event date. A job that is stopped and
    started again goes on from where it stopped, writing no record twice.
    """
    from millrace.apps.progress_lines import ProgressLines, count
    from millrace.engine.progress import watch
    from millrace.engine.session import command_session
    from millrace.warehouse.archive import read_archive, start_archive

    workspace = Workspace.locate().require_initialized()
    names = list(dict.fromkeys([*streams, *(streams_marked_for_archive(workspace) * all_marked)]))
    if not names:
        raise click.UsageError("name the streams to archive, or give --all")
    with command_session(workspace.settings, "millrace-archive") as spark:
        watch(spark)
        try:
            queries = [
                start_archive(
                    spark, workspace, name, available_now=available_now, time_field=time_field
                )
                for name in names
            ]
            click.echo(f"archiving {', '.join(names)} (Ctrl-C stops)")
            lines = ProgressLines(ARCHIVE_APP)
            while any(query.isActive for query in queries):
                lines.say_new(queries, click.echo)
                time.sleep(_PROGRESS_EVERY_S)
            for query in queries:
                query.awaitTermination()
            lines.say_new(queries, click.echo, stopped=True)
            for name in names:
                records = read_archive(spark, workspace, name).count()
                path = workspace.archive(name)
                click.echo(f"stream {name}: {count(records, 'record')} in {path}")
        except KeyboardInterrupt:
            click.echo("stopping...")


@click.command()
@click.argument("app")
@click.option("--from", "start", required=True, help="The first event time, ISO-8601 or epoch ms.")
@click.option("--to", "end", required=True, help="The end of the range, not included.")
@click.option(
    "--into",
    "into",
    multiple=True,
    required=True,
    help="A result table or output stream of APP to write; may be repeated.",
)
def backfill(app: str, start: str, end: str, into: tuple[str, ...]) -> None:
    """Re-run APP in batch over the archived records from --from to --to.

    APP is a SQL app's file, or a processor as module:Class or file.py:Class. Its inputs
    are read from the warehouse and decoded by the code
    of its streaming run; the outputs named by --into get the same final results as the
    streaming run, merged by key, so running a backfill again changes nothing.
    """
    from millrace.apps.backfill import backfill as run_backfill
    from millrace.cli.apps import echo_batch
    from millrace.engine.session import command_session

    start_ms, end_ms = epoch_ms("--from", start), epoch_ms("--to", end)
    if start_ms >= end_ms:
        raise click.UsageError(f"--to ({end}) must come after --from ({start})")
    workspace = Workspace.locate().require_initialized()
    with command_session(workspace.settings, "millrace-backfill") as spark:
        result = run_backfill(spark, workspace, app, start_ms=start_ms, end_ms=end_ms, into=into)
    echo_batch(result, "backfilled")


@click.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
@click.option(
    "--app",
    "app_sources",
    multiple=True,
    metavar="APP",
    help="An app whose archived inputs to add, decoded, as <app>__<input>; may be repeated.",
)
@click.option("--limit", type=int, default=1000, show_default=True, help="Rows to print at most.")
@click.option("--spark", "on_spark", is_flag=True, help="Answer with Spark, not in this process.")
def sql(
    query: str, as_json: bool, app_sources: tuple[str, ...], limit: int, on_spark: bool
) -> None:
    """Run the Spark SQL QUERY over the warehouse and the SQL apps' result tables.

    Tables: warehouse__<stream> for each archived stream (value as JSON text) and
    <app>__<table> for each result table; a '.' or '-' in a name becomes '_'. --app takes a
    SQL app's file (its input tables, decoded) or a processor as module:Class or
    file.py:Class (its input streams, with the event time it reads). DuckDB answers in this
    process, in well under a second; Spark answers with --spark, with --app (it decodes
    with the app's own code) and when the tables hold more than sql.local_max_mb. The last
    line names the engine that answered.
    """
    from millrace.warehouse.local_sql import run_local_query

    workspace = Workspace.locate().require_initialized()
    started = time.monotonic()
    try:
        if on_spark or app_sources:
            result = _run_on_spark(workspace, query, app_sources, limit)
        else:
            result = run_local_query(workspace, query, limit=limit)
    except QueryTooBigError:
        result = _run_on_spark(workspace, query, app_sources, limit)
    answered = _answered(result, time.monotonic() - started)
    if as_json:
        for row in result.rows:
            click.echo(json_line(row))
        click.echo(answered, err=True)
        return
    print_table(result)
    click.echo(answered)


def _run_on_spark(
    workspace: Workspace, query: str, app_sources: tuple[str, ...], limit: int
) -> QueryResult:
    from millrace.apps.app import App
    from millrace.engine.session import command_session
    from millrace.warehouse.adhoc_sql import run_query

    apps = [App.load(source) for source in app_sources]
    with command_session(workspace.settings, "millrace-sql") as spark:
        views = {
            name: view for app in apps for name, view in app.input_views(spark, workspace).items()
        }
        return run_query(spark, workspace, query, views=views, limit=limit)


def _answered(result: QueryResult, seconds: float) -> str:
    """The line after the rows: how many, whether more matched, which engine, how long."""
    rows = f"{len(result.rows)} row{'' if len(result.rows) == 1 else 's'}"
    more = "" if result.complete else " (more matched: a higher --limit shows them)"
    return f"{rows}{more}, answered by {result.engine} in {seconds:.2f} s"


def print_table(result: QueryResult) -> None:
    """Print the rows of `result` as a table."""
    table = Table(*result.columns)
    for row in result.rows:
        table.add_row(*(cell(row[column]) for column in result.columns))
    Console(soft_wrap=True).print(table)
