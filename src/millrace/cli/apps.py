"""CLI verbs for SQL apps: `millrace check`, `millrace run` (or `run --batch`), `millrace query`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from millrace.cli.rows import json_line
from millrace.cli.times import epoch_ms
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import ConfigError
from millrace.runtime import registry
from millrace.runtime.app_sources import source_kind
from millrace.runtime.registry import DEPLOYED_APP_ENV


@click.command()
@click.argument("app_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(app_file: Path) -> None:
    """Validate the SQL app in APP_FILE against the bus and print its Spark plans."""
    from millrace.engine.session import spark_session, stop_spark_session
    from millrace.runtime.sql_apps import explain_sql_app
    from millrace.sql.compiler import require_streaming_aggregates
    from millrace.sql.parser import load_app

    app = load_app(app_file)
    require_streaming_aggregates(app)
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
@click.option(
    "--trigger", help="micro-batch (default), interval:10s, available-now or real-time[:5m]."
)
@click.option("--master", help="Spark master URL, such as spark://127.0.0.1:7077.")
@click.option("--force", is_flag=True, help="Start even if the state schema looks incompatible.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Start over: move the checkpoint under <workspace>/apps/APP/backups/ first.",
)
def run(
    app: str,
    available_now: bool,
    batch: bool,
    start: str | None,
    end: str | None,
    trigger: str | None,
    master: str | None,
    force: bool,
    fresh: bool,
) -> None:
    """Run APP in the foreground, printing progress, until Ctrl-C (or SIGTERM).

    APP is a SQL app's file, or a processor as module:Class or path/to/file.py:Class.
    With --batch, run the app once over the records of its inputs whose event time is from
    --from up to --to, into the same result tables and streams, and print what it wrote.
    Ctrl-C or SIGTERM lets each query finish its running micro-batch, then stops the app.

    One driver runs an app at a time: a run of an app that runs already (in a terminal or
    deployed) is refused. So is one whose queries ran before but lost their checkpoints: they
    would write all their output again; --fresh starts every query over on purpose.
    """
    deployed = os.environ.get(DEPLOYED_APP_ENV)
    try:
        _run(app, available_now, batch, start, end, trigger, master, force, fresh)
    except BaseException as error:
        if deployed:
            code = error.code if isinstance(error, SystemExit) else 1
            registry.record_exit(Workspace.locate(), deployed, code if isinstance(code, int) else 1)
        raise
    if deployed:
        registry.record_exit(Workspace.locate(), deployed, 0)


def _run(
    app: str,
    available_now: bool,
    batch: bool,
    start: str | None,
    end: str | None,
    trigger_text: str | None,
    master: str | None,
    force: bool,
    fresh: bool,
) -> None:
    from millrace.cli import foreground

    if available_now and trigger_text is not None:
        raise click.UsageError("use --available-now or --trigger, not both")
    trigger = Trigger("available-now") if available_now else None
    if trigger_text is not None:
        try:
            trigger = Trigger.parse(trigger_text)
        except ConfigError as error:
            raise click.BadParameter(error.message, param_hint="--trigger") from None
    processor = source_kind(app) == "processor"
    app_file = Path(app)
    if not processor and not app_file.is_file():
        raise click.UsageError(
            f"no file {app!r}: give a SQL app's file, or a processor as module:Class"
        )
    if not batch:
        if start is not None or end is not None:
            raise click.UsageError("--from and --to go with --batch")
        if processor:
            foreground.stream_processor(app, trigger, master, force, fresh)
        else:
            foreground.stream_sql_app(app_file, trigger, master, force, fresh)
        return
    if fresh:
        raise click.UsageError("--fresh goes with streaming runs, not --batch")
    if available_now:
        raise click.UsageError("use --batch or --available-now, not both")
    if trigger is not None:
        raise click.UsageError("--trigger goes with streaming runs, not --batch")
    if start is None or end is None:
        raise click.UsageError("--batch needs --from and --to, such as --from 2026-01-01T00:00:00Z")
    start_ms, end_ms = epoch_ms("--from", start), epoch_ms("--to", end)
    if start_ms >= end_ms:
        raise click.UsageError(f"--to ({end}) must come after --from ({start})")
    if processor:
        foreground.batch_processor(app, start_ms, end_ms, master)
    else:
        foreground.batch_sql_app(app_file, start_ms, end_ms, master)


@click.command()
@click.argument("table")
@click.option("--where", "conditions", multiple=True, help="COLUMN=VALUE; may be repeated.")
@click.option("--last", type=int, help="Only the last N windows.")
def query(table: str, conditions: tuple[str, ...], last: int | None) -> None:
    """Print rows of a SQL app's result table TABLE, named APP.TABLE, as JSON lines."""
    from millrace.runtime.result_files import read_result_rows

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
    for row in read_result_rows(workspace, app, name, where=where, last=last):
        click.echo(json_line(row))
