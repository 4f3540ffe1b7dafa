"""CLI verbs for SQL apps: `millrace check`, `millrace run` and `millrace query`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from millrace.config.workspace import Workspace
from millrace.engine.session import spark_session, stop_spark_session
from millrace.runtime.sql_apps import explain_sql_app, query_result_table, start_sql_app
from millrace.sql.parser import load_app

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
@click.argument("app_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--available-now", is_flag=True, help="Process what the inputs hold now, then stop.")
def run(app_file: Path, available_now: bool) -> None:
    """Run the SQL app in APP_FILE in the foreground, printing progress, until Ctrl-C."""
    app = load_app(app_file)
    workspace = Workspace.locate().require_initialized()
    spark = spark_session(workspace.settings, app.name)
    try:
        running = start_sql_app(spark, workspace, app, available_now=available_now)
        click.echo(f"app {app.name!r} running: {len(running.queries)} queries (Ctrl-C stops)")
        seen: dict[str, int] = {}
        while any(query.isActive for query in running.queries):
            for query in running.queries:
                progress = query.lastProgress
                if progress and seen.get(query.name) != progress["batchId"]:
                    seen[query.name] = progress["batchId"]
                    click.echo(_progress_line(query.name, progress))
            time.sleep(_PROGRESS_EVERY_S)
        for query in running.queries:
            query.awaitTermination()
    except KeyboardInterrupt:
        click.echo("stopping...")
    finally:
        stop_spark_session()


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


def _progress_line(name: str, progress: dict) -> str:
    watermark = progress.get("eventTime", {}).get("watermark", "-")
    rate = progress.get("processedRowsPerSecond", 0.0)
    return (
        f"{name}: batch {progress['batchId']}, {progress['numInputRows']} rows "
        f"({rate:.0f}/s), watermark {watermark}"
    )
