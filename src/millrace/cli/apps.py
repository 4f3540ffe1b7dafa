"""CLI verbs for apps: `millrace check`, `millrace run` (or `run --batch`), `millrace query`.

`run` parses its options, loads the app (`millrace.apps.app`) and hands it to its driver
(`millrace.ops.lifecycle.run`), which prints its progress; both load Spark, so they are
imported when `run` runs, while Spark's JVM starts in the background (`start_jvm_early`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import click

from millrace.apps.options import RunOptions
from millrace.apps.sources import require_source
from millrace.cli.rows import json_line
from millrace.cli.times import epoch_ms, iso
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import ConfigError, LifecycleError

if TYPE_CHECKING:
    from millrace.apps.app import BatchResult


@click.command()
@click.argument("app")
def check(app: str) -> None:
    """Validate APP against the bus and print its Spark plans, without running it.

    APP is a SQL app's file, or a processor as module:Class or path/to/file.py:Class.
    """
    from millrace.apps.app import App
    from millrace.engine.session import command_session

    loaded = App.load(app)
    loaded.require_streamable()
    workspace = Workspace.locate().require_initialized()
    with command_session(workspace.settings, loaded.name) as spark:
        plans = loaded.explain(spark, workspace)
    for output, plan in plans.items():
        click.echo(f"== {output} ==\n{plan}")
    click.echo(f"{app}: app {loaded.name!r} is valid")


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
    help="Start over: move the checkpoint under <workspace>/apps/APP/backups/ first "
    "(<storage.root>/backups/APP/ when storage.root is set).",
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
    if available_now and trigger is not None:
        raise click.UsageError("use --available-now or --trigger, not both")
    parsed = Trigger("available-now") if available_now else None
    if trigger is not None:
        try:
            parsed = Trigger.parse(trigger)
        except ConfigError as error:
            raise click.BadParameter(error.message, param_hint="--trigger") from None
    try:
        require_source(app)
    except LifecycleError as error:
        raise click.UsageError(f"{error.message}: {error.hint}") from None
    if not batch:
        if start is not None or end is not None:
            raise click.UsageError("--from and --to go with --batch")
        _stream(app, RunOptions(parsed or Trigger(), master, force), fresh)
        return
    if fresh:
        raise click.UsageError("--fresh goes with streaming runs, not --batch")
    if available_now:
        raise click.UsageError("use --batch or --available-now, not both")
    if parsed is not None:
        raise click.UsageError("--trigger goes with streaming runs, not --batch")
    if start is None or end is None:
        raise click.UsageError("--batch needs --from and --to, such as --from 2026-01-01T00:00:00Z")
    start_ms, end_ms = epoch_ms("--from", start), epoch_ms("--to", end)
    if start_ms >= end_ms:
        raise click.UsageError(f"--to ({end}) must come after --from ({start})")
    _batch(app, start_ms, end_ms, master)


def _stream(source: str, options: RunOptions, fresh: bool) -> None:
    from millrace.engine.session import start_jvm_early

    workspace = Workspace.locate().require_initialized()
    # Spark's JVM starts while the app loads and its checks run.
    start_jvm_early(options.on_master(workspace).settings)

    from millrace.apps.app import App
    from millrace.ops import lifecycle

    app = App.load(source)
    app.require_streamable()
    lifecycle.run(workspace, app, options, fresh=fresh, say=click.echo)


def _batch(source: str, start_ms: int, end_ms: int, master: str | None) -> None:
    from millrace.apps import runner
    from millrace.apps.app import App

    app = App.load(source)
    workspace = RunOptions(master=master).on_master(Workspace.locate().require_initialized())
    result = runner.run_batch(workspace, app, start_ms=start_ms, end_ms=end_ms)
    echo_batch(result, "ran")


def echo_batch(result: BatchResult, done: Literal["ran", "backfilled"]) -> None:
    """Print what a batch run (`run --batch`) or a backfill of an app wrote.

    Example:
        >>> from millrace.apps.app import BatchResult
        >>> day = BatchResult("top_events", "sql", 1_767_225_600_000, 1_767_312_000_000,
        ...                   tables={"top_events_5min": 288})
        >>> echo_batch(day, "ran")
        app 'top_events' ran over 2026-01-01T00:00:00Z to 2026-01-02T00:00:00Z
        table top_events_5min: 288 rows merged
    """
    for line in result.lines(f"over {iso(result.start_ms)} to {iso(result.end_ms)}", done):
        click.echo(line)


@click.command()
@click.argument("table")
@click.option("--where", "conditions", multiple=True, help="COLUMN=VALUE; may be repeated.")
@click.option("--last", type=int, help="Only the last N windows.")
def query(table: str, conditions: tuple[str, ...], last: int | None) -> None:
    """Print rows of a SQL app's result table TABLE, named APP.TABLE, as JSON lines."""
    from millrace.warehouse.result_tables import read_result_rows

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
