"""CLI verbs for SQL apps: `millrace check`, `millrace run` (or `run --batch`), `millrace query`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import click
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.records import event_time_ms
from millrace.bus.streams import dead_letter_stream
from millrace.cli.progress_lines import ProgressLines, QueryTotals, count
from millrace.cli.rows import json_line
from millrace.config.workspace import Workspace
from millrace.engine.session import spark_session, stop_spark_session
from millrace.engine.triggers import Trigger
from millrace.engine.user_code import ship_with_tasks
from millrace.errors import ConfigError, PublishError
from millrace.processor.loading import is_processor_target, load_processor
from millrace.processor.processor import Processor
from millrace.runtime import checkpoints, drivers, lifecycle, registry
from millrace.runtime.lifecycle import stop_gracefully
from millrace.runtime.processor_batch import run_processor_batch
from millrace.runtime.processors import start_processor_app
from millrace.runtime.registry import DEPLOYED_APP_ENV
from millrace.runtime.sql_apps import (
    explain_sql_app,
    query_result_table,
    run_sql_app_batch,
    start_sql_app,
    state_store_notices,
)
from millrace.runtime.state_schema import Fingerprint, record_state
from millrace.sql.compiler import require_streaming_aggregates
from millrace.sql.parser import SqlApp, load_app

_PROGRESS_EVERY_S = 2.0


@click.command()
@click.argument("app_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(app_file: Path) -> None:
    """Validate the SQL app in APP_FILE against the bus and print its Spark plans."""
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
    if available_now and trigger_text is not None:
        raise click.UsageError("use --available-now or --trigger, not both")
    trigger = Trigger("available-now") if available_now else None
    if trigger_text is not None:
        try:
            trigger = Trigger.parse(trigger_text)
        except ConfigError as error:
            raise click.BadParameter(error.message, param_hint="--trigger") from None
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
            _run_processor(app, trigger, master, force, fresh)
        else:
            _run_streaming(app_file, trigger, master, force, fresh)
        return
    if fresh:
        raise click.UsageError("--fresh goes with streaming runs, not --batch")
    if available_now:
        raise click.UsageError("use --batch or --available-now, not both")
    if trigger is not None:
        raise click.UsageError("--trigger goes with streaming runs, not --batch")
    if start is None or end is None:
        raise click.UsageError("--batch needs --from and --to, such as --from 2026-01-01T00:00:00Z")
    start_ms, end_ms = _epoch_ms("--from", start), _epoch_ms("--to", end)
    if start_ms >= end_ms:
        raise click.UsageError(f"--to ({end}) must come after --from ({start})")
    if processor:
        _run_processor_batch(app, start_ms, end_ms, master)
    else:
        _run_batch(app_file, start_ms, end_ms, master)


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
        click.echo(json_line(row))


def _run_streaming(
    app_file: Path, trigger: Trigger | None, master: str | None, force: bool, fresh: bool
) -> None:
    app = load_app(app_file)
    workspace = _workspace(master)
    described = lifecycle.describe_sql(app, app_file)
    with _driver(workspace, described, force=force, fresh=fresh):
        _drive_sql(workspace, app, described.fingerprint, trigger)


def _run_processor(
    target: str, trigger: Trigger | None, master: str | None, force: bool, fresh: bool
) -> None:
    processor = load_processor(target)
    ship_with_tasks(sys.modules[processor.__module__])
    workspace = _workspace(master)
    described = lifecycle.describe_processor(processor, target)
    with _driver(workspace, described, force=force, fresh=fresh):
        _drive_processor(workspace, processor, described.fingerprint, trigger)


@contextlib.contextmanager
def _driver(
    workspace: Workspace, described: lifecycle.AppSource, *, force: bool, fresh: bool
) -> Iterator[None]:
    """Be the app's one driver for the run, checked to start (`lifecycle.check_start`).

    Before Spark starts: the driver lock is taken (or kept, from `deploy`), the checkpoint
    moved aside with `fresh`, and the start checked. Once it passed, the queries that commit
    batches are recorded as they do (`_drive_*`) and at the end, however the run ends.
    """
    lock = drivers.hold(workspace, described.name, source=described.source)
    try:
        if fresh:
            moved = lifecycle.start_over(workspace, described.name)
            if moved is not None:
                click.echo(f"starting over: the checkpoint was moved to {moved}")
        lifecycle.check_start(workspace, described, force=force)
        try:
            yield
        finally:
            checkpoints.remember(workspace, described.name)
    finally:
        lock.release()


def _drive_sql(
    workspace: Workspace, app: SqlApp, fingerprint: Fingerprint, trigger: Trigger | None
) -> None:
    # Installed before Spark starts, which takes the longest: a stop then waits for no batch.
    stopping = _stop_on_sigterm()
    spark = spark_session(workspace.settings, app.name)
    try:
        notices = state_store_notices(workspace, app)
        running = start_sql_app(spark, workspace, app, trigger=trigger)
        record_state(workspace, app.name, fingerprint)
        click.echo(f"app {app.name!r} running: {len(running.queries)} queries (Ctrl-C stops)")
        for notice in notices:
            click.echo(f"note: {notice}")
        lines = ProgressLines(app.name)
        try:
            while any(query.isActive for query in running.queries) and not stopping.is_set():
                if _echo_progress(running.queries, lines):
                    checkpoints.remember(workspace, app.name)
                stopping.wait(_PROGRESS_EVERY_S)
        except KeyboardInterrupt:
            stopping.set()
        if stopping.is_set():
            click.echo("stopping once the running micro-batches are done...")
            stop_gracefully(running.queries)
            running.stop()
        else:
            running.await_termination()
        # The last batches may have ended after the last look: their lines give the totals.
        _echo_progress(running.queries, lines)
        for query in running.queries:
            click.echo(lines.totals.get(query.name, QueryTotals()).summary(query.name))
        _echo_dead_letters(app, running.dead_letters())
        if stopping.is_set():
            click.echo("stopped")
    except KeyboardInterrupt:
        click.echo("stopping...")
    finally:
        stop_spark_session()


def _drive_processor(
    workspace: Workspace,
    processor: type[Processor],
    fingerprint: Fingerprint,
    trigger: Trigger | None,
) -> None:
    # Installed before Spark starts, which takes the longest: a stop then waits for no batch.
    stopping = _stop_on_sigterm()
    spark = spark_session(workspace.settings, processor.name)
    try:
        running = start_processor_app(spark, workspace, processor, trigger=trigger)
        record_state(workspace, processor.name, fingerprint)
        click.echo(f"processor {processor.name!r} running (Ctrl-C stops)")
        lines = ProgressLines(processor.name)
        try:
            while running.query.isActive and not stopping.is_set():
                if _echo_progress([running.query], lines):
                    checkpoints.remember(workspace, processor.name)
                stopping.wait(_PROGRESS_EVERY_S)
        except KeyboardInterrupt:
            stopping.set()
        if stopping.is_set():
            click.echo("stopping once the running micro-batch is done...")
            stop_gracefully([running.query])
        running.await_termination()
        _echo_progress([running.query], lines)
        read = lines.totals.get(running.query.name, QueryTotals()).read
        click.echo(
            f"{count(read, 'record')} read: "
            f"{count(running.productions, 'production')}, "
            f"{count(running.late, 'late record')} dropped, "
            f"{count(running.duplicates, 'duplicate')} dropped, "
            f"{count(running.dead_letters, 'dead letter')}"
        )
        if stopping.is_set():
            click.echo("stopped")
    except KeyboardInterrupt:
        click.echo("stopping...")
    finally:
        stop_spark_session()


def _workspace(master: str | None) -> Workspace:
    """The workspace, its Spark master replaced by `master` when one is given."""
    workspace = Workspace.locate().require_initialized()
    if master is None:
        return workspace
    return dataclasses.replace(
        workspace, settings=dataclasses.replace(workspace.settings, spark_master=master)
    )


def _stop_on_sigterm() -> threading.Event:
    """An event set when the process gets SIGTERM, as `millrace stop` sends it."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    return stopping


def _run_processor_batch(target: str, start_ms: int, end_ms: int, master: str | None) -> None:
    processor = load_processor(target)
    ship_with_tasks(sys.modules[processor.__module__])
    workspace = _workspace(master)
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
        f"{count(result.productions, 'production')}, {count(result.dead_letters, 'dead letter')}"
    )


def _run_batch(app_file: Path, start_ms: int, end_ms: int, master: str | None) -> None:
    app = load_app(app_file)
    workspace = _workspace(master)
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
        click.echo(f"table {table}: {count(rows, 'row')} merged")
    for stream, records in result.streams.items():
        click.echo(f"stream {stream}: {count(records, 'record')} written")
    _echo_dead_letters(app, result.dead_letters)


def _echo_dead_letters(app: SqlApp, dead_letters: dict[str, int]) -> None:
    for source in app.inputs:
        click.echo(
            f"input {source.name}: {count(dead_letters.get(source.name, 0), 'bad record')} "
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


def _iso(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _echo_progress(queries: list[StreamingQuery], lines: ProgressLines) -> bool:
    """Print a line for each micro-batch the queries finished since the last look.

    Returns whether any had.
    """
    printed = False
    for query in queries:
        for line in lines.new_batches(query):
            click.echo(line)
            printed = True
    return printed
