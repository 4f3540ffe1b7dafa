"""Running an app in the foreground, as `millrace run` does: streaming or once over a range.

A streaming run is the app's one driver (`millrace.runtime.drivers`), checked to start
(`millrace.runtime.lifecycle.check_start`); it prints a line per micro-batch and, on Ctrl-C or
SIGTERM, lets each query finish its running micro-batch before it stops. This module loads
Spark: the `run` verb imports it when it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click
from pyspark.sql.streaming import StreamingQuery

from millrace.bus.streams import dead_letter_stream
from millrace.cli.progress_lines import ProgressLines, QueryTotals
from millrace.cli.rows import count
from millrace.cli.times import iso
from millrace.config.workspace import Workspace
from millrace.engine.session import spark_session, stop_spark_session
from millrace.engine.triggers import Trigger
from millrace.engine.user_code import ship_with_tasks
from millrace.processor.loading import load_processor
from millrace.processor.processor import Processor
from millrace.runtime import checkpoints, drivers, lifecycle
from millrace.runtime.lifecycle import stop_gracefully
from millrace.runtime.processor_batch import run_processor_batch
from millrace.runtime.processors import start_processor_app
from millrace.runtime.sql_apps import run_sql_app_batch, start_sql_app, state_store_notices
from millrace.runtime.state_schema import Fingerprint, record_state
from millrace.sql.parser import SqlApp, load_app

_PROGRESS_EVERY_S = 2.0


def stream_sql_app(
    app_file: Path, trigger: Trigger | None, master: str | None, force: bool, fresh: bool
) -> None:
    """Run the SQL app in `app_file` until it stops, printing its progress (`millrace run FILE`)."""
    app = load_app(app_file)
    workspace = _workspace(master)
    described = lifecycle.describe_sql(app, app_file)
    with _driver(workspace, described, force=force, fresh=fresh):
        _drive_sql(workspace, app, described.fingerprint, trigger)


def stream_processor(
    target: str, trigger: Trigger | None, master: str | None, force: bool, fresh: bool
) -> None:
    """Run the processor `target` until it stops, printing its progress (`millrace run X:Y`)."""
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
                if echo_progress(running.queries, lines):
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
        echo_progress(running.queries, lines)
        for query in running.queries:
            click.echo(lines.totals.get(query.name, QueryTotals()).summary(query.name))
        echo_dead_letters(app, running.dead_letters())
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
                if echo_progress([running.query], lines):
                    checkpoints.remember(workspace, processor.name)
                stopping.wait(_PROGRESS_EVERY_S)
        except KeyboardInterrupt:
            stopping.set()
        if stopping.is_set():
            click.echo("stopping once the running micro-batch is done...")
            stop_gracefully([running.query])
        running.await_termination()
        echo_progress([running.query], lines)
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


def batch_processor(target: str, start_ms: int, end_ms: int, master: str | None) -> None:
    """Run the processor `target` once over its inputs' records from `start_ms` to `end_ms`."""
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
    click.echo(f"processor {processor.name!r} ran over {iso(start_ms)} to {iso(end_ms)}")
    click.echo(
        f"{count(result.productions, 'production')}, {count(result.dead_letters, 'dead letter')}"
    )


def batch_sql_app(app_file: Path, start_ms: int, end_ms: int, master: str | None) -> None:
    """Run the SQL app in `app_file` once over its inputs' records from `start_ms` to `end_ms`."""
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
    click.echo(f"app {app.name!r} ran over {iso(start_ms)} to {iso(end_ms)}")
    for table, rows in result.tables.items():
        click.echo(f"table {table}: {count(rows, 'row')} merged")
    for stream, records in result.streams.items():
        click.echo(f"stream {stream}: {count(records, 'record')} written")
    echo_dead_letters(app, result.dead_letters)


def echo_dead_letters(app: SqlApp, dead_letters: dict[str, int]) -> None:
    """Print, for each input of `app`, how many bad records went to its dead-letter stream."""
    for source in app.inputs:
        click.echo(
            f"input {source.name}: {count(dead_letters.get(source.name, 0), 'bad record')} "
            f"routed to {dead_letter_stream(source.stream)}"
        )


def echo_progress(queries: list[StreamingQuery], lines: ProgressLines) -> bool:
    """Print a line for each micro-batch the queries finished since the last look.

    Returns whether any had.
    """
    printed = False
    for query in queries:
        for line in lines.new_batches(query):
            click.echo(line)
            printed = True
    return printed
