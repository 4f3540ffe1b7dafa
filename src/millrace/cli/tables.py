"""CLI verbs for serving tables: `millrace table create | list | get | delete`."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click

from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.errors import TableSpecError
from millrace.serving.tables import (
    SIMPLE_TYPES,
    TableSpec,
    create_table,
    describe_table,
    get_row,
    list_tables,
    parse_column,
)

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import StreamingQueryProgress

_PROGRESS_EVERY_S = 2.0
_TYPES = ", ".join(SIMPLE_TYPES)


@click.group()
def table() -> None:
    """Create, list, read and delete serving tables (key-value tables in Redis)."""


@table.command()
@click.argument("name")
@click.option(
    "--from-stream",
    "stream",
    help="Stream whose records feed the table; without it the table is only registered, "
    "for apps to write.",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    required=True,
    help=f"Key column, as name or name:TYPE (TYPE one of {_TYPES}; STRING when left out). "
    "Repeat for a key of several columns.",
)
@click.option(
    "--value", "values", multiple=True, help="Value column, as name or name:TYPE. Repeatable."
)
@click.option("--ttl", help="Rows expire this long after their last write: 10m, 12h, 7d...")
@click.option("--available-now", is_flag=True, help="Feed what the stream holds now, then stop.")
@click.option("--no-feed", is_flag=True, help="Register the table without running its feed.")
def create(
    name: str,
    stream: str | None,
    keys: tuple[str, ...],
    values: tuple[str, ...],
    ttl: str | None,
    available_now: bool,
    no_feed: bool,
) -> None:
    """Create serving table NAME and, with --from-stream, feed it until Ctrl-C.

    Example: millrace table create classifications --from-stream dimension_updates
    --key dimension_id --value topic --ttl 7d
    """
    from millrace.engine.session import command_session
    from millrace.serving.feeds import create_stream_table, start_table_feed

    workspace = Workspace.locate().require_initialized()
    key_columns = [parse_column(text, what="--key") for text in keys]
    value_columns = [parse_column(text, what="--value") for text in values]
    ttl_ms = parse_duration_ms(ttl, what="--ttl") if ttl else None
    if stream is None:
        if available_now:
            raise TableSpecError(
                "--available-now runs a feed, and the table has no --from-stream",
                hint="add --from-stream STREAM, or leave --available-now out",
            )
        spec = create_table(
            workspace.settings,
            TableSpec(name, tuple(key_columns), tuple(value_columns), ttl_ms, None, "apps"),
        )
        click.echo(f"created serving table {name!r}: {_columns(spec)}")
        return
    spec = create_stream_table(
        workspace, name, stream, keys=key_columns, values=value_columns, ttl_ms=ttl_ms
    )
    click.echo(f"serving table {name!r} fed from stream {stream!r}: {_columns(spec)}")
    if no_feed:
        return
    with command_session(workspace.settings, f"table.{name}") as spark:
        try:
            feed = start_table_feed(spark, workspace, name, available_now=available_now)
            click.echo(f"feeding {name!r} from {stream!r} (Ctrl-C stops; the table stays)")
            seen = -1
            while feed.query.isActive:
                seen = _echo_progress(feed.query.lastProgress, seen)
                time.sleep(_PROGRESS_EVERY_S)
            feed.await_termination()
            _echo_progress(feed.query.lastProgress, seen)
            click.echo(
                f"{feed.rows_written} rows written, {feed.dead_letters} records to {stream}.dlq"
            )
        except KeyboardInterrupt:
            click.echo("stopping...")


@table.command(name="list")
def list_() -> None:
    """List the serving tables with their columns, TTL and feed."""
    for spec in list_tables(Workspace.locate().settings):
        click.echo(f"{spec.name}: {_columns(spec)}")


@table.command()
@click.argument("name")
@click.argument("key", nargs=-1, required=True)
def get(name: str, key: tuple[str, ...]) -> None:
    """Print the row of table NAME with key KEY (one value per key column) as JSON."""
    settings = Workspace.locate().settings
    spec = describe_table(settings, name)
    row = get_row(settings, name, key if len(key) > 1 else key[0])
    if row is None:
        raise click.ClickException(
            f"no row with key {' '.join(key)} in serving table {spec.name!r} "
            "(never written, or expired)"
        )
    click.echo(json.dumps(row, ensure_ascii=False))


@table.command()
@click.argument("name")
def delete(name: str) -> None:
    """Delete serving table NAME: its rows, its spec and its feed's checkpoint."""
    from millrace.serving.feeds import delete_stream_table

    removed = delete_stream_table(Workspace.locate(), name)
    click.echo(f"deleted serving table {name!r} ({removed} rows)")


def _columns(spec: TableSpec) -> str:
    keys = ", ".join(f"{column} {kind}" for column, kind in spec.keys)
    values = ", ".join(f"{column} {kind}" for column, kind in spec.values) or "none"
    ttl = f", ttl {spec.ttl_ms // 1000} s" if spec.ttl_ms else ""
    return f"key {keys}; values {values}{ttl}; written by {spec.feeder or 'apps'}"


def _echo_progress(progress: StreamingQueryProgress | None, seen: int) -> int:
    if progress and progress.batchId != seen:
        rate = progress.get("processedRowsPerSecond", 0.0)
        click.echo(f"batch {progress.batchId}: {progress['numInputRows']} rows ({rate:.0f}/s)")
        return progress.batchId
    return seen
