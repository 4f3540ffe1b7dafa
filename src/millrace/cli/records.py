"""CLI verbs that move records: `millrace publish`, `millrace tail`, `millrace pipe`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
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
from millrace.errors import DeliveryError, PublishError
from millrace.records import JsonObject

_MAX_LINE_ERRORS_SHOWN = 50


@click.command()
@click.argument("stream")
@click.argument("source", type=click.File("rb"), default="-")
@click.option("--key", "key_field", help="Field of each event to use as its routing key.")
@click.option("--time-field", help="Field holding the event time [default: events.time_field].")
@click.option(
    "--ids",
    type=click.Choice(["line", "random"]),
    help="Record ids: 'line' (the default for a file) hashes the stream, the file's path, the "
    "line's number and its text, so that a line sent again keeps its id and readers drop the "
    "copy; 'random' (the default for stdin) draws fresh ones.",
)
@click.option(
    "--lines",
    "only_lines",
    type=click.File("r"),
    help="Send only the lines whose numbers this file lists (N or N-M, one a line), such as "
    "the --failed-lines file of an earlier run.",
)
@click.option(
    "--failed-lines",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the numbers of the lines not stored here, one a line [default: when any "
    "failed, a file in the workspace's logs folder].",
)
def publish(
    stream: str,
    source: IO[bytes],
    key_field: str | None,
    time_field: str | None,
    ids: str | None,
    only_lines: IO[str] | None,
    failed_lines: Path | None,
) -> None:
    """Publish JSON Lines from SOURCE (a file, or - for stdin) to STREAM.

    Each line must be one JSON object, dated from 1970 on and no more than events.max_future
    ahead of now. A line that is not is reported with its number and not sent; the other
    lines still go, and the exit status is 1. So are lines the bus did not store (a broker
    failure): their numbers go to the --failed-lines file, and `--lines FILE` sends just
    those again. With --ids line, the default for a file, a line sent again keeps its record
    id, so that readers drop a copy of one that was stored after all.
    """
    workspace = _workspace()
    stderr = Console(stderr=True)
    stdin = source.name == "<stdin>"
    wanted = None if only_lines is None else _line_numbers(only_lines)
    id_of = _LineIds(stream, None if stdin else source.name, ids or ("random" if stdin else "line"))
    failed = _FailedLines(stderr, id_of)
    with (
        Publisher(
            stream, settings=workspace.settings, time_field=time_field, track_ids=True
        ) as publisher,
        _progress(stderr, source) as (progress, task),
    ):
        for number, line in enumerate(source, start=1):
            progress.advance(task, len(line))
            if (wanted is not None and number not in wanted) or not line.strip():
                continue
            try:
                event = _event(line)
                key = None if key_field is None else _key(event, key_field)
                _send(publisher, event, key, id_of(number, line), failed)
            except PublishError as error:
                failed.line(number, error.message)
        try:
            publisher.flush()  # then leaving the block flushes nothing more
        except DeliveryError as error:
            failed.not_stored(error)
    numbers = sorted(set(failed.numbers))
    total = len(numbers) + failed.unknown
    click.echo(
        f"published {publisher.delivered} events to {stream!r}"
        + (f"; {total} lines failed and were not stored" if total else "")
    )
    if numbers:
        written = failed.write(failed_lines or _default_failed_lines(workspace, stream))
        click.echo(
            _resend_advice(stream, source.name, stdin, id_of.stable, numbers, written), err=True
        )
    if failed.unknown:
        click.echo(
            f"{failed.unknown} more events were not stored, from lines the bus did not name: "
            "send the whole input again"
            + (", and readers drop the copies of the lines stored" if id_of.stable else ""),
            err=True,
        )
    if total:
        sys.exit(1)


def _resend_advice(
    stream: str, source: str, stdin: bool, stable: bool, numbers: list[int], written: Path
) -> str:
    """Which lines were not stored, where their numbers are, and how to send them again."""
    again = (
        "with the same input on stdin and `--lines " + shlex.quote(str(written)) + "`"
        if stdin
        else f"with `millrace publish {stream} {shlex.quote(source)} "
        f"--lines {shlex.quote(str(written))}`"
    )
    safety = (
        "each keeps its record id, so readers drop a copy of one the bus stored after all"
        if stable
        else "their ids were random (--ids line makes them stable), so a copy of one the bus "
        "stored after all would not be dropped"
    )
    return (
        f"lines not stored: {_ranges(numbers)}; their numbers are in {written}\n"
        f"send them again {again}: {safety}"
    )


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


class _LineIds:
    """The record id of each line: 24 hex digits then the line's number in hex (8 or more).

    `line` ids hash the stream, the source's path, the line's number and its text, so a line
    sent again gets the id it had; `random` ids draw the 24 digits once per run. Either way the
    line's number can be read back from the id of an event the bus did not store.
    """

    def __init__(self, stream: str, source: str | None, kind: str) -> None:
        self.stable = kind == "line"
        self._salt = f"{stream}\0{'' if source is None else Path(source).resolve()}\0".encode()
        self._prefix = os.urandom(12).hex()

    def __call__(self, number: int, line: bytes) -> str:
        if self.stable:
            digest = hashlib.blake2b(self._salt + line.rstrip(b"\r\n"), digest_size=12)
            digest.update(number.to_bytes(8, "big"))
            return f"{digest.hexdigest()}{number:08x}"
        return f"{self._prefix}{number:08x}"

    @staticmethod
    def number(record_id: str) -> int | None:
        """The line number in `record_id`, or None for an id this class did not make."""
        try:
            return int(record_id[24:], 16)
        except ValueError:
            return None


class _FailedLines:
    """The lines not stored, and what the terminal was told about them."""

    def __init__(self, stderr: Console, id_of: _LineIds) -> None:
        self.numbers: list[int] = []
        self.unknown = 0  # lines not stored whose numbers the bus's reports did not give
        self._stderr = stderr
        self._id_of = id_of
        self._shown = 0

    def line(self, number: int, message: str) -> None:
        self.numbers.append(number)
        self._say(f"line {number}: {message}; not sent")

    def not_stored(self, error: DeliveryError) -> None:
        numbers = [self._id_of.number(record_id) for record_id in error.record_ids]
        known = sorted(number for number in numbers if number is not None)
        self.numbers.extend(known)
        self.unknown += error.count - len(known)
        self._say(f"lines {_ranges(known) or '(not known)'}: {error.message}")

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{number}\n" for number in sorted(set(self.numbers))))
        return path

    def _say(self, text: str) -> None:
        self._shown += 1
        if self._shown <= _MAX_LINE_ERRORS_SHOWN:
            self._stderr.print(text, markup=False, highlight=False, soft_wrap=True)
        elif self._shown == _MAX_LINE_ERRORS_SHOWN + 1:
            self._stderr.print("more failed lines are counted but not shown", highlight=False)


def _event(line: bytes) -> JsonObject:
    """The JSON object on `line`; `PublishError` saying why when there is none."""
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PublishError(f"not valid JSON: {error}") from None
    except RecursionError:
        raise PublishError("not read: JSON nested too deeply") from None
    except ValueError as error:  # such as an integer of more digits than Python reads
        raise PublishError(f"not read: {error}") from None
    if not isinstance(event, dict):
        raise PublishError(f"not a JSON object but {type(event).__name__}")
    return event


def _send(
    publisher: Publisher, event: JsonObject, key: str | None, record_id: str, failed: _FailedLines
) -> None:
    """Queue `event`; earlier events the bus did not store are recorded in `failed`."""
    while True:
        try:
            publisher.send(event, key=key, record_id=record_id)
            return
        except DeliveryError as error:
            # Raised for earlier events, before this one was queued: queue it now.
            failed.not_stored(error)


def _line_numbers(source: IO[str]) -> set[int]:
    """The line numbers a --lines file lists: N or N-M, one a line; # starts a comment."""
    numbers: set[int] = set()
    for place, text in enumerate(source, start=1):
        text = text.split("#", 1)[0].strip()
        if not text:
            continue
        first, dash, last = text.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise click.BadParameter(
                f"line {place} holds {text!r}, not a line number N or a range N-M",
                param_hint="--lines",
            ) from None
        numbers.update(range(low, high + 1))
    return numbers


def _ranges(numbers: list[int], most: int = 10) -> str:
    """Sorted line numbers as ranges, `2, 5-9, 12`; past `most` ranges, how many more."""
    ranges: list[list[int]] = []
    for number in numbers:
        if ranges and number <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], number)
        else:
            ranges.append([number, number])
    shown = ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges[:most])
    return shown + (f" and {len(ranges) - most} more ranges" if len(ranges) > most else "")


def _default_failed_lines(workspace: Workspace, stream: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return workspace.failed_lines(stream, stamp)


def _key(event: Mapping[str, object], key_field: str) -> str | None:
    value = event.get(key_field)
    return None if value is None else str(value)


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
