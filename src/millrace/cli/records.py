"""CLI verbs that move records: `millrace publish`, `millrace tail`, `millrace pipe`."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import IO

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

from millrace.bus.pipe import pipe_to_command
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart
from millrace.bus.reader import tail as tail_records
from millrace.config.durations import parse_duration_ms
from millrace.config.workspace import Workspace
from millrace.errors import PublishError

_MAX_LINE_ERRORS_SHOWN = 50


@click.command()
@click.argument("stream")
@click.argument("source", type=click.File("rb"), default="-")
@click.option("--key", "key_field", help="Field of each event to use as its routing key.")
@click.option("--time-field", help="Field holding the event time [default: events.time_field].")
def publish(stream: str, source: IO[bytes], key_field: str | None, time_field: str | None) -> None:
    """Publish JSON Lines from SOURCE (a file, or - for stdin) to STREAM.

    Each line must be one JSON object. A line that is not is reported with its line number
    and not sent; the other lines still go, and the exit status is 1.
    """
    workspace = _workspace()
    stderr = Console(stderr=True)
    failed = 0
    with (
        Publisher(stream, settings=workspace.settings, time_field=time_field) as publisher,
        _progress(stderr, source) as (progress, task),
    ):
        for number, line in enumerate(source, start=1):
            progress.advance(task, len(line))
            if not line.strip():
                continue
            try:
                event = json.loads(line)
                if not isinstance(event, dict):
                    raise PublishError(f"not a JSON object but {type(event).__name__}")
                key = None if key_field is None else _key(event, key_field)
                publisher.send(event, key=key)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                failed += 1
                _report_line(stderr, failed, number, f"not valid JSON: {error}")
            except PublishError as error:
                failed += 1
                _report_line(stderr, failed, number, error.message)
    click.echo(
        f"published {publisher.delivered} events to {stream!r}"
        + (f"; {failed} lines failed and were not sent" if failed else "")
    )
    if failed:
        sys.exit(1)


@click.command()
@click.argument("stream")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest kept record.")
@click.option("--since", help="Start at records that arrived within this: 10m, 2h, 1d...")
@click.option(
    "--lines",
    "-n",
    default=10,
    show_default=True,
    help="Without --from-beginning or --since: the last N records of each bucket.",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new records until Ctrl-C.")
def tail(stream: str, from_beginning: bool, since: str | None, lines: int, follow: bool) -> None:
    """Print records of STREAM as JSON lines: bucket, offset, time, key, id and value."""
    if from_beginning and since:
        raise click.UsageError("use --from-beginning or --since, not both")
    since_ms = None
    if since is not None:
        since_ms = int(time.time() * 1000) - parse_duration_ms(since, what="--since")
    start = TailStart(from_beginning=from_beginning, since_ms=since_ms, lines=lines)
    for record in tail_records(stream, start, follow=follow, settings=_workspace().settings):
        click.echo(
            json.dumps(
                {
                    "bucket": record.bucket,
                    "offset": record.offset,
                    "time_ms": record.time_ms,
                    "key": record.key,
                    "id": record.id,
                    "value": record.value,
                },
                ensure_ascii=False,
            )
        )


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("stream")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--group", help="Consumer group whose checkpoints are kept [default: pipe-STREAM].")
@click.option(
    "--checkpoint-every",
    default=1000,
    show_default=True,
    help="Checkpoint after this many records.",
)
@click.option("--follow", "-f", is_flag=True, help="Keep piping new records until Ctrl-C.")
def pipe(
    stream: str, command: tuple[str, ...], group: str | None, checkpoint_every: int, follow: bool
) -> None:
    """Feed STREAM's records as JSON lines to COMMAND's stdin: millrace pipe S -- CMD ARGS.

    Resumes after the last checkpoint of the group. When COMMAND fails, the records since the
    last checkpoint are piped again next time (at-least-once).
    """
    result = pipe_to_command(
        stream,
        group or f"pipe-{stream}",
        list(command),
        settings=_workspace().settings,
        checkpoint_every=checkpoint_every,
        follow=follow,
    )
    click.echo(
        f"piped {result.records} records to {command[0]!r}"
        + (
            f"; {result.dead_letters} undecodable records went to {stream}.dlq"
            if result.dead_letters
            else ""
        ),
        err=True,
    )
    if result.exit_code != 0:
        click.echo(
            f"{command[0]!r} exited with status {result.exit_code}; the records since "
            "the last checkpoint will be piped again",
            err=True,
        )
        sys.exit(result.exit_code)


def _key(event: dict, key_field: str) -> str | None:
    value = event.get(key_field)
    return None if value is None else str(value)


def _report_line(stderr: Console, failed: int, number: int, message: str) -> None:
    if failed <= _MAX_LINE_ERRORS_SHOWN:
        stderr.print(f"line {number}: {message}; not sent", markup=False, highlight=False)
    elif failed == _MAX_LINE_ERRORS_SHOWN + 1:
        stderr.print("more failed lines are counted but not shown", highlight=False)


@contextlib.contextmanager
def _progress(console: Console, source: IO[bytes]) -> Iterator[tuple[Progress, TaskID]]:
    """A progress bar over the bytes of `source`, on stderr, shown only on a terminal."""
    total = None
    if source.seekable():
        total = source.seek(0, 2)
        source.seek(0)
    with Progress(
        TextColumn("publishing"),
        BarColumn(),
        TransferSpeedColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as progress:
        yield progress, progress.add_task("publish", total=total)


def _workspace() -> Workspace:
    return Workspace.locate().require_initialized()
